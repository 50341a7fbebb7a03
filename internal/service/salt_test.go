package service

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/poll"
)

// Two tenants with different cache salts send the same prompt to workers
// that publish vLLM events (the salt in block 0's extra keys): each
// tenant's blocks are indexed under its own salt only, checked against
// the index through /v1/query, and neither's request is predicted, or
// gets, a hit on the other's cache.
func TestTenantSaltsDoNotCrossHit(t *testing.T) {
	r := newRig(t, rigOpt{workers: 2})
	p := prompts(1, 11)[0]
	want := len(p) / blockSize
	query := func(salt string) map[string]int {
		t.Helper()
		body := map[string]any{"model": "Qwen/Qwen3-0.6B", "tokens": p}
		if salt != "" {
			body["cache_salt"] = salt
		}
		resp, b := r.post("/v1/query", body)
		var q queryResp
		if err := json.Unmarshal([]byte(b), &q); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("query: %d %s", resp.StatusCode, b)
		}
		out := map[string]int{}
		for _, w := range q.Workers {
			if w.OverlapBlocks > 0 {
				out[w.Worker] = w.OverlapBlocks
			}
		}
		return out
	}
	send := func(salt string) (worker string, predicted, cached int) {
		t.Helper()
		resp, body := r.post("/v1/completions", map[string]any{"model": "Qwen/Qwen3-0.6B", "prompt": p, "max_tokens": 1, "cache_salt": salt})
		var u struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(body), &u); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("tenant %s: %d %s", salt, resp.StatusCode, body)
		}
		n, _ := strconv.Atoi(resp.Header.Get("X-Kvrouter-Overlap-Blocks"))
		return resp.Header.Get("X-Kvrouter-Worker"), n, u.Usage.Details.Cached
	}
	held := func(salt, w string) {
		t.Helper()
		poll.UntilState(t, 5*time.Second, func() (bool, string) {
			q := query(salt)
			return len(q) == 1 && q[w] == want, "holders " + strconv.Itoa(len(q))
		}, "tenant "+salt+"'s blocks indexed on "+w+" alone")
	}

	wa, _, _ := send("tenant-a")
	held("tenant-a", wa)
	if q := query("tenant-b"); len(q) != 0 {
		t.Fatalf("tenant-b scores tenant-a's blocks: %v", q)
	}
	if q := query(""); len(q) != 0 {
		t.Fatalf("an unsalted prompt scores tenant-a's blocks: %v", q)
	}
	wb, predicted, cached := send("tenant-b")
	if predicted != 0 || cached != 0 {
		t.Fatalf("tenant-b on %s: predicted %d blocks, engine cached %d tokens; want no hit on tenant-a's cache", wb, predicted, cached)
	}
	held("tenant-b", wb)
	held("tenant-a", wa)
	if w, predicted, cached := send("tenant-a"); w != wa || predicted != want || cached == 0 {
		t.Fatalf("tenant-a again: %s predicted %d cached %d, want %s with %d blocks and a hit", w, predicted, cached, wa, want)
	}
	poll.UntilState(t, 5*time.Second, r.noBookings, "no bookings left")
}
