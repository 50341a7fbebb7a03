package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBenchOnlineCommand drives `kvrouter bench` (online is the default)
// against a fake streaming server on loopback.
func TestBenchOnlineCommand(t *testing.T) {
	var prompts int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Prompt []uint32 `json:"prompt"`
			Stream bool     `json:"stream"`
		}
		if r.URL.Path != "/v1/completions" || json.NewDecoder(r.Body).Decode(&body) != nil || !body.Stream || len(body.Prompt) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		prompts++
		w.Header().Set("X-Kvrouter-Worker", fmt.Sprintf("w%d", prompts%2))
		fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	args := []string{"bench", "--url", srv.URL, "--workload", "prefix-ratio", "--isl", "300", "--osl", "2",
		"--num-prefix-prompts", "1", "--max-requests", "6", "--closed-loop", "1", "--bound-workers", "2", "--json"}
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res []map[string]any
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(res) != 1 || res[0]["requests"] != 6.0 || res[0]["failed"] != 0.0 || res[0]["max_worker_share"] != 0.5 ||
		res[0]["bound_hit_ratio"].(float64) <= 0 || prompts != 6 {
		t.Fatalf("result %v after %d prompts", res, prompts)
	}
	// Without --bound-workers the table says the bound is not known
	// rather than printing a bound of 0; with it, the bound is a number.
	for _, tc := range []struct {
		extra []string
		na    bool
	}{{nil, true}, {[]string{"--bound-workers", "2"}, false}} {
		var table bytes.Buffer
		targs := append([]string{"bench", "--url", srv.URL, "--workload", "prefix-ratio", "--isl", "300", "--osl", "2",
			"--num-prefix-prompts", "1", "--max-requests", "2", "--closed-loop", "1"}, tc.extra...)
		if code := run(context.Background(), targs, nil, &table, io.Discard); code != 0 {
			t.Fatalf("%v: exit %d", tc.extra, code)
		}
		var row []string
		for l := range strings.SplitSeq(table.String(), "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == "online" {
				row = f
			}
		}
		if len(row) < 15 || (row[13] == "n/a") != tc.na || (row[14] == "n/a") != tc.na {
			t.Errorf("%v: want the bound columns n/a: %v, got the row %q:\n%s", tc.extra, tc.na, row, table.String())
		}
	}
	if code := run(context.Background(), []string{"bench", "--url", "ftp://x"}, nil, &out, &errb); code != 2 {
		t.Fatalf("bad url: exit %d", code)
	}
	errb.Reset()
	if code := run(context.Background(), []string{"bench"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "online") {
		t.Fatalf("usage: exit %d %s", code, errb.String())
	}
}
