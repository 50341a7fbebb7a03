// Package zmqevents is the event plane without NATS (--event-plane zmq):
// each worker process (agent, mock worker) publishes its RouterEvents on a
// ZMQ PUB socket and answers recovery queries on a ZMQ ROUTER socket;
// routers dial every worker's two endpoints from the static worker list.
//
// Messages are the NATS plane's, framed for ZMQ: a live event is two
// frames [topic "kv-events", RouterEvent (in Dynamo's envelope unless
// bare)]; a query is one frame (recovery.EncodeRequest) sent by a DEALER,
// answered by one message per reply part (recovery.EncodeReply). The
// recovery semantics are recovery.Stream's, shared with NATS.
//
// Why bother: some deployments want no broker at all. The price: no replica
// sync between routers, and PUB/SUB's slow-joiner loss right after a
// connect, which the next event's gap (or a resync) repairs.
package zmqevents
