package replica

import (
	"slices"
	"time"
)

// Why a peer's snapshot is fetched again after start (the reason label of
// kvrouter_replica_resyncs_total).
const (
	reasonReconnect = "reconnect" // this router's NATS connection came back
	reasonPeriodic  = "periodic"  // every Config.ResyncInterval
	reasonGap       = "gap"       // a hole in the peer's event stream
	reasonClaim     = "claim"     // the peer says it is ahead of what arrived
	reasonReturned  = "returned"  // the peer was declared gone and came back
	reasonJoined    = "joined"    // a new peer's record appeared (its earlier events were refused)
	reasonRetry     = "retry"     // an earlier fetch failed or was incomplete
)

var resyncReasons = []string{reasonReconnect, reasonPeriodic, reasonGap, reasonClaim, reasonReturned, reasonJoined, reasonRetry}

// claimGrace is how long a peer's claimed stream position may stay ahead
// of what arrived before its snapshot is fetched: events published just
// before its request are still on their way when the request lands.
const claimGrace = time.Second

// A failed or incomplete fetch is retried after retryBase, then twice as
// long each time, maxRetries times (0.25+0.5+1+2+4 s: after a NATS
// restart a peer may reconnect seconds after this router, and until it
// does a request fails at once with "no responders"); the next trigger
// (periodic, gap, reconnect, claim) starts over.
const (
	retryBase  = 250 * time.Millisecond
	maxRetries = 5
)

type resyncReq struct {
	reason    string
	tries     int
	notBefore time.Time // zero: now
}

// flag asks the resync loop to fetch peer's snapshot now (once, however
// many times it is flagged before the loop gets to it; a retry waiting
// for its turn is brought forward).
func (s *Sync) flag(peer uint64, reason string) {
	s.pmu.Lock()
	if r, ok := s.pending[peer]; !ok || !r.notBefore.IsZero() {
		s.pending[peer] = resyncReq{reason: reason}
	}
	s.pmu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// flagAll flags every live peer.
func (s *Sync) flagAll(reason string) {
	for _, p := range s.core.Peers() {
		s.flag(p, reason)
	}
}

// take removes and returns the lowest flagged peer that is due at now;
// next is when the earliest of the others is due (zero if none).
func (s *Sync) take(now time.Time) (peer uint64, r resyncReq, ok bool, next time.Time) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	var due []uint64
	for p, q := range s.pending {
		if !q.notBefore.After(now) {
			due = append(due, p)
		} else if next.IsZero() || q.notBefore.Before(next) {
			next = q.notBefore
		}
	}
	if len(due) == 0 {
		return 0, resyncReq{}, false, next
	}
	peer = slices.Min(due)
	r = s.pending[peer]
	delete(s.pending, peer)
	return peer, r, true, next
}

// resyncLoop fetches and reconciles flagged peers' snapshots, one at a
// time, until stop; it flags every live peer each ResyncInterval and the
// peers whose claims stay ahead (Core.Lagging).
func (s *Sync) resyncLoop() {
	defer s.wg.Done()
	var periodic <-chan time.Time
	if s.cfg.ResyncInterval > 0 {
		t := time.NewTicker(s.cfg.ResyncInterval)
		defer t.Stop()
		periodic = t.C
	}
	claims := time.NewTicker(claimGrace)
	defer claims.Stop()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-retry.C:
		case <-periodic:
			s.flagAll(reasonPeriodic)
		case <-claims.C:
			for _, p := range s.core.Lagging(s.clock(), claimGrace) {
				s.flag(p, reasonClaim)
			}
		}
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			// Due times pace the retry timer: real time, as timers.
			p, r, ok, next := s.take(time.Now())
			if !ok {
				if !next.IsZero() {
					retry.Reset(time.Until(next))
				}
				break
			}
			s.resync(p, r)
		}
	}
}

// resync fetches peer's snapshot and reconciles this router's view of
// its bookings with it; a failed or incomplete one is retried (up to
// maxRetries).
func (s *Sync) resync(peer uint64, r resyncReq) {
	s.resyncs[r.reason].Add(1)
	s.core.BeginResync(peer)
	defer s.core.EndResync(peer)
	snap, err := s.fetchSnapshot(s.ctx, peer)
	again := err != nil
	if err != nil {
		s.resyncFails.Add(1)
		s.log.Debug("replica resync failed", "peer", peer, "reason", r.reason, "err", err)
	} else {
		var added, freed int
		added, freed, again = s.core.ApplySnapshot(snap)
		if added+freed > 0 {
			s.log.Info("replica resync corrected bookings", "peer", peer, "reason", r.reason, "added", added, "freed", freed)
		}
	}
	if again && r.tries < maxRetries && s.ctx.Err() == nil {
		s.pmu.Lock()
		if _, ok := s.pending[peer]; !ok {
			s.pending[peer] = resyncReq{reason: reasonRetry, tries: r.tries + 1, notBefore: time.Now().Add(retryBase << r.tries)}
		}
		s.pmu.Unlock()
	}
}
