// Package server is the mock engine's worker process: an OpenAI-compatible
// HTTP server shaped like `vllm serve` in front of one engine core
// (internal/mocker) per data-parallel rank.
//
// Each rank runs in its own goroutine on the real clock: it steps its engine,
// sleeps for the step's modelled duration (divided by the speedup ratio, so
// tests run fast), then delivers the step's tokens to the waiting HTTP
// handlers and its KV events to the local indexer and the event sinks (ZMQ
// in vLLM's format, later the NATS event plane). Handlers never block a rank:
// tokens queue per request.
//
// The API covers what routers and benchmarks use: /v1/completions (text or
// token-id prompts, single or batch), /v1/chat/completions (rendered with
// Config.ChatTemplate, the model's Jinja template, tools and
// enable_thinking included; a plain ChatML fallback without one), SSE streaming with stream_options.include_usage,
// usage.prompt_tokens_details.cached_tokens with the real number of prompt
// tokens served from the prefix cache, /v1/models, /health, /tokenize,
// /detokenize, /reset_prefix_cache and /metrics with vLLM's metric names.
// Errors use vLLM's JSON error body. Fault injection (dropped, duplicated,
// delayed event batches, event sequence restarts, a crash after N requests)
// serves reliability tests. Disaggregation (Disagg, pd.go) plays a vLLM
// NixlConnector or SGLang bootstrap prefill or decode worker, the KV side
// channel being /kv/pull and /kv/release on the worker's HTTP port (and
// an optional bootstrap port).
package server
