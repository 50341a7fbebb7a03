package sim

import (
	"testing"
)

// TestDisaggregated: 2 prefill and 2 decode engines serve every request;
// answers come from decode engines only; prefills reuse their caches
// (hits), KV blocks are transferred; with a bypass threshold above every
// prompt nothing is transferred and every request is bypassed.
func TestDisaggregated(t *testing.T) {
	cfg := smallConfig()
	cfg.PrefillWorkers, cfg.DecodeWorkers = 2, 2
	src, err := smallWorkload()()
	if err != nil {
		t.Fatal(err)
	}
	o, err := Run(cfg, "kv", src, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := o.Result
	if r.Requests != 128 || r.Failed != 0 || o.Bypassed != 0 || o.TransferredBlocks == 0 || r.HitRatio <= 0 {
		t.Fatalf("disaggregated run: %+v, bypassed %d, transferred %d", r, o.Bypassed, o.TransferredBlocks)
	}
	if r.MinWorkerShare != 0 || r.MaxWorkerShare < 0.25 {
		t.Errorf("shares %v..%v: the prefill engines must answer nothing, the decode engines everything", r.MinWorkerShare, r.MaxWorkerShare)
	}
	cfg.BypassTokens = 1 << 20
	src, _ = smallWorkload()()
	b, err := Run(cfg, "kv", src, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.Result.Requests != 128 || b.Result.Failed != 0 || b.Bypassed != 128 || b.TransferredBlocks != 0 {
		t.Fatalf("all-bypass run: %+v, bypassed %d, transferred %d", b.Result, b.Bypassed, b.TransferredBlocks)
	}
	cfg.PrefillWorkers = 3
	if cfg.Validate() == nil {
		t.Error("3 prefill + 2 decode engines accepted for 4 workers")
	}
}

// TestDisaggregatedTimeModels: under kv-time on 2 prefill and 2 decode
// engines, each prefill engine's model learns prefill samples only (its
// hop's first token) and each decode engine's decode samples only (its
// first token waited for the transfer: no prefill sample).
func TestDisaggregatedTimeModels(t *testing.T) {
	cfg := smallConfig()
	cfg.PrefillWorkers, cfg.DecodeWorkers = 2, 2
	src, err := smallWorkload()()
	if err != nil {
		t.Fatal(err)
	}
	o, err := Run(cfg, "kv-time", src, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Result.Requests != 128 || o.Result.Failed != 0 || o.Bypassed != 0 {
		t.Fatalf("run: %+v, bypassed %d", o.Result, o.Bypassed)
	}
	seen := map[int]bool{}
	for _, m := range o.TimeModels {
		k := int(m.Worker.ID)
		seen[k] = true
		switch prefill := k < 2; {
		case prefill && (m.PrefillSamples == 0 || m.DecodeSamples != 0):
			t.Errorf("prefill engine %d: %d prefill and %d decode samples, want some and 0", k, m.PrefillSamples, m.DecodeSamples)
		case !prefill && (m.PrefillSamples != 0 || m.DecodeSamples == 0):
			t.Errorf("decode engine %d: %d prefill and %d decode samples, want 0 and some", k, m.PrefillSamples, m.DecodeSamples)
		}
	}
	if len(seen) != 4 {
		t.Errorf("time models of %d engines, want 4: %+v", len(seen), o.TimeModels)
	}
}
