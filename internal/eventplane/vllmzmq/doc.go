// Package vllmzmq carries vLLM's KV events over ZeroMQ, both ways: a
// Publisher that behaves like vLLM's ZmqEventPublisher (used by the mock
// engine) and a Subscriber that consumes any engine speaking that protocol
// (vLLM, SGLang, TensorRT-LLM, the mock engine) for the router.
//
// The protocol: a PUB socket sends every batch as three frames (topic,
// sequence number as 8 bytes big-endian, msgpack payload), the sequence
// starting at 0 and growing by one per batch. PUB/SUB loses messages
// silently (slow joiners, high-water mark, publisher errors), so an
// optional ROUTER socket keeps the last buffer_steps batches and replays
// them to a DEALER that sends [“”, start_seq]: every buffered batch with a
// sequence ≥ start_seq, then an END marker (sequence FF×8). Newer vLLM adds
// the topic to each reply; older vLLM and SGLang do not. Both are spoken
// and understood.
//
// The Subscriber turns the stream into an ordered, gap-free series of
// kvevent.Event values for one worker rank, or says loudly that it could
// not: a gap is filled by replay; when replay cannot fill it, or the
// sequence goes backwards (engine restart), the worker rank is cleared
// (blocks we may have missed removals for must not be routed to) and its
// state is DEGRADED with a reason until the stream is contiguous again.
// Those rules are the pure state machine in the subpackage batchseq,
// tested without sockets; the Subscriber owns the sockets, the goroutines,
// the decoder, the metrics and the logs, and runs the replays the machine
// asks for.
//
// Sockets come from github.com/go-zeromq/zmq4 (pure Go, no cgo) with
// infinite dial retries; the subscriber redials a dropped connection itself
// (zmq4's automatic reconnect recurses on a peer that keeps failing) and
// every socket runs over the zmtpguard frame size cap.
package vllmzmq
