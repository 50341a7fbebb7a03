package frontend

import (
	"net/http"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/affinity"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
)

// Session headers: a request naming its session is pinned to the worker
// rank the session's previous request went to (Config.SessionTTL).
const (
	// HeaderSessionID is the session header.
	HeaderSessionID = "X-Session-ID"
	// HeaderDynamoSessionID is Dynamo's name for it, accepted as an alias.
	HeaderDynamoSessionID = "X-Dynamo-Session-ID"
)

// SessionSharer is optionally given to the front door (SetSessionSharer)
// to share session bindings with other router replicas: Share is called
// on the request's goroutine after each local binding and must not block.
type SessionSharer interface {
	Share(session string, w kvevent.WorkerRank)
}

// sessions is the front door's session affinity: the pure table behind a
// lock, and the replicas it shares bindings with.
type sessions struct {
	clock func() time.Time
	mu    sync.Mutex
	t     *affinity.Table
	share SessionSharer
}

// SetSessionSharer attaches replica sharing of session bindings (nil
// detaches it); a no-op when session affinity is off.
func (f *Frontend) SetSessionSharer(s SessionSharer) {
	if f.sessions == nil {
		return
	}
	f.sessions.mu.Lock()
	f.sessions.share = s
	f.sessions.mu.Unlock()
}

// LearnSession applies another replica's binding of session to w (the
// first live binding wins); false when affinity is off or the session is
// bound already.
func (f *Frontend) LearnSession(session string, w kvevent.WorkerRank) bool {
	s := f.sessions
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.Learn(session, w, s.clock())
}

// SessionWorker returns the worker rank session is bound to, if any.
func (f *Frontend) SessionWorker(session string) (kvevent.WorkerRank, bool) {
	s := f.sessions
	if s == nil {
		return kvevent.WorkerRank{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.Lookup(session, s.clock())
}

func (s *sessions) bind(session string, w kvevent.WorkerRank) {
	s.mu.Lock()
	s.t.Bind(session, w, s.clock())
	share := s.share
	s.mu.Unlock()
	if share != nil {
		share.Share(session, w)
	}
}

// initAdmission builds the admission queue and session affinity when
// configured.
func (f *Frontend) initAdmission() error {
	if f.cfg.Queue.on() {
		g, err := newGate(f.cfg.Queue, f.router, f.clock, f.reg, f.keyTenants())
		if err != nil {
			return err
		}
		g.adapterWorkers = f.adapterWorkers
		f.gate = g
	}
	if f.cfg.SessionTTL > 0 {
		c := affinity.DefaultConfig()
		c.TTL = max(f.cfg.SessionTTL, time.Second)
		t, err := affinity.New(c)
		if err != nil {
			return err
		}
		f.sessions = &sessions{clock: f.clock, t: t}
	}
	return nil
}

// keyTenants are the tenants of the configured keys.
func (f *Frontend) keyTenants() []string {
	var out []string
	for _, k := range append(append([]string(nil), f.cfg.APIKeys...), f.cfg.AdminKeys...) {
		out = append(out, keyTenant(k))
	}
	return out
}

// classify reads who sent the request, its priority and its session.
func (f *Frontend) classify(r *http.Request, ex *exchange, fields *requestFields) {
	if f.gate != nil {
		ex.adm.tenant = f.tenantOf(r)
		ex.adm.priority = f.priorityOf(r, fields)
	}
	if f.sessions != nil {
		ex.session = r.Header.Get(HeaderSessionID)
		if ex.session == "" {
			ex.session = r.Header.Get(HeaderDynamoSessionID)
		}
		if len(ex.session) > affinity.MaxSessionID {
			ex.session = ""
		}
	}
}

// routeAttempt routes forward's attempt: the first through the admission
// queue and the session's worker, retries (another worker after a
// failure) straight to the router.
func (f *Frontend) routeAttempt(r *http.Request, ex *exchange, req router.Request, attempt int) (router.Decision, error) {
	if attempt > 0 {
		return f.route(ex, req, attempt)
	}
	return f.routeFirst(r, ex, req)
}

// routeSession routes req, pinned to its session's worker rank when that
// one is up and not saturated (by the queue's thresholds, and by the
// router's own busy thresholds, which refuse the pinned request). The
// caller binds the session to where it went (bindSession) once the
// request is kept: one the queue refuses after routing binds nothing.
func (f *Frontend) routeSession(ex *exchange, req router.Request) (router.Decision, error) {
	if f.sessions == nil || ex.session == "" {
		return f.route(ex, req, 0)
	}
	if w, ok := f.SessionWorker(ex.session); ok && !f.router.RankSaturated(f.cfg.Queue.Thresholds, w) {
		pinned := req
		pinned.PinnedWorker, pinned.HasPinned = w.ID, true
		pinned.DPRankStart, pinned.DPRankSize = int(w.Rank), 1
		if d, err := f.route(ex, pinned, 0); err == nil {
			return d, nil
		}
	}
	return f.route(ex, req, 0)
}

// bindSession binds the exchange's session (if any) to d's worker rank.
func (f *Frontend) bindSession(ex *exchange, d router.Decision) {
	if f.sessions != nil && ex.session != "" {
		f.sessions.bind(ex.session, d.Worker)
	}
}

// endAdmission ends the exchange's count in flight for its tenant.
func (f *Frontend) endAdmission(ex *exchange) {
	if f.gate != nil {
		f.gate.done(ex)
	}
}

// kick tells the admission queue that capacity may have freed.
func (f *Frontend) kick() {
	if f.gate != nil {
		f.gate.kick()
	}
}

// SessionAffinity reports whether session affinity is on.
func (f *Frontend) SessionAffinity() bool { return f.sessions != nil }
