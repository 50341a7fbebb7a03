package frontend

import (
	"encoding/json"
	"testing"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
)

// Two tenants with different cache salts send the same prompt: each
// tenant's blocks are indexed under its own salt only, so neither scores
// the other's cache, and an unsalted request scores neither. Checked
// against the index with hashes computed by kvhash (the namespace salt),
// independently of the front door.
func TestCacheSaltIsolatesTenants(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 4})
	tokens := make([]uint32, 64) // 4 full blocks of 16
	for i := range tokens {
		tokens[i] = uint32(1000 + i)
	}
	hashes := func(salt string) []uint64 {
		local, err := kvhash.LocalHashes(tokens, kvhash.Options{BlockSize: 16, Namespace: salt}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return local
	}
	holders := func(salt string) map[kvevent.WorkerRank]int {
		var sc index.Scores
		fl.idx.Query(hashes(salt), &sc)
		out := map[kvevent.WorkerRank]int{}
		for _, s := range sc.List {
			if n := s.Tiers[kvevent.TierDevice]; n > 0 {
				out[s.Worker] = int(n)
			}
		}
		return out
	}
	send := func(salt string) {
		t.Helper()
		body := map[string]any{"model": testModel, "prompt": tokens, "max_tokens": 2}
		if salt != "" {
			body["cache_salt"] = salt
		}
		resp, b := fl.do("POST", "/v1/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("salt %q: status %d: %s", salt, resp.StatusCode, b)
		}
	}

	send("tenant-a")
	a := holders("tenant-a")
	if len(a) != 1 {
		t.Fatalf("tenant-a's blocks held by %v, want one worker with 4 blocks", a)
	}
	for w, n := range a {
		if n != 4 {
			t.Fatalf("tenant-a: %s holds %d blocks, want 4", w, n)
		}
	}
	if b := holders("tenant-b"); len(b) != 0 {
		t.Fatalf("tenant-b scores tenant-a's cache: %v", b)
	}
	if u := holders(""); len(u) != 0 {
		t.Fatalf("an unsalted request scores tenant-a's cache: %v", u)
	}

	send("tenant-b")
	if b := holders("tenant-b"); len(b) != 1 {
		t.Fatalf("tenant-b's blocks held by %v, want one worker", b)
	}
	if a2 := holders("tenant-a"); len(a2) != 1 {
		t.Fatalf("tenant-a's blocks now held by %v, want still one worker", a2)
	}

	// /v1/query hashes with the salt too: tenant-b's query sees only its
	// own record.
	resp, body := fl.do("POST", "/v1/query", map[string]any{"tokens": tokens, "cache_salt": "tenant-b"})
	var q queryResponse
	if err := json.Unmarshal(body, &q); err != nil || resp.StatusCode != 200 {
		t.Fatalf("query: status %d: %s", resp.StatusCode, body)
	}
	held := 0
	for _, w := range q.Workers {
		if w.OverlapBlocks > 0 {
			held++
			if w.OverlapBlocks != 4 {
				t.Fatalf("query row %+v, want 4 blocks", w)
			}
		}
	}
	if held != 1 {
		t.Fatalf("tenant-b's query: %d workers hold its prompt, want 1: %s", held, body)
	}
	fl.waitIdle()
}
