// Package sim is the offline simulator: a whole fleet in one process on a
// virtual clock. N mock engine cores (internal/mocker) and the router core
// (internal/router) are driven by an event queue — request arrivals and
// engine step ends — so an hour of trace runs in seconds, with no sockets,
// no goroutines and no sleeping, and the same inputs give the same results.
//
// Each engine steps back to back while it has work; a step's outputs and KV
// events take effect when the step ends (its modelled duration after it
// began), as in the mocker's HTTP worker. KV events are folded into the
// router's index at that moment (exact mode) unless the fleet is simulated
// without events (approximate mode). Every flight also feeds the router's
// per-worker time models (Router.Observe: TTFT with the load booked at
// send, mean inter-token time, residence), as the front door does online;
// the kv-time policy reads them.
//
// Config.Fleet gives workers their own speed, token budget and KV capacity
// (a fleet that mixes GPU generations), and Config.SpeedChanges changes the
// speeds at set virtual times (a worker that slows down). The grid
// (KVGrid, GridRuns, Summarize) lists the kv policy's 36 settings of its
// cost knobs beside other policies per scenario and rates each run against
// the best kv setting found; running the list is the caller's (cmd runs it
// in parallel: every run is independent and deterministic).
//
// Besides the router's policies the simulator offers PolicyOracle, a
// diagnostic that sends each request to the worker whose cache holds its
// longest prefix with no load term. It answers "is the shared-pool bound
// reachable with separate pools at all?": on the Mooncake traces it reaches
// 98–99 % of the bound, so a gap between kv and the bound is the router's
// cost function, not the fleet (docs/benchmarks.md, Routing quality).
package sim
