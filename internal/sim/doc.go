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
// without events (approximate mode).
//
// Besides the router's policies the simulator offers PolicyOracle, a
// diagnostic that sends each request to the worker whose cache holds its
// longest prefix with no load term. It answers "is the shared-pool bound
// reachable with separate pools at all?": on the Mooncake traces it reaches
// 98–99 % of the bound, so a gap between kv and the bound is the router's
// cost function, not the fleet (docs/benchmarks.md, Routing quality).
package sim
