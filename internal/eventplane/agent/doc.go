// Package agent is the worker-side sidecar (`kvrouter agent`): it sits next
// to one vLLM/SGLang/TensorRT-LLM engine, reads the engine's native ZMQ KV
// event stream on localhost (internal/eventplane/vllmzmq), applies every
// event to its own local indexer first (ids counting up by one per event),
// then publishes it as a Dynamo RouterEvent on NATS, answers routers'
// recovery queries from the local indexer, and keeps the worker registered
// in the NATS KV registry with a heartbeat.
//
// Why a sidecar: engines only speak lossy ZMQ PUB/SUB with a short replay
// buffer, and routers may be many, far away, and restarted at any time. The
// agent turns one fragile local stream into a fan-out that every router can
// recover from (range or full dump), without the engine knowing.
package agent
