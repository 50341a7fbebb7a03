package frontend

import (
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
)

// The JSON shapes of the router-native API, documented in docs/api.md.

// tiersJSON is an overlap split by storage tier, in blocks.
type tiersJSON map[string]int

// candidateTiersJSON is a decision row's overlap split by storage tier,
// in blocks: a struct, not a tiersJSON map, since a decision renders a
// row per worker (a thousand maps for a thousand workers). Its fields
// are in the order encoding/json writes a map's keys, so the bytes are
// those of the map {"device", "disk", "host_pinned", "shared"}.
type candidateTiersJSON struct {
	Device     int `json:"device"`
	Disk       int `json:"disk"`
	HostPinned int `json:"host_pinned"`
	Shared     int `json:"shared"`
}

// candidateJSON is one worker rank's row of a decision explanation.
type candidateJSON struct {
	Worker              string             `json:"worker"`
	WorkerID            uint64             `json:"worker_id"`
	DPRank              uint32             `json:"dp_rank"`
	State               string             `json:"state"`
	Chosen              bool               `json:"chosen"`
	Excluded            string             `json:"excluded,omitempty"`
	OverlapBlocks       int                `json:"overlap_blocks"`
	Tiers               candidateTiersJSON `json:"tiers"`
	RawPrefillBlocks    float64            `json:"raw_prefill_blocks"`
	CreditBlocks        float64            `json:"credit_blocks"`
	AdjustedPrefill     float64            `json:"adjusted_prefill_blocks"`
	DecodeBlocks        float64            `json:"decode_blocks"`
	ActiveBlocks        float64            `json:"active_blocks"`
	ActivePrefillTokens int                `json:"active_prefill_tokens"`
	ActiveRequests      int                `json:"active_requests"`
	Cost                float64            `json:"cost"`
	Probability         float64            `json:"probability"`
	// Predicted is the kv-time policy's estimate (absent under others).
	Predicted *predictionJSON `json:"predicted,omitempty"`
}

// decisionJSON is a routing decision with its explanation (/v1/route and
// the status page).
type decisionJSON struct {
	RequestID     string          `json:"request_id,omitempty"`
	BlockSize     int             `json:"block_size"`
	InputTokens   int             `json:"input_tokens"`
	Blocks        int             `json:"blocks"`
	Policy        string          `json:"policy"`
	Temperature   float64         `json:"temperature"`
	Worker        *string         `json:"worker"`
	WorkerID      *uint64         `json:"worker_id"`
	DPRank        *uint32         `json:"dp_rank"`
	OverlapBlocks int             `json:"overlap_blocks"`
	PrefillTokens int             `json:"prefill_tokens"`
	Candidates    []candidateJSON `json:"candidates"`
	// CandidatesTotal is set when Candidates holds only some of the
	// decision's rows (the status page's summary, see recordDecision).
	CandidatesTotal int `json:"candidates_total,omitempty"`
	// PD is the prefill/decode split in a disaggregated fleet (pd.go).
	PD *pdJSON `json:"pd,omitempty"`
}

func tiersOf(o router.Overlap) candidateTiersJSON {
	return candidateTiersJSON{Device: o.Device, HostPinned: o.Host, Disk: o.Disk, Shared: o.Shared}
}

func scoreTiers(s index.Score) tiersJSON {
	t := make(tiersJSON, kvevent.NumTiers)
	for i, n := range s.Tiers {
		t[kvevent.Tier(i).String()] = int(n)
	}
	return t
}

// decisionView renders a decision; chosen says whether d.Worker is valid
// (false when the router refused).
func (f *Frontend) decisionView(d router.Decision, chosen bool) decisionJSON {
	v := decisionJSON{
		RequestID: d.RequestID, BlockSize: f.blockSize, InputTokens: d.InputTokens, Blocks: d.Blocks,
		Policy: d.Policy, Temperature: d.Temperature, Candidates: make([]candidateJSON, 0, len(d.Candidates)),
	}
	if chosen {
		name, id, rank := f.workerName(d.Worker.ID), uint64(d.Worker.ID), uint32(d.Worker.Rank)
		v.Worker, v.WorkerID, v.DPRank = &name, &id, &rank
		v.OverlapBlocks, v.PrefillTokens = d.OverlapBlocks, d.PrefillTokens
	}
	for i, c := range d.Candidates {
		e, _ := f.dir.Lookup(c.Worker.ID)
		name := e.Name
		if name == "" {
			name = c.Worker.String()
		}
		v.Candidates = append(v.Candidates, candidateJSON{
			Worker: name, WorkerID: uint64(c.Worker.ID), DPRank: uint32(c.Worker.Rank),
			State: e.Status.State.String(), Chosen: chosen && i == d.Chosen, Excluded: string(c.Excluded),
			OverlapBlocks: c.Overlap.Device, Tiers: tiersOf(c.Overlap),
			RawPrefillBlocks: c.RawPrefillBlocks, CreditBlocks: c.CreditBlocks, AdjustedPrefill: c.AdjustedPrefillBlocks,
			DecodeBlocks: c.DecodeBlocks, ActiveBlocks: c.ActiveBlocks, ActivePrefillTokens: c.ActivePrefillTokens,
			ActiveRequests: c.ActiveRequests, Cost: c.Cost, Probability: c.Probability,
			Predicted: predictionOf(d.Policy, c),
		})
	}
	return v
}

// record is one finished request as the status page shows it.
type record struct {
	Time          time.Time
	RequestID     string
	Endpoint      string
	Status        int
	Outcome       string
	Worker        string
	InputTokens   int
	OverlapBlocks int
	Predicted     int
	Actual        int // -1 when the worker reported no cached tokens
	Attempts      int
	Duration      time.Duration
	Decision      decisionJSON
}

// ring keeps the last N records for the status page's table and passes
// every record on to its charts (feed).
type ring struct {
	buf  []record
	next int
	full bool
	feed *statusFeed
}

func (r *ring) add(rec record) {
	if r.feed != nil {
		r.feed.finished(rec)
	}
	if len(r.buf) == 0 {
		return
	}
	r.buf[r.next] = rec
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// list returns the records, newest first.
func (r *ring) list() []record {
	n := r.next
	if r.full {
		n = len(r.buf)
	}
	out := make([]record, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, r.buf[(r.next-i+len(r.buf))%len(r.buf)])
	}
	return out
}

// rate counts events per second over the last minute.
type rate struct {
	sec    [60]int64
	counts [60]int64
}

func (r *rate) add(now time.Time) {
	s := now.Unix()
	i := s % 60
	if r.sec[i] != s {
		r.sec[i], r.counts[i] = s, 0
	}
	r.counts[i]++
}

// perSecond is the mean rate over the last 60 seconds.
func (r *rate) perSecond(now time.Time) float64 {
	s := now.Unix()
	var n int64
	for i := range r.sec {
		if s-r.sec[i] < 60 && s >= r.sec[i] {
			n += r.counts[i]
		}
	}
	return float64(n) / 60
}
