// Package timeline keeps the last few minutes of a router's vital signs in
// fixed memory, for the status page's charts: one sample per step (say
// 5 s) over a span (say 15 min), fleet-wide (requests, errors, TTFT
// quantiles) and per worker (requests in flight, prefill tokens pending,
// KV blocks used and capacity, predicted and actual cached tokens).
//
// Why it exists: an operator glancing at the status page wants to see
// whether load is balanced and whether the router's cache predictions hold,
// over the last minutes, without running Prometheus and Grafana. The
// router cannot grow with uptime, so the history is a ring of a fixed
// number of slots, and the number of worker series is bounded too.
//
// It is pure: no clock, no goroutines, no I/O. Every call takes the time;
// the caller (the front door) feeds it finished requests and periodic
// gauge readings and serialises access.
package timeline
