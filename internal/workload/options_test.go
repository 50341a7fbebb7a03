package workload

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestOptionsFlags(t *testing.T) {
	o := DefaultOptions()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.RegisterFlags(fs)
	if err := fs.Parse([]string{"--workload", "shared-prefix", "--gsp-num-groups", "4", "--gsp-prompts-per-group", "3",
		"--request-rate", "2", "--workload-seed", "9", "--speedup", "4", "--mt-think-time", "2s"}); err != nil {
		t.Fatal(err)
	}
	if o.Mooncake.Speedup != 4 || o.MultiTurn.ThinkTime != 2*time.Second {
		t.Fatalf("flags not applied: %+v", o)
	}
	a, err := o.Open()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := o.Open()
	ra, rb := Collect(a, 0), Collect(b, 0)
	if len(ra) != 12 || !reflect.DeepEqual(ra, rb) {
		t.Fatalf("%d requests; replays equal: %v", len(ra), reflect.DeepEqual(ra, rb))
	}
	c := DefaultSharedPrefixConfig()
	c.NumGroups, c.PromptsPerGroup, c.RequestRate, c.Seed = 4, 3, 2, 9
	direct, _ := NewSharedPrefix(c)
	if !reflect.DeepEqual(Collect(direct, 0), ra) {
		t.Fatal("--workload-seed not applied as the generator seed")
	}

	small := filepath.Join(t.TempDir(), "small.jsonl")
	if err := os.WriteFile(small, []byte(`{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}
{"timestamp": 3000, "input_length": 10, "output_length": 1, "hash_ids": [1]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, kind := range Kinds {
		o := DefaultOptions()
		o.Kind, o.Trace = kind, small
		o.Mooncake.Limit, o.PrefixRatio.Requests, o.MultiTurn.Sessions = 5, 5, 2
		src, err := o.Open()
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if n := len(Collect(src, 0)); n == 0 || n != src.Len() {
			t.Fatalf("%s: %d requests", kind, n)
		}
		if o.Name() == "" {
			t.Fatal("empty name")
		}
	}
	o = DefaultOptions()
	o.Kind = "nope"
	if _, err := o.Open(); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown kind: %v", err)
	}
	o = DefaultOptions()
	o.Trace = "/nonexistent/trace.jsonl"
	if _, err := o.Open(); err == nil {
		t.Fatal("missing trace accepted")
	}
}
