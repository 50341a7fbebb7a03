// Package dynamo is the codec for NVIDIA Dynamo's KV event-plane format:
// RouterEvent {worker_id, storage_tier, event: {event_id, data, dp_rank}},
// serialized as MessagePack with named fields (what Rust's
// rmp_serde::to_vec_named writes), bare or wrapped in Dynamo's event-plane
// envelope {topic, publisher_id, sequence, published_at, published_at_ns,
// payload}, and the JSON form of the same RouterEvent (what Dynamo's
// JetStream durable mode stores).
//
// Why a hand-written codec: the format comes from serde, whose shapes do not
// map onto Go struct tags (data is an externally tagged enum: a one-entry map
// {"stored": {...}} or {"removed": {...}}, and the unit variant "cleared" is
// a bare string), and the decoder must be liberal and safe with foreign
// input: fields in any order, unknown fields skipped, missing optional fields
// defaulted, signed hashes reinterpreted as unsigned, declared lengths never
// trusted (nothing is allocated from a length the input has not backed with
// bytes) and blocks per event capped. The encoder writes exactly what
// rmp_serde would, so a Dynamo router can consume our workers' events.
//
// Mapping to internal/kvevent: tokens_hash -> Block.LocalHash (the router's
// local hash, computed by the publisher), block_hash -> Block.EngineHash (an
// opaque engine id), storage_tier via kvevent.ParseTier. mm_extra_info and
// start_position are accepted and ignored: the multimodal contribution is
// already folded into tokens_hash, and positions are not needed by a tree
// index.
package dynamo
