package affinity

import (
	"container/heap"
	"errors"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// MaxSessionID is the longest session id kept, in bytes; longer ones are
// not bound.
const MaxSessionID = 256

// Config configures a Table.
type Config struct {
	// TTL is how long a binding lives after the session's last request;
	// at least 1 s. Default 300 s.
	TTL time.Duration
	// MaxSessions caps the bindings kept. Default 1,000,000.
	MaxSessions int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config { return Config{TTL: 300 * time.Second, MaxSessions: 1_000_000} }

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("invalid session affinity config")

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.TTL < time.Second || c.TTL > 365*24*time.Hour:
		return fmt.Errorf("%w: ttl %v out of [1s, 1 year]", ErrConfig, c.TTL)
	case c.MaxSessions < 1 || c.MaxSessions > 1<<26:
		return fmt.Errorf("%w: max sessions %d out of [1, 2^26]", ErrConfig, c.MaxSessions)
	}
	return nil
}

type binding struct {
	session string
	worker  kvevent.WorkerRank
	expires time.Time
	i       int // heap index
}

type byExpiry []*binding

func (h byExpiry) Len() int           { return len(h) }
func (h byExpiry) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h byExpiry) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].i = i; h[j].i = j }
func (h *byExpiry) Push(x any)        { b := x.(*binding); b.i = len(*h); *h = append(*h, b) }
func (h *byExpiry) Pop() any {
	old := *h
	b := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return b
}

// Table maps sessions to worker ranks.
type Table struct {
	cfg Config
	m   map[string]*binding
	h   byExpiry
}

// New returns an empty table.
func New(cfg Config) (*Table, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Table{cfg: cfg, m: map[string]*binding{}}, nil
}

// TTL returns the configured TTL.
func (t *Table) TTL() time.Duration { return t.cfg.TTL }

// Len returns the number of bindings kept (expired ones included until
// the next call that expires).
func (t *Table) Len() int { return len(t.m) }

// Lookup returns session's worker rank if its binding is live at now.
func (t *Table) Lookup(session string, now time.Time) (kvevent.WorkerRank, bool) {
	t.expire(now)
	b, ok := t.m[session]
	if !ok {
		return kvevent.WorkerRank{}, false
	}
	return b.worker, true
}

// Bind binds session to w until now + TTL (a local request was routed
// there). An id longer than MaxSessionID or empty is not bound.
func (t *Table) Bind(session string, w kvevent.WorkerRank, now time.Time) {
	t.set(session, w, now.Add(t.cfg.TTL), true)
}

// Learn applies another replica's binding of session to w: it is kept
// when the session has no live binding here (first binding wins), for
// this table's TTL from now. It returns whether it was kept.
func (t *Table) Learn(session string, w kvevent.WorkerRank, now time.Time) bool {
	t.expire(now)
	if _, ok := t.m[session]; ok {
		return false
	}
	return t.set(session, w, now.Add(t.cfg.TTL), false)
}

// Forget drops every binding to worker id (it is gone).
func (t *Table) Forget(id kvevent.WorkerID) {
	for _, b := range t.m {
		if b.worker.ID == id {
			heap.Remove(&t.h, b.i)
			delete(t.m, b.session)
		}
	}
}

func (t *Table) set(session string, w kvevent.WorkerRank, expires time.Time, replace bool) bool {
	if session == "" || len(session) > MaxSessionID {
		return false
	}
	if b, ok := t.m[session]; ok {
		if !replace {
			return false
		}
		b.worker, b.expires = w, expires
		heap.Fix(&t.h, b.i)
		return true
	}
	if len(t.m) >= t.cfg.MaxSessions {
		old := heap.Pop(&t.h).(*binding)
		delete(t.m, old.session)
	}
	b := &binding{session: session, worker: w, expires: expires}
	heap.Push(&t.h, b)
	t.m[session] = b
	return true
}

func (t *Table) expire(now time.Time) {
	for len(t.h) > 0 && !t.h[0].expires.After(now) {
		b := heap.Pop(&t.h).(*binding)
		delete(t.m, b.session)
	}
}
