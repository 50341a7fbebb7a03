// Package affinity keeps session affinity: which worker rank a
// conversation's requests go to, for a TTL after its last request, so
// that each turn lands where the previous turns' KV cache is.
//
// Why it exists: the prefix index finds a conversation's cache too, but
// only once the worker's KV events arrived and only while the cost
// function does not prefer an idler worker; clients that name their
// session (a header) ask for stickiness outright. The front door pins a
// request to its session's worker unless that worker is saturated or
// gone, and binds the session to wherever the request was routed.
// Bindings are shared between router replicas (first binding wins; each
// replica keeps its own TTL clock).
//
// It is pure: no I/O, no goroutines, no clock (time is an argument), and
// bounded: at most MaxSessions bindings, the one expiring soonest making
// room for a new one. Not safe for concurrent use.
package affinity
