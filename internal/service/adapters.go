package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Bounds on what a worker's /v1/models may make the router keep.
const (
	maxModelsBody      = 1 << 20
	maxAdaptersPerWkr  = 1024
	maxAdapterNameByte = 256
)

// adapterSet knows which LoRA adapters each worker has loaded, as its
// /v1/models lists them (entries with a parent). It is read on every
// adapter request; reads never block on I/O.
type adapterSet struct {
	mu       sync.RWMutex
	byWorker map[kvevent.WorkerID][]string // sorted
	// kicks asks the refresh loop to read one worker again (it joined, or
	// answered 404 to an adapter's request); full means dropped, the
	// periodic refresh still comes.
	kicks chan kvevent.WorkerID
}

func newAdapterSet() *adapterSet {
	return &adapterSet{byWorker: map[kvevent.WorkerID][]string{}, kicks: make(chan kvevent.WorkerID, 256)}
}

// kick asks for worker id's adapters to be read again soon.
func (a *adapterSet) kick(id kvevent.WorkerID) {
	select {
	case a.kicks <- id:
	default:
	}
}

// set replaces worker id's loaded adapters.
func (a *adapterSet) set(id kvevent.WorkerID, names []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(names) == 0 {
		delete(a.byWorker, id)
		return
	}
	a.byWorker[id] = names
}

// note records that worker id stored blocks under adapter name (a KV
// event's lora_name): it has the adapter loaded. Cheap when known.
func (a *adapterSet) note(id kvevent.WorkerID, name string) {
	if name == "" || len(name) > maxAdapterNameByte {
		return
	}
	a.mu.RLock()
	_, known := slices.BinarySearch(a.byWorker[id], name)
	a.mu.RUnlock()
	if known {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	names := a.byWorker[id]
	i, found := slices.BinarySearch(names, name)
	if found || len(names) >= maxAdaptersPerWkr {
		return
	}
	a.byWorker[id] = slices.Insert(slices.Clone(names), i, name)
}

// forget drops worker id (removed from the fleet).
func (a *adapterSet) forget(id kvevent.WorkerID) { a.set(id, nil) }

// holders returns the workers that have adapter name loaded, sorted.
func (a *adapterSet) holders(name string) []kvevent.WorkerID {
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []kvevent.WorkerID
	for id, names := range a.byWorker {
		if _, ok := slices.BinarySearch(names, name); ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// all returns every adapter with the workers that have it loaded.
func (a *adapterSet) all() map[string][]kvevent.WorkerID {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := map[string][]kvevent.WorkerID{}
	for id, names := range a.byWorker {
		for _, n := range names {
			out[n] = append(out[n], id)
		}
	}
	return out
}

// parseAdapters reads the adapters out of a vLLM /v1/models body: the
// entries with a parent model (vLLM lists the base model with a null
// parent). Malformed entries are skipped; at most maxAdaptersPerWkr names,
// each at most maxAdapterNameByte bytes, are kept, sorted and unique.
func parseAdapters(body []byte) ([]string, error) {
	var v struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("decoding /v1/models: %w", err)
	}
	var out []string
	for _, m := range v.Data {
		if m.Parent == nil || *m.Parent == "" || m.ID == "" || len(m.ID) > maxAdapterNameByte || m.ID == *m.Parent {
			continue
		}
		out = append(out, m.ID)
		if len(out) == maxAdaptersPerWkr {
			break
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// readAdapters GETs a worker's /v1/models and returns its adapters.
func readAdapters(ctx context.Context, c *http.Client, base string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/models: %s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxModelsBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxModelsBody {
		return nil, fmt.Errorf("GET /v1/models: body over %d bytes", maxModelsBody)
	}
	return parseAdapters(b)
}

// adapterLoop keeps the adapter set current: every worker is read every
// --lora-refresh-interval, and a kicked one at once. A worker that cannot
// be read keeps what it had (its health probe decides whether it is
// routed to).
func (s *Service) adapterLoop(ctx context.Context) {
	client := &http.Client{Timeout: s.cfg.Events.HealthTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	t := time.NewTicker(s.cfg.Events.LoRARefresh)
	defer t.Stop()
	refresh := func(id kvevent.WorkerID, url string) {
		names, err := readAdapters(ctx, client, url)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Debug("reading a worker's LoRA adapters", "worker_id", uint64(id), "err", err)
			}
			return
		}
		if _, known := s.workers.urls()[id]; known {
			s.adapters.set(id, names)
		}
	}
	all := func() {
		var wg sync.WaitGroup
		for id, u := range s.workers.urls() {
			wg.Go(func() { refresh(id, u) })
		}
		wg.Wait()
	}
	all()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			all()
		case id := <-s.adapters.kicks:
			if u, ok := s.workers.urls()[id]; ok {
				refresh(id, u)
			}
		}
	}
}
