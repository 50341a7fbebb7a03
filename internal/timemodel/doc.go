// Package timemodel predicts, per worker rank, how long the work the router
// sends it will take: the prefill passes before a request's first token and
// the step time of its running decodes. It is learned online from what the
// router observes anyway (prompt and cached tokens, the queue booked ahead,
// time to first token, inter-token times), so a routing policy can compare
// candidates in seconds rather than in hand-weighted block counts.
//
// Why a separate package: the fit is numerical code with its own failure
// modes (outliers, ill-conditioning, stale data) that deserve tests of their
// own, and it must stay pure (no clock, no goroutines: time is an argument)
// so that the scheduler and the simulator can use it deterministically.
//
// The prefill model is a per-pass polynomial p(n) = a + b·n + c·n² in
// milliseconds for one forward pass over n tokens. The work behind a first
// token (the booked queue plus the request's own uncached tokens, in chunks
// of the engine's max batched tokens shared with the running decodes) is a
// sum of such passes, which is linear in (a, b, c): each observation is one
// row of a weighted least-squares problem over three features. The decode
// model is d(u) = e + f·u + g·u² milliseconds per step at KV use fraction u.
//
// Both fits start from the mocker's own polynomials (this package owns
// those constants; the mocker's timing calls them) as a few pseudo-samples
// that never decay, so a cold router behaves as if every worker ran at the
// mocker's speed. Data is held as exponentially decayed sufficient
// statistics (half-life Config.HalfLife, default 15 s): memory is fixed per
// worker and a worker that slows down dominates its own fit within a few
// half-lives. Outliers are down-weighted as they arrive (a Huber weight on
// the relative residual against the current fit, the threshold a multiple
// of the decayed mean absolute residual), one reweighting step per sample.
// That decayed mean absolute residual is also the model's stated precision
// (PrefillError). A model that gets no samples relaxes toward the prior
// (Relax, at most once per eighth of a half-life), so that a worker once
// seen slow is tried again. Besides the fits the model keeps the decayed
// mean time a request holds its KV blocks (the residence), which prices KV
// use in the kv-time policy, and its decayed request rate (RequestRate),
// which prices the delay a prefill there adds to the requests after it.
package timemodel
