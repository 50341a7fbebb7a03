package scheduler

import (
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// fillStale sets every field of v (a pointer), nested ones included, to
// a non-zero value.
func fillStale(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		fillStale(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			fillStale(v.Field(i))
		}
	case reflect.Array:
		for i := range v.Len() {
			fillStale(v.Index(i))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(-3.5)
	case reflect.String:
		v.SetString("stale")
	case reflect.Bool:
		v.SetBool(true)
	default:
		panic("fillStale: unhandled kind " + v.Kind().String())
	}
}

// TestSelectIntoOverwritesEveryField: SelectInto writes each field of a
// reused row rather than clearing it first, so a decision into rows full
// of another decision's values (every field, nested ones included, set
// to garbage) must equal the same decision into fresh rows: down, busy,
// excluded and eligible rows, under kv (cost in the pass, and with the
// credit decay after it), random and kv-time.
func TestSelectIntoOverwritesEveryField(t *testing.T) {
	var cands []Candidate
	for i := range 12 {
		cands = append(cands, Candidate{
			Worker:              kvevent.WorkerRank{ID: kvevent.WorkerID(i%6 + 1), Rank: kvevent.DPRank(i / 6)},
			Down:                i == 3,
			Overlap:             Overlap{Device: 4 * (i % 3), Host: i % 2, Disk: i % 4, Shared: 1},
			ActivePrefillTokens: 1000 * (i % 5),
			ActiveBlocks:        float64(10 * i),
			DecodeBlocks:        float64(10*i + 8),
			ActiveRequests:      i % 3,
			KVCapacityBlocks:    1000,
			MaxBatchedTokens:    8192,
		})
	}
	kvt, err := NewPolicy(PolicyKVTime)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		policy func() Policy
		decay  float64
		req    Request
	}{
		{"kv", func() Policy { return KV{} }, 0, Request{InputTokens: 300, BlockSize: 16}},
		{"kv decay", func() Policy { return KV{} }, 0.5, Request{InputTokens: 300, BlockSize: 16}},
		{"kv allow-list", func() Policy { return KV{} }, 0, Request{InputTokens: 300, BlockSize: 16, AllowedWorkers: []kvevent.WorkerID{2, 4, 5}}},
		{"random", func() Policy { return Random{} }, 0, Request{InputTokens: 300, BlockSize: 16, DPRankSize: 1}},
		{"kv-time", func() Policy { return kvt }, 0, Request{InputTokens: 300, BlockSize: 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.OverlapScoreCreditDecay = tc.decay
			cfg.ActivePrefillTokensThreshold = 3500 // rows 4 and 9 are busy
			s, err := New(cfg, tc.policy())
			if err != nil {
				t.Fatal(err)
			}
			want, werr := s.SelectInto(nil, tc.req, cands, seeded(9))
			stale := make([]Explanation, len(cands)+3)
			for i := range stale {
				fillStale(reflect.ValueOf(&stale[i]))
			}
			got, gerr := s.SelectInto(stale, tc.req, cands, seeded(9))
			if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("into reused rows: %+v, %v\ninto fresh rows: %+v, %v", got, gerr, want, werr)
			}
			if want.Candidates[3].Excluded != ExcludedDown || want.Candidates[4].Excluded != BusyPrefillTokens {
				t.Fatalf("rows 3 and 4 are %q and %q, want down and busy", want.Candidates[3].Excluded, want.Candidates[4].Excluded)
			}
		})
	}
}
