// Package frontend is kvrouter's front door: an OpenAI-compatible HTTP
// proxy that routes every completion to the worker where serving it costs
// least, plus the router-native API (/v1/route, /v1/query, /v1/workers),
// probes (/health, /ready), /metrics and a status page. docs/api.md
// documents the whole HTTP surface.
//
// Why it exists: a KV-aware router is only as good as the token ids it
// hashes. The front door renders chat requests with the model's own chat
// template (as vLLM's server would) and tokenizes them with the model's
// tokenizer in-process, so the blocks it hashes are the blocks the worker
// will compute; the worker's reported cached tokens are compared with the
// router's prediction and exported, so that drift between the two is
// visible instead of silent.
//
// Per request: read the body within MaxBodyBytes and BodyReadTimeout (a
// stalled body gets 408 and its connection is closed); read the few fields
// it needs with a validating scanner (malformed JSON is 400, an unknown
// model 404, max_tokens or n out of range or a field of the wrong type 400
// naming the field, an over-long prompt 413 — judged from the byte length
// first where that is decisive, and tokenizing stops at the limit);
// tokenize, a large prompt only once one of TokenizeConcurrency slots is
// free (503 after TokenizeQueueTimeout); Route (which
// books the request on the chosen worker rank); forward the original body
// (or, with ForwardTokenIDs, the token ids) and stream the response back
// unchanged, flushing whatever arrives as it arrives. The booking follows
// the response: MarkPrefillCompleted at the first token (the first SSE
// event carrying choices, or the first body byte when not streaming),
// SetGenerated as tokens stream when the router tracks output blocks, and
// Free exactly once at the end — completion, worker error, or client
// disconnect, which also cancels the upstream request.
//
// Nothing accepted is lost: the client's response is committed only when
// the worker's first body byte arrives, so a worker that refuses the
// connection, answers 5xx, or breaks before its first byte is excluded
// and the request is routed again (the old booking freed), up to
// MaxRetries times; after that the client gets the last worker error
// (502, or the worker's own 5xx). A worker that fails mid-stream ends the
// stream with an in-band SSE error event.
//
// Nor is anything pinned by a silent worker: StreamIdleTimeout bounds each
// wait on a worker once the request is sent (headers to first byte, chunk
// to chunk, a stream's headers). The timer runs only while the proxy reads
// from the worker, so a slow client (WriteTimeout's business) is never
// blamed on the worker. On expiry the upstream request is cancelled and
// the booking freed; the client gets 504 worker_timeout if nothing was
// sent yet (not retried: the worker may be busy with it), an SSE error
// event mid-stream, or an aborted connection for a non-streaming body cut
// short, never a truncated body that looks whole. A forced shutdown
// (Server.Shutdown past ShutdownTimeout) closes such streams and waits
// briefly for their handlers, so nothing outlives it.
//
// With QueueConfig on, a completion request first passes the admission
// queue (queue.go): while every worker of its model's pool is over the
// queue thresholds, or its tenant is at its in-flight cap, it waits and
// is released in the queue's order as its pool's capacity frees. Each
// model pool has a queue of its own, judged by that pool's saturation
// (Router.PoolSaturated), so one model's overload never holds, nor is
// relieved by, another model's capacity; a tenant's in-flight cap spans
// the models. Likewise each LoRA adapter of a pool (its requests go only
// to the workers with it loaded) has a queue of its own, judged by the
// saturation of those workers only (Router.WorkersSaturated), while the
// base model's requests keep the whole pool's queue; releases take the
// pools' and adapters' queues in turn.
//
// In a disaggregated fleet (prefill-role workers known to the router) a
// request takes two booked hops, prefill then decode, in vLLM's or SGLang's
// protocol (pd.go, docs/pd.md); the same retry and timeout rules apply to
// each, and X-Kvrouter-Prefill-Worker names the prefill worker. It passes
// the admission queue once, before its first prefill hop (retries do not
// pass it again); its pool is saturated when all its prefill-role workers,
// or all its decode-side workers, are over the thresholds, since it needs
// a hop on each. The TTFT target judges the prefill hop's worker (the
// decode worker's when the hop is bypassed); staggered release does not
// narrow a released PD request's workers.
//
// The package does no discovery and owns no router state: the composition
// root gives it the router, a Directory (worker id to name, URL and
// state), the tokenizer and chat template, an optional Index for
// /v1/query, a Prometheus registry, a logger, a clock and a readiness
// func (Deps).
package frontend
