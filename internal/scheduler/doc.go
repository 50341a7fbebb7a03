// Package scheduler picks the worker rank for a request from per-candidate
// facts (cache overlap per tier, load) and explains the choice.
//
// Why a separate package: the cost model is the heart of the router and has
// many knobs. Keeping it a pure function of its inputs (no index, no
// ledger, no clock; randomness from a *rand.Rand the caller seeds) lets the
// simulator compare policies and lets tests check the arithmetic exactly.
//
// The kv cost, per eligible candidate w (design §1, Dynamo's E3 form):
//
//	raw_prefill_blocks = (active_prefill_tokens[w] + input_tokens) / block_size   (0 with prefill tracking off)
//	decay              = 1 / (1 + overlap_score_credit_decay · excess[w])
//	excess[w]          = ((active_prefill_tokens[w] − min over candidates) / block_size) / ceil(input_tokens / block_size)
//	overlap_credit     = overlap_score_credit · decay · device_blocks
//	                   + host_cache_hit_weight · host_blocks + disk_cache_hit_weight · disk_blocks
//	                   + shared_cache_multiplier · shared_blocks
//	adjusted_prefill   = max(raw_prefill_blocks − overlap_credit, 0)     (raw − credit, may be negative, with prefill_clamp off)
//	cost               = prefill_load_scale · adjusted_prefill + decode_blocks + decode_active_request_weight · active_requests
//
// Host, disk and shared blocks are those held beyond the device prefix.
//
// The clamp at zero is the documented default. It has a cost at high
// credit: once overlap_score_credit · device_blocks covers a worker's raw
// prefill, more cached blocks no longer lower its cost, so every worker
// holding at least 1/credit of the prompt ties with the one holding all of
// it and the decode term decides. Config.PrefillClamp = false (opt-in) lets
// the adjusted prefill go negative so the longer prefix keeps winning; in
// the simulator that, with a credit of 8–16 and a large prefill load scale,
// is what brings a conversation trace to within a few percent of the
// shared-pool bound.
//
// At temperature 0 the lowest cost wins, exact ties broken uniformly at
// random; at T > 0 candidate i is drawn with
// p_i ∝ exp(−(c_i − min)/((max − min)·T)), uniform when all costs are equal.
//
// Selection runs in three steps: eligibility (allow-list, pinned worker, dp
// rank range, DOWN), opt-in busy thresholds (decode blocks as a fraction of KV
// capacity, prefill tokens absolute and as a fraction of max batched tokens)
// and the Policy (kv, kv-time, round-robin, random, least-loaded). Every candidate gets
// an Explanation row, excluded ones with the reason, so /v1/route and the
// status page can show why a worker was or was not chosen.
//
// The kv-time policy (KVTime) compares candidates in seconds instead: per
// eligible row, from that worker rank's time model (package timemodel),
//
//	TTFT     = time of the passes over (booked prefill + own uncached tokens)
//	         + host/disk blocks × block size × KV bytes per token / bandwidth
//	         + KV wait (blocks beyond capacity, freed at the learned residence)
//	pressure = residence × new blocks / capacity × u/(1 − u), u = KV use
//	decode   = decode_weight × running requests × (own prefill passes − the decode steps they displace)
//	later    = λ × x × (queue + x/2), λ the rank's request rate, x the own prefill
//	recompute = recompute_weight × the prefill spent here on prompt tokens another
//	           eligible rank holds cached and its running requests do not share
//	total    = TTFT + pressure + decode + later + recompute
//
// (later and recompute price what the placement costs other requests: the
// delay its prefill adds to the first tokens of later arrivals there, and
// fleet prefill spent computing a private prefix twice),
// and picks the lowest total; rows within a band of the lowest (the
// larger of the tolerance and the fastest row's model error, + 1 ms) tie,
// and the tie goes to the longest cached prefix (all tiers), then the
// lowest total. Its rows carry the Prediction.
package scheduler
