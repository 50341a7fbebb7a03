// Package vllm is the codec for the KV cache events vLLM, SGLang and
// TensorRT-LLM publish over ZeroMQ: frame 3 of each message, a msgpack batch
// [ts, events, dp_rank] written by Python's msgspec.
//
// The format has drifted across engine versions: events were tagged arrays
// (["BlockStored", f1, f2, ...], one more field per release) and are tagged
// maps ({"type": "BlockStored", ...}) in current vLLM; hashes are unsigned
// ints, signed ints (SGLang) or 32-byte digests; old batches have two
// elements. A fleet in the middle of an upgrade mixes them, so every event is
// decoded on its own from its msgpack type, missing trailing fields read as
// nil and unknown fields are skipped.
//
// The package has two layers so the wire format never leaks into the domain
// model (internal/kvevent):
//
//   - ParseBatch and Encode translate between bytes and RawBatch, a faithful
//     picture of what the engine sent (nil versus absent, signed versus
//     unsigned). The mock engine builds RawBatch values and publishes
//     exactly what vLLM publishes.
//   - Decoder turns a RawBatch into kvevent.Event values for one worker rank:
//     it validates (block size, token count, self-referencing or duplicate
//     hashes), filters non-main attention groups, and computes the router's
//     own local hashes from the token ids with internal/kvhash. Engine
//     hashes stay opaque ids. Every event it drops is reported with a
//     Reason so the caller can count it.
//
// Parsing never trusts a length: every count is checked against the bytes
// left before anything is allocated, nesting depth is bounded, and limits
// cap blocks and tokens per event. Bad input yields an error or a refusal,
// never a panic.
package vllm
