package mocker

import (
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
)

// A LoRA adapter's blocks are cached apart from the base model's: the
// same prompt under an adapter misses the base model's blocks, hits its
// own, and its stored events carry the adapter's name, their local hashes
// salted with it as the router computes them.
func TestLoRABlocksApart(t *testing.T) {
	e := mustEngine(t, testConfig())
	prompt := seqTokens(300, 18) // 4 full blocks of 4 + 2
	run := func(id uint64, lora string) (cached int, events []Event) {
		t.Helper()
		if err := e.Add(Request{ID: id, Tokens: prompt, MaxTokens: 1, LoRA: lora}); err != nil {
			t.Fatal(err)
		}
		for !e.Idle() {
			res := e.Step()
			for _, o := range res.Outputs {
				if o.First {
					cached = o.CachedTokens
				}
			}
			for _, ev := range res.Events {
				ev.Hashes, ev.Tokens = slices.Clone(ev.Hashes), slices.Clone(ev.Tokens)
				events = append(events, ev)
			}
		}
		return cached, events
	}
	if c, _ := run(1, ""); c != 0 {
		t.Fatalf("cold base request: %d cached tokens", c)
	}
	c, evs := run(2, "sql-lora")
	if c != 0 {
		t.Fatalf("the adapter's request hit %d tokens of the base model's cache", c)
	}
	want, _ := kvhash.LocalHashes(prompt, kvhash.Options{BlockSize: 4, LoRAName: "sql-lora"}, nil)
	var got []uint64
	for _, ev := range evs {
		if ev.Kind != kvevent.Stored {
			continue
		}
		if ev.LoRAName != "sql-lora" {
			t.Fatalf("adapter event without its name: %+v", ev)
		}
		for _, b := range ev.KVEvent(kvevent.WorkerRank{ID: 1}).Blocks {
			got = append(got, b.LocalHash)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("adapter blocks' local hashes %v, want %v", got, want)
	}
	if c, _ := run(3, "sql-lora"); c != 16 {
		t.Fatalf("the adapter's second request: %d cached tokens, want 16", c)
	}
	if c, _ := run(4, ""); c != 16 {
		t.Fatalf("the base model's second request: %d cached tokens, want 16", c)
	}
}

// A cache salt isolates like an adapter: the same prompt under another
// salt misses, and the stored events carry the salt, their local hashes
// salted with it as the router's namespace.
func TestCacheSaltBlocksApart(t *testing.T) {
	e := mustEngine(t, testConfig())
	prompt := seqTokens(900, 17)
	run := func(id uint64, salt string) (cached int, local []uint64) {
		t.Helper()
		if err := e.Add(Request{ID: id, Tokens: prompt, MaxTokens: 1, CacheSalt: salt}); err != nil {
			t.Fatal(err)
		}
		for !e.Idle() {
			res := e.Step()
			for _, o := range res.Outputs {
				if o.First {
					cached = o.CachedTokens
				}
			}
			for _, ev := range res.Events {
				if ev.Kind == kvevent.Stored {
					if ev.CacheSalt != salt {
						t.Fatalf("event salt %q, want %q", ev.CacheSalt, salt)
					}
					for _, b := range ev.KVEvent(kvevent.WorkerRank{ID: 1}).Blocks {
						local = append(local, b.LocalHash)
					}
				}
			}
		}
		return cached, local
	}
	_, _ = run(1, "tenant-a")
	c, local := run(2, "tenant-b")
	want, _ := kvhash.LocalHashes(prompt, kvhash.Options{BlockSize: 4, Namespace: "tenant-b"}, nil)
	if c != 0 || !slices.Equal(local, want) {
		t.Fatalf("tenant-b: %d cached, local hashes %v, want 0 and %v", c, local, want)
	}
	if c, _ := run(3, "tenant-a"); c != 16 {
		t.Fatalf("tenant-a again: %d cached, want 16", c)
	}
}
