// Package natsbus gives kvrouter its NATS connection: either an embedded
// nats-server (JetStream on, store under the data dir) started inside the
// process, or a client connection to an external NATS server or cluster.
//
// Why embedded by default: a router should work out of the box with one
// binary and nothing else to run, while agents and other router replicas on
// the host (or, with --nats-host, on the network) still get a real NATS
// server to publish KV events to and to register in. Pointing --nats-url at
// an external cluster swaps the embedded server for a client connection
// with the same API.
//
// The connection reconnects forever. NATS resubscribes core subscriptions
// by itself, but messages published while the connection was down are lost,
// so consumers register an OnReconnect callback to recover their state (ask
// workers for the missed event range, re-put registry records).
//
// The bus owns goroutines (the embedded server's and the client's); Shutdown
// followed by WaitForShutdown stops all of them.
package natsbus
