package frontend

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
)

// TestStreamsFeedTimeModel: two streamed completions through a kv-time
// front door reach the chosen worker's time model, each as one prefill
// sample (TTFT) and one decode sample (mean inter-token time), and a
// decision explains every candidate in predicted seconds.
func TestStreamsFeedTimeModel(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2, speedup: 10, exact: true, rcfg: func(c *router.Config) { c.Policy = "kv-time" }})
	body := map[string]any{"prompt": words(11, 120), "max_tokens": 5, "stream": true, "stream_options": map[string]any{"include_usage": true}}
	for range 2 {
		if resp, b := fl.do(http.MethodPost, "/v1/completions", body); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	}
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		var p, d uint64
		for _, m := range fl.r.TimeModels() {
			p += m.PrefillSamples
			d += m.DecodeSamples
		}
		return p == 2 && d == 2, fmt.Sprintf("prefill samples %d, decode samples %d", p, d)
	}, "both streams observed")
	if n := fl.r.Stats().Observations; n != 2 {
		t.Fatalf("observations %d, want 2", n)
	}
	d, err := fl.r.Plan(router.Request{ID: "x", Tokens: make([]uint32, 300)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Candidates {
		if !(c.Prediction.TTFT > 0) || c.Prediction.Total < c.Prediction.TTFT {
			t.Fatalf("row %v prediction %+v", c.Worker, c.Prediction)
		}
	}
	// /v1/route shows each candidate's predicted seconds.
	resp, b := fl.do(http.MethodPost, "/v1/route", map[string]any{"prompt": words(12, 80)})
	var v struct {
		Policy     string `json:"policy"`
		Candidates []struct {
			Predicted *struct {
				TTFT  float64 `json:"ttft_s"`
				Total float64 `json:"total_s"`
			} `json:"predicted"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal(b, &v); err != nil || resp.StatusCode != http.StatusOK || v.Policy != "kv-time" || len(v.Candidates) != 2 {
		t.Fatalf("route: status %d, %v: %s", resp.StatusCode, err, b)
	}
	for _, c := range v.Candidates {
		if c.Predicted == nil || !(c.Predicted.TTFT > 0) || c.Predicted.Total < c.Predicted.TTFT {
			t.Fatalf("route row without predicted seconds: %s", b)
		}
	}
	// /v1/workers shows the fitted models of the ranks that were observed.
	resp, b = fl.do(http.MethodGet, "/v1/workers", nil)
	var ws struct {
		Workers []struct {
			Ranks []struct {
				TimeModel *struct {
					Prefill1k float64 `json:"prefill_1k_tokens_ms"`
					Samples   uint64  `json:"prefill_samples"`
				} `json:"time_model"`
			} `json:"ranks"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(b, &ws); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("workers: status %d, %v: %s", resp.StatusCode, err, b)
	}
	var samples uint64
	for _, w := range ws.Workers {
		for _, r := range w.Ranks {
			if r.TimeModel != nil {
				if !(r.TimeModel.Prefill1k > 0) {
					t.Fatalf("time model predicts %v ms for 1,000 tokens: %s", r.TimeModel.Prefill1k, b)
				}
				samples += r.TimeModel.Samples
			}
		}
	}
	if samples != 2 {
		t.Fatalf("workers show %d prefill samples, want 2: %s", samples, b)
	}
}

// TestUnstreamedResponsesCountTowardTheRate: responses that are not
// streamed show no first token, so they teach the fits nothing, but each
// still counts toward the serving rank's request rate (kv-time's delay to
// later requests is priced with it; counting streams only read 0 for a
// fleet serving no streams). Three requests at once on one worker read
// 3 × ln 2 / half-life at the last of them, within the time between them.
func TestUnstreamedResponsesCountTowardTheRate(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, speedup: 10, exact: true, rcfg: func(c *router.Config) { c.Policy = "kv-time" }})
	for i := range 3 {
		if resp, b := fl.do(http.MethodPost, "/v1/completions", map[string]any{"prompt": words(20+i, 50), "max_tokens": 3}); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	}
	half := fl.r.Config().TimeModel.HalfLife.Seconds()
	want := 3 * math.Ln2 / half
	var got []router.TimeModel
	// Each request is counted once its response has been relayed, which
	// can be after the client has read it: wait for all three.
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		got = fl.r.TimeModels()
		return len(got) == 1 && got[0].RequestRate >= 0.9*want, fmt.Sprintf("%+v", got)
	}, "the three requests counted")
	if m := got[0]; m.PrefillSamples != 0 || m.RequestRate > want || m.RequestRate < 0.9*want {
		t.Fatalf("model %+v: want no prefill samples and a rate in [0.9, 1] × %v", m, want)
	}
	resp, b := fl.do(http.MethodGet, "/v1/workers", nil)
	var ws struct {
		Workers []struct {
			Ranks []struct {
				TimeModel *struct {
					Rate float64 `json:"requests_per_s"`
				} `json:"time_model"`
			} `json:"ranks"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(b, &ws); err != nil || resp.StatusCode != http.StatusOK || len(ws.Workers) != 1 || len(ws.Workers[0].Ranks) != 1 ||
		ws.Workers[0].Ranks[0].TimeModel == nil || ws.Workers[0].Ranks[0].TimeModel.Rate != got[0].RequestRate {
		t.Fatalf("workers: status %d, %v: %s", resp.StatusCode, err, b)
	}
}
