// Package chattemplate turns an OpenAI chat request (messages, tools,
// add_generation_prompt, chat_template_kwargs) into the prompt text a model
// was trained on, by running the model's own Jinja chat template from its
// tokenizer_config.json. The router needs the exact prompt — byte for byte
// what the engine will build — because the prompt's token blocks are what
// it hashes and matches against the engines' KV caches: one differing space
// in a tool schema shifts every block after it and the cache hit is lost.
//
// # Reference
//
// The reference is HuggingFace's apply_chat_template. Golden files in
// testdata/ were rendered by @huggingface/jinja@0.5.11, the engine behind
// transformers.js (tools/tmplgold/gen.mjs), with inputs covering plain,
// multi-turn, system, tools, tool calls and responses, enable_thinking,
// <think> reasoning, content parts, continue_final_message and Unicode; the
// tests compare byte for byte. The chat templates of Llama 3.1, DeepSeek V3
// and Gemma 3 (their tokenizer_config.json files are in
// internal/modelfiles/testdata) have goldens of their own from the same
// engine, checked with Python's Jinja2 (tools/tmplgold/families.mjs,
// testdata/<family>_golden.json). Where Python and JavaScript differ (floats
// such as 2.0, integer-like object keys), Python — what vLLM and
// transformers run — is followed.
//
// # The key-order trick
//
// Templates print tool definitions with `tool | tojson`. HuggingFace keeps
// the client's key order and Python's ", " / ": " separators. Decoding the
// request into Go maps would lose the order (and the engine's
// Render(map[string]any) sorts keys), so this package never goes through
// map[string]any: a small JSON parser (jsonvalue.go) builds the template
// engine's ordered values (jinja.NewDict + Set, NewList, ...) straight from
// the raw bytes, and rendering goes through RenderValues. ChatRequest
// therefore keeps messages, tools and chat_template_kwargs as
// json.RawMessage.
//
// The engine (github.com/ardanlabs/jinja v1.8.0) has its own tojson, which
// prints floats of 1e6 and above in exponent form and escapes U+2028/U+2029,
// unlike Python. The tojson filter is therefore renamed in the template
// source at compile time (only inside tags, outside string literals) and
// served by pyToJSON, written here to follow json.dumps's output rules, including
// indent, separators, sort_keys and ensure_ascii. The map and trim filters
// are replaced the same way (filters.go): the engine's map ignores a filter
// name (Llama 3.1's tool template does map('trim')) and its trim strips
// Go's white space rather than Python's.
//
// # Messages as the template sees them
//
// PreprocessNone (default) hands the messages over as sent, like
// transformers: content parts stay a list (the Qwen3 template then fails,
// as it does in HuggingFace), tool-call arguments given as a JSON string
// stay a string. PreprocessVLLM reproduces what vLLM's OpenAI server does
// first (join text parts with "\n", null content to "", arguments parsed
// into objects); use it to predict a vLLM worker's prompt.
//
// # Known differences from the reference
//
// Goldens from Python's Jinja2, configured as transformers configures it,
// back this up: the curated cases are cross-checked (pycheck.py), 200
// random Qwen3 conversations come from pyrandom.py, and 30 feature probes
// (pyprobe.py, TestEngineProbe) pin what the engine does differently:
//
//   - None prints and concatenates as "" where Jinja2 prints "None" or
//     raises (a Qwen3 assistant message with null content renders instead
//     of failing; the output then equals vLLM's).
//   - Floats printed directly ({{ 2.0 }}, not via tojson) use Go's %g;
//     dictsort pairs print as lists; no format filter; no 1e3 literals.
//   - Integers beyond int64 become floats.
//
// A compiled Template is immutable and safe for concurrent use; each Render
// decodes its own values. Inputs are bounded by Config, and every failure is
// an error wrapping one of the package's sentinels, never a panic (engine
// panics are recovered into ErrRender).
package chattemplate
