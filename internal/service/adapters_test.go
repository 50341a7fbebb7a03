package service

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// A LoRA adapter loaded on two of four workers: the router learns it from
// their /v1/models, lists it, sends its requests only to those two, and
// hashes them with the adapter's name, as the engines' events do, so its
// blocks are found again but never match the base model's.
func TestAdapterOnTwoOfFourWorkers(t *testing.T) {
	const base, lora = "Qwen/Qwen3-0.6B", "sql-lora"
	r := newRig(t, rigOpt{workers: 4, models: []FleetModel{{Name: base, LoRAAdapters: []string{lora}}, {Name: base}},
		cfg: func(c *config.Config) { c.Events.LoRARefresh = time.Hour }}) // learned on join, not by the timer
	var holders []string
	for i, w := range r.fleet.Workers {
		if i%2 == 0 {
			holders = append(holders, w.Name)
		}
	}
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		_, body := r.get("/v1/models")
		return strings.Contains(body, `"`+lora+`"`), body
	}, "the adapter listed on /v1/models")

	complete := func(model string, tokens []uint32) (string, int) {
		t.Helper()
		resp, body := r.post("/v1/completions", map[string]any{"model": model, "prompt": tokens, "max_tokens": 2})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, body)
		}
		n, _ := strconv.Atoi(resp.Header.Get("X-Kvrouter-Overlap-Blocks"))
		return resp.Header.Get("X-Kvrouter-Worker"), n
	}
	ps := prompts(6, 21)
	for _, p := range ps {
		if w, _ := complete(lora, p); !slices.Contains(holders, w) {
			t.Fatalf("the adapter's request reached %s; it is loaded on %v", w, holders)
		}
	}
	p := ps[0]
	want := len(p) / blockSize
	var at string
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		q := r.queryModel(lora, p)
		for w, n := range q {
			if n == want {
				at = w
				return true, ""
			}
		}
		return false, "adapter query: " + strconv.Itoa(len(q)) + " rows, none with all blocks"
	}, "the adapter's blocks indexed under its name")
	if q := r.queryModel(base, p); q[at] != 0 {
		t.Fatalf("the base model scores %d of the adapter's blocks on %s", q[at], at)
	}
	if w, n := complete(lora, p); w != at || n != want {
		t.Fatalf("the adapter's prompt again: %s with %d blocks, want %s with %d", w, n, at, want)
	}
	if _, n := complete(base, p); n != 0 {
		t.Fatalf("the base model's request for the same tokens predicted %d cached blocks", n)
	}
	poll.UntilState(t, 5*time.Second, r.noBookings, "no bookings left")
}

// parseAdapters keeps the entries with a parent, bounded and deduplicated,
// and skips what is malformed.
func TestParseAdapters(t *testing.T) {
	body := `{"object":"list","data":[{"id":"base","parent":null},{"id":"b-lora","parent":"base"},{"id":"a-lora","parent":"base"},
		{"id":"a-lora","parent":"base"},{"id":"","parent":"base"},{"id":"self","parent":"self"},{"id":"` + strings.Repeat("x", 300) + `","parent":"base"},
		{"id":7},{"parent":"base"}]}`
	got, err := parseAdapters([]byte(body))
	if err == nil || got != nil {
		// {"id":7} is a type error for the whole body: nothing is kept.
		t.Fatalf("%v %v", got, err)
	}
	body = strings.Replace(body, `{"id":7},`, "", 1)
	got, err = parseAdapters([]byte(body))
	if err != nil || !slices.Equal(got, []string{"a-lora", "b-lora"}) {
		t.Fatalf("%v %v", got, err)
	}
	var many strings.Builder
	many.WriteString(`{"data":[`)
	for i := range 3000 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`{"id":"l` + strconv.Itoa(i) + `","parent":"base"}`)
	}
	many.WriteString("]}")
	if got, err := parseAdapters([]byte(many.String())); err != nil || len(got) != maxAdaptersPerWkr {
		t.Fatalf("3000 adapters: kept %d, %v", len(got), err)
	}
	a := newAdapterSet()
	a.set(2, []string{"a-lora"})
	a.set(1, []string{"a-lora", "b-lora"})
	if h := a.holders("a-lora"); !slices.Equal(h, []kvevent.WorkerID{1, 2}) {
		t.Fatalf("holders %v", h)
	}
	a.forget(1)
	if h := a.holders("b-lora"); len(h) != 0 {
		t.Fatalf("a forgotten worker still holds b-lora: %v", h)
	}
}

// With /v1/models never read (--lora-refresh-interval 0), the router
// still learns an adapter from the lora_name of a worker's KV events: a
// request sent to the worker directly makes it store adapter blocks, and
// the router then lists the adapter and routes it there.
func TestAdapterLearnedFromEvents(t *testing.T) {
	const base, lora = "Qwen/Qwen3-0.6B", "sql-lora"
	r := newRig(t, rigOpt{workers: 2, models: []FleetModel{{Name: base, LoRAAdapters: []string{lora}}, {Name: base}},
		cfg: func(c *config.Config) { c.Events.LoRARefresh = 0 }})
	holder := r.fleet.Workers[0]
	if resp, body := r.post("/v1/completions", map[string]any{"model": lora, "prompt": prompts(1, 3)[0], "max_tokens": 1}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an adapter nobody announced: %d %s", resp.StatusCode, body)
	}
	direct := map[string]any{"model": lora, "prompt": prompts(1, 4)[0], "max_tokens": 1}
	b, _ := json.Marshal(direct)
	resp, err := http.Post(holder.URL+"/v1/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("direct adapter request: %s", resp.Status)
	}
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		_, body := r.get("/v1/models")
		return strings.Contains(body, `"`+lora+`"`), body
	}, "the adapter learned from the worker's events")
	for _, p := range prompts(4, 8) {
		resp, body := r.post("/v1/completions", map[string]any{"model": lora, "prompt": p, "max_tokens": 1})
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Kvrouter-Worker") != holder.Name {
			t.Fatalf("adapter request: %d on %q: %s", resp.StatusCode, resp.Header.Get("X-Kvrouter-Worker"), body)
		}
	}
	poll.UntilState(t, 5*time.Second, r.noBookings, "no bookings left")
}
