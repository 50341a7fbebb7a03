package server

import (
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// keepSink keeps every batch it is given, as the EventSink contract allows
// (a delaying sink does).
type keepSink struct {
	mu      sync.Mutex
	batches []Batch
}

func (s *keepSink) Publish(b Batch, _ Delivery) error {
	s.mu.Lock()
	s.batches = append(s.batches, b)
	s.mu.Unlock()
	return nil
}

func (s *keepSink) Restart(int) {}

func (s *keepSink) Close() error { return nil }

// TestResetBatchOwnsItsEvents: the AllBlocksCleared batch published by
// /reset_prefix_cache stays a Cleared batch after later engine steps. It
// used to share the engine's event buffer, so a sink that kept it (a
// delayed delivery) saw it overwritten by the next step's stored events
// (found by internal/chaos under -race).
func TestResetBatchOwnsItsEvents(t *testing.T) {
	c := testConfig()
	sink := &keepSink{}
	c.Sinks = []EventSink{sink}
	r := start(t, c)
	if code, body := post(t, r.url+"/v1/completions", map[string]any{"prompt": words(40, "a"), "max_tokens": 1}); code != 200 {
		t.Fatalf("completion: %d %s", code, body)
	}
	if code, body := post(t, r.url+"/reset_prefix_cache", nil); code != 200 {
		t.Fatalf("reset: %d %s", code, body)
	}
	sink.mu.Lock()
	reset := len(sink.batches) - 1
	sink.mu.Unlock()
	for i := range 3 {
		if code, body := post(t, r.url+"/v1/completions", map[string]any{"prompt": words(40, string(rune('b'+i))), "max_tokens": 1}); code != 200 {
			t.Fatalf("completion: %d %s", code, body)
		}
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if reset < 0 || len(sink.batches) <= reset+1 {
		t.Fatalf("got %d batches, reset at %d: the test proves nothing", len(sink.batches), reset)
	}
	b := sink.batches[reset]
	if len(b.Events) != 1 || b.Events[0].Kind != kvevent.Cleared {
		t.Fatalf("reset batch now holds %+v, want one Cleared event", b.Events)
	}
}
