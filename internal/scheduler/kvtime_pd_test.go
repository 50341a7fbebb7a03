package scheduler

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/timemodel"
)

// TestKVTimePrefillHop: the same worker rank priced for a whole request
// and for a prefill hop. 4,000-token prompt, 100-token blocks, 2 device +
// 3 host blocks cached, 2,000 tokens booked, 10 running requests, 500 of
// 1,000 KV blocks held and 40 more for this request, a residence of 2 s
// learned. The prefill hop keeps Queue, Prefill and Load (the prompt is
// computed there) and drops the decode term and the KV pressure: the
// prefill worker runs no decodes and its blocks leave with the transfer.
func TestKVTimePrefillHop(t *testing.T) {
	cfg := DefaultKVTimeConfig()
	cfg.DecodeWeight = 0.5
	m := timemodel.New(timemodel.DefaultConfig())
	now := time.Unix(1000, 0)
	if !m.ObserveResidence(2*time.Second, now) {
		t.Fatal("residence sample refused")
	}
	res, _ := m.ResidenceSeconds()
	s := newKVTime(t, cfg, models{w(1): m})
	c := Candidate{Worker: w(1), Overlap: Overlap{Device: 2, Host: 3}, ActivePrefillTokens: 2000, ActiveRequests: 10,
		ActiveBlocks: 500, DecodeBlocks: 540, KVCapacityBlocks: 1000, MaxBatchedTokens: 8192}
	// Own work: 3,500 uncached tokens beside 10 decodes; with the booked
	// 2,000: 5,500 tokens, one pass of 8,192 at most.
	prefill := priorSeconds(3500, 10, 8192)
	queue := priorSeconds(5500, 10, 8192) - prefill
	load := 300 * 114688 / 64e9
	capacity := 1000 * 0.99
	u := 500 / capacity
	pressure := res * 40 / capacity * u / (1 - u)
	decode := 0.5 * 10 * (prefill + load - timemodel.PriorDecodeMs(0.5)/1e3)

	whole, err := s.Select(Request{InputTokens: 4000, BlockSize: 100, Now: now}, []Candidate{c}, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	p := whole.Candidates[0].Prediction
	if !near(p.Queue, queue) || !near(p.Prefill, prefill) || !near(p.Load, load) || !near(p.KVPressure, pressure) ||
		!near(p.Decode, decode) || !near(p.Total, queue+prefill+load+pressure+decode) || p.Transfer != 0 {
		t.Fatalf("whole request: %+v; want queue %v prefill %v load %v pressure %v decode %v", p, queue, prefill, load, pressure, decode)
	}
	if pressure <= 0 || decode <= 0 {
		t.Fatalf("the example must have a pressure (%v) and a decode term (%v) to drop", pressure, decode)
	}

	hop, err := s.Select(Request{InputTokens: 4000, BlockSize: 100, Now: now, Hop: HopPrefill}, []Candidate{c}, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	p = hop.Candidates[0].Prediction
	if !near(p.Queue, queue) || !near(p.Prefill, prefill) || !near(p.Load, load) || p.KVPressure != 0 || p.Decode != 0 ||
		p.Transfer != 0 || !near(p.TTFT, queue+prefill+load) || !near(p.Total, p.TTFT) {
		t.Fatalf("prefill hop: %+v; want queue %v + prefill %v + load %v and nothing else", p, queue, prefill, load)
	}
}

// TestKVTimeDecodeHop: a decode hop of a 1,000-token prompt (100-token
// blocks) over a 1 GB/s transfer link at 114,688 bytes per token. Worker
// 1 holds 8 device blocks, so 200 tokens travel: 22.9 ms; it runs 30
// requests at 500 of 1,000 KV blocks. Worker 2 holds nothing on device
// (3 host blocks, which the transfer brings too: no Load) and is idle:
// 1,000 tokens travel, 114.7 ms. Both then compute the prompt's last
// token in one pass (worker 1's beside its 30 decodes: 17.0 ms against
// 16.5 ms); the prompt's uncached tokens cost no prefill there. That pass
// is shorter than the 26.3 ms decode step at half use it joins, so the
// decode term is 0. Totals 39.9 ms and 131.2 ms: worker 1.
func TestKVTimeDecodeHop(t *testing.T) {
	cfg := DefaultKVTimeConfig()
	cfg.TransferBandwidth = 1e9
	s := newKVTime(t, cfg, nil)
	cands := []Candidate{
		{Worker: w(1), Overlap: Overlap{Device: 8}, ActiveRequests: 30, ActiveBlocks: 500, DecodeBlocks: 510, KVCapacityBlocks: 1000, MaxBatchedTokens: 8192},
		{Worker: w(2), Overlap: Overlap{Host: 3}, DecodeBlocks: 10, KVCapacityBlocks: 1000, MaxBatchedTokens: 8192},
	}
	d, err := s.Select(Request{InputTokens: 1000, BlockSize: 100, Hop: HopDecode}, cands, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	transfer := []float64{200 * 114688 / 1e9, 1000 * 114688 / 1e9}
	prefill := []float64{priorSeconds(1, 30, 8192), priorSeconds(1, 0, 8192)}
	decode := []float64{0.1 * 30 * max(prefill[0]-timemodel.PriorDecodeMs(0.5)/1e3, 0), 0}
	for i, r := range d.Candidates {
		p := r.Prediction
		want := transfer[i] + prefill[i] + decode[i]
		if !near(p.Transfer, transfer[i]) || !near(p.Prefill, prefill[i]) || p.Queue != 0 || p.Load != 0 ||
			!near(p.Decode, decode[i]) || !near(p.TTFT, transfer[i]+prefill[i]) || !near(p.Total, want) {
			t.Errorf("row %d: %+v; want transfer %v prefill %v decode %v (total %v)", i, p, transfer[i], prefill[i], decode[i], want)
		}
	}
	if d.Worker != w(1) {
		t.Errorf("chose %v, want worker 1 (fewer blocks to receive)", d.Worker)
	}

	// Booked prefill on a decode worker (whole requests whose prefill hop
	// was skipped) still delays the first token: 4,000 tokens ahead.
	cands[1].ActivePrefillTokens = 4000
	d, err = s.Select(Request{InputTokens: 1000, BlockSize: 100, Hop: HopDecode}, cands, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	if q, want := d.Candidates[1].Prediction.Queue, priorSeconds(4001, 0, 8192)-prefill[1]; !near(q, want) {
		t.Errorf("decode hop queue behind 4,000 booked tokens: %v, want %v", q, want)
	}
}
