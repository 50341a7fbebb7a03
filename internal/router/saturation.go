package router

import (
	"slices"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// Saturated reports whether every worker rank that is not DOWN is over
// one of the thresholds t, judged on the load booked now (and false when
// no rank is up: the request should be routed, and refused, at once).
// The simulator's admission queue holds requests while it is true (the
// front door's asks HopsSaturated, the same in an aggregated fleet); a
// released request is then routed by the usual cost among every rank,
// so the queue meters admission without steering requests away from
// their cached prefixes.
func (r *Router) Saturated(t scheduler.Thresholds) bool {
	if !t.On() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	up := 0
	for _, rk := range r.ranks {
		if rk.ws.down {
			continue
		}
		up++
		if r.hasRoom(rk, t) {
			return false
		}
	}
	return up > 0
}

// PoolSaturated is HopsSaturated: a Router is one model's pool, whatever
// model is named. It lets a single Router stand where the front door
// expects Pools (see Pools.PoolSaturated).
func (r *Router) PoolSaturated(_ string, t scheduler.Thresholds) bool { return r.HopsSaturated(t) }

// HopsSaturated is Saturated judged per hop, what the front door's
// admission queue asks: whether a request could find room for each of
// the hops it takes. The ranks are split in two sides: the prefill-role
// ranks (a disaggregated request's prefill hop) and the others, which
// take whole requests and decode hops (decode and both roles). The pool
// is saturated when either side has a rank that is not DOWN and every
// such rank of that side is over one of the thresholds t: a
// disaggregated request needs a prefill worker and a decode worker, so
// one full side is enough to hold it, whatever room the other side has.
// A side with no rank up does not count (with no prefill worker up the
// prefill hop is skipped, and a request with nowhere to go is routed,
// and refused, at once).
//
// Every threshold judges every rank, on the load booked there: in a
// disaggregated fleet pending prefill tokens are booked on the prefill
// workers (a decode hop books none; only whole requests, the prefill hop
// skipped, add prefill on a decode worker), and the decode hops' prompt
// and output blocks on the decode workers, while a prefill worker holds
// a prompt's blocks only until its prefill hop ends. So the prefill
// thresholds in effect meter the prefill side and the KV threshold
// mostly the decode side, each where its load lives; a threshold no rank
// of a side can go over leaves that side never saturated.
//
// In a fleet with no prefill-role worker (aggregated) the prefill side is
// empty and HopsSaturated is Saturated.
func (r *Router) HopsSaturated(t scheduler.Thresholds) bool { return r.hopsSaturated(t, nil) }

// WorkersSaturated is HopsSaturated judged among the ranks of the workers
// in allowed only, what the front door's admission queue meters a LoRA
// adapter's requests by (routed only to the workers with the adapter
// loaded, Request.AllowedWorkers): per hop, the pool is saturated when a
// side has an allowed rank that is not DOWN and every such rank of that
// side is over one of the thresholds t, whatever room the workers not
// allowed have. Allowed workers this pool does not know are ignored; none
// of allowed up (or none known) is not saturated, as HopsSaturated with no
// rank up: the request is routed, and refused, at once. An empty allowed
// set judges every rank (HopsSaturated), as an empty
// Request.AllowedWorkers routes among every worker. model is ignored (a
// Router is one pool, see PoolSaturated).
func (r *Router) WorkersSaturated(_ string, t scheduler.Thresholds, allowed []kvevent.WorkerID) bool {
	return r.hopsSaturated(t, allowed)
}

// hopsSaturated is HopsSaturated among allowed's ranks (every rank when
// allowed is empty).
func (r *Router) hopsSaturated(t scheduler.Thresholds, allowed []kvevent.WorkerID) bool {
	if !t.On() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	const prefillSide, otherSide = 0, 1
	var up, room [2]int
	for _, rk := range r.ranks {
		if rk.ws.down || (len(allowed) > 0 && !slices.Contains(allowed, rk.w.ID)) {
			continue
		}
		side := otherSide
		if rk.ws.info.Role == RolePrefill {
			side = prefillSide
		}
		up[side]++
		if room[side] > 0 {
			continue // this side has room already
		}
		if r.hasRoom(rk, t) {
			room[side]++
		}
	}
	return (up[prefillSide] > 0 && room[prefillSide] == 0) || (up[otherSide] > 0 && room[otherSide] == 0)
}

// RankSaturated reports whether worker rank w is DOWN, unknown, or over
// one of the thresholds t (false for any rank when t sets none but the
// rank is up).
func (r *Router) RankSaturated(t scheduler.Thresholds, w kvevent.WorkerRank) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.rankPos(w)
	if !ok || r.ranks[p].ws.down {
		return true
	}
	if !t.On() {
		return false
	}
	return !r.hasRoom(r.ranks[p], t)
}

// hasRoom reports whether rank rk is below every threshold of t, judged
// on the load booked there now (the scheduler's busy check on its booked
// prefill and KV blocks). Called with r.mu held.
func (r *Router) hasRoom(rk rank, t scheduler.Thresholds) bool {
	l, _ := r.seq.Load(rk.w)
	c := scheduler.Candidate{ActivePrefillTokens: l.ActivePrefillTokens, ActiveBlocks: l.ActiveBlocks,
		KVCapacityBlocks: rk.ws.info.KVCapacityBlocks, MaxBatchedTokens: rk.ws.info.MaxBatchedTokens}
	return t.Busy(&c) == scheduler.Eligible
}
