// Package kvevent is the engine-neutral model of KV cache events: what a
// worker (one data-parallel rank of it) stored, removed or cleared, on which
// storage tier.
//
// Engines name blocks by their own hashes (vLLM uses sha256 or CBOR-based
// ids, SGLang and TensorRT-LLM their own); those are opaque here and serve
// only to find a block's parent and to remove it. Each stored block also
// carries the local hash the router recomputed from its token ids
// (internal/kvhash), which is what the index walks by.
//
// Codecs for wire formats (vLLM ZMQ msgpack, Dynamo RouterEvent) live in
// sub-packages and translate into this model; the model knows nothing about
// msgpack or JSON.
package kvevent
