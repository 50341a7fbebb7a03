// Package loadgen is the online load generator behind `kvrouter bench`: it
// sends a workload (internal/workload) over HTTP to any OpenAI-compatible
// endpoint — kvrouter, a bare worker, or another server — and measures
// what a client sees: time to first token, inter-token latency, end-to-end
// latency and errors, per request, streaming.
//
// Why a separate package from the simulator: the simulator measures the
// fleet on a virtual clock, which says how good the routing decisions are;
// the online bench measures the real thing, including HTTP, SSE framing,
// event-plane lag and the wall clock. Both feed the same report.Recorder so
// their tables, JSON and plots compare like for like.
//
// Open loop: requests are sent at their workload arrival times (already
// divided by --speedup), whatever the server's state, and the source's own
// concurrency cap (closed-loop workloads) is honoured. Closed loop: a fixed
// number of requests in flight. Runs are bounded in wall time and in count.
// Connections come from one bounded pool (Config.MaxConns), so a thousand
// concurrent streams do not open a thousand sockets unless asked to.
//
// Prompts are token ids for /v1/completions by default, so the server's
// tokenizer cannot change the prefix structure; Config.Text renders ids to
// text instead (needed for /v1/chat/completions).
package loadgen
