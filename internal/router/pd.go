package router

import (
	"slices"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// Role is a worker's part in a disaggregated (prefill/decode) fleet.
type Role uint8

// Roles.
const (
	// RoleBoth serves whole requests (aggregated); the zero value.
	RoleBoth Role = iota
	// RolePrefill serves only prefill hops.
	RolePrefill
	// RoleDecode serves decode hops, and whole requests whose prefill hop
	// was skipped.
	RoleDecode
)

// String names the role as the registry spells it.
func (r Role) String() string {
	switch r {
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return "both"
}

// Phase says which hop of a request Route decides.
type Phase uint8

// Phases.
const (
	// PhaseWhole routes a whole request to a worker that can serve it
	// alone: any worker but a prefill-role one.
	PhaseWhole Phase = iota
	// PhasePrefill routes the prefill hop among prefill-role workers by
	// the usual KV-aware cost; the booking expects one output token.
	PhasePrefill
	// PhaseDecode routes the decode hop among decode-role workers (and
	// aggregated ones, which can take a transfer too) by decode load
	// alone: the prompt's blocks count as new decode blocks there and no
	// prefill is booked (the KV arrives by transfer).
	PhaseDecode
)

// String names the phase.
func (p Phase) String() string {
	switch p {
	case PhasePrefill:
		return "prefill"
	case PhaseDecode:
		return "decode"
	}
	return "whole"
}

// hop is the phase as the scheduler's kv-time policy knows it.
func (p Phase) hop() scheduler.Hop {
	switch p {
	case PhasePrefill:
		return scheduler.HopPrefill
	case PhaseDecode:
		return scheduler.HopDecode
	}
	return scheduler.HopWhole
}

// serves reports whether a worker of role r may take phase p.
func (p Phase) serves(r Role) bool {
	switch p {
	case PhasePrefill:
		return r == RolePrefill
	case PhaseDecode:
		return r != RolePrefill
	}
	return r != RolePrefill
}

var zeroScale = 0.0

// phaseRequest narrows req to the workers that serve its phase, under the
// router's lock. ok is false when no known worker does (the caller
// refuses with ErrNoCandidates). A fleet without prefill or decode
// workers routes whole requests unchanged.
func (r *Router) phaseRequest(req *Request) (ok bool) {
	if req.Phase == PhaseWhole && !r.disagg {
		return true
	}
	var allowed []kvevent.WorkerID
	for id, ws := range r.workers {
		if req.Phase.serves(ws.info.Role) && (len(req.AllowedWorkers) == 0 || slices.Contains(req.AllowedWorkers, id)) {
			allowed = append(allowed, id)
		}
	}
	if len(allowed) == 0 {
		return false
	}
	req.AllowedWorkers = allowed
	if req.Phase == PhaseDecode {
		req.Overrides.PrefillLoadScale = &zeroScale
	}
	return true
}

// noteRoles counts the workers of each role; called by rebuild.
func (r *Router) noteRoles() {
	r.roles = [3]int{}
	for _, ws := range r.workers {
		if int(ws.info.Role) < len(r.roles) {
			r.roles[ws.info.Role]++
		}
	}
	r.disagg = r.roles[RolePrefill]+r.roles[RoleDecode] > 0
}

// HasRole reports whether some known worker, DOWN or not, has role role.
// It is on every request's path (the front door asks whether the fleet
// is disaggregated): a count read under the lock.
func (r *Router) HasRole(role Role) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int(role) < len(r.roles) && r.roles[role] > 0
}
