// Package mpack is bounded MessagePack reading shared by the project's
// wire codecs (Dynamo RouterEvents, vLLM KV event batches, replica sync,
// recovery and snapshot messages).
//
// Every codec reads payloads that arrive from the network, so the same three
// guards were needed everywhere: a declared length (string, array, map, ext)
// is checked against the bytes actually present before anything is
// allocated for it; nesting of values that are skipped is limited, so
// recursion never grows with the input; and 64-bit hashes are read from
// either unsigned or signed integers (a negative one is reinterpreted as its
// two's-complement bits, as Dynamo does).
//
// The package knows nothing of any codec's fields: each codec keeps its own
// wire knowledge and uses one of three entry points:
//
//   - Header and Skip work on a byte slice and an offset and allocate
//     nothing (the vLLM scanner's hot path).
//   - Reader reads values one after another from a byte slice.
//   - Decoder wraps vmihailenco/msgpack's Decoder over a byte slice and adds
//     the guards to it.
package mpack
