package router

import (
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// Saturated reports whether every worker rank that is not DOWN is over
// one of the thresholds t, judged on the load booked now (and false when
// no rank is up: the request should be routed, and refused, at once).
// The front door's admission queue holds requests while it is true; a
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
		l, _ := r.seq.Load(rk.w)
		c := scheduler.Candidate{ActivePrefillTokens: l.ActivePrefillTokens, ActiveBlocks: l.ActiveBlocks,
			KVCapacityBlocks: rk.ws.info.KVCapacityBlocks, MaxBatchedTokens: rk.ws.info.MaxBatchedTokens}
		if t.Busy(&c) == scheduler.Eligible {
			return false
		}
	}
	return up > 0
}

// PoolSaturated is Saturated: a Router is one model's pool, whatever
// model is named. It lets a single Router stand where the front door
// expects Pools (see Pools.PoolSaturated).
func (r *Router) PoolSaturated(_ string, t scheduler.Thresholds) bool { return r.Saturated(t) }

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
	ws := r.ranks[p].ws
	l, _ := r.seq.Load(w)
	c := scheduler.Candidate{ActivePrefillTokens: l.ActivePrefillTokens, ActiveBlocks: l.ActiveBlocks,
		KVCapacityBlocks: ws.info.KVCapacityBlocks, MaxBatchedTokens: ws.info.MaxBatchedTokens}
	return t.Busy(&c) != scheduler.Eligible
}
