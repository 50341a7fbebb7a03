package mocker

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// TestHoldAndRelease: a held prefill keeps its blocks in use after its
// one token until Release frees them (they stay cached).
func TestHoldAndRelease(t *testing.T) {
	e := mustEngine(t, testConfig())
	prompt := seqTokens(1, 17) // 4 full blocks + 1 token
	if err := e.Add(Request{ID: 1, Tokens: prompt, MaxTokens: 1, Hold: true}); err != nil {
		t.Fatal(err)
	}
	outs := drain(t, e)
	if len(outs) != 1 || !outs[0].Finished {
		t.Fatalf("outputs %+v, want one finished token", outs)
	}
	held, ok := e.Held(1)
	if !ok || len(held) != 5 {
		t.Fatalf("held blocks %v (%v), want 5", held, ok)
	}
	if used := e.Stats().UsedBlocks; used != 5 {
		t.Fatalf("%d blocks in use while held, want 5", used)
	}
	if n := e.HeldRequests(); n != 1 {
		t.Fatalf("HeldRequests = %d while held, want 1", n)
	}
	if !e.Release(1) || e.Release(1) {
		t.Fatal("Release: want true once, then false")
	}
	if n := e.HeldRequests(); n != 0 {
		t.Fatalf("HeldRequests = %d after release, want 0", n)
	}
	if used := e.Stats().UsedBlocks; used != 0 {
		t.Fatalf("%d blocks in use after release, want 0", used)
	}
	if e.LocalPrefix(prompt) != 4 {
		t.Fatalf("LocalPrefix = %d, want the 4 cached blocks", e.LocalPrefix(prompt))
	}
}

// TestRemotePrefill: a decode rank given a remote prompt computes one
// token in its first step (not the prompt), caches the received blocks
// and reports them stored, and reports only local hits as cached.
func TestRemotePrefill(t *testing.T) {
	e := mustEngine(t, testConfig())
	prompt := seqTokens(100, 17)
	if err := e.Add(Request{ID: 7, Tokens: prompt, MaxTokens: 3, Remote: true}); err != nil {
		t.Fatal(err)
	}
	res := e.Step()
	if res.PrefillTokens != 1 || len(res.Outputs) != 1 || !res.Outputs[0].First {
		t.Fatalf("first step computed %d prefill tokens, outputs %+v; want 1 and the first token", res.PrefillTokens, res.Outputs)
	}
	if res.Outputs[0].CachedTokens != 0 {
		t.Errorf("cached tokens %d, want 0 (nothing was local)", res.Outputs[0].CachedTokens)
	}
	stored := 0
	for _, ev := range res.Events {
		if ev.Kind == kvevent.Stored && ev.Tier == kvevent.TierDevice {
			stored += len(ev.Hashes)
		}
	}
	if stored != 4 {
		t.Errorf("%d blocks reported stored, want the 4 received full blocks", stored)
	}
	drain(t, e)
	if e.LocalPrefix(prompt) != 4 {
		t.Errorf("LocalPrefix after the request = %d, want 4", e.LocalPrefix(prompt))
	}
}

func TestTransferTime(t *testing.T) {
	c := DefaultConfig()
	c.BlockSize, c.KVBytesPerToken, c.KVTransferBandwidth, c.SpeedupRatio = 16, 1000, 1e6, 2
	// 10 blocks × 16 tokens × 1000 B = 160 kB at 1 MB/s = 160 ms, halved.
	if got := c.TransferTime(10); got != 80*time.Millisecond {
		t.Errorf("TransferTime(10) = %v, want 80ms", got)
	}
	if c.TransferTime(0) != 0 {
		t.Error("TransferTime(0) != 0")
	}
}
