package fleet

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

func TestParseWorkerFlagExample(t *testing.T) {
	got, err := ParseWorkerFlag("name=w1,url=http://10.0.0.5:8000,events=tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558,block-size=16,dp-size=1,topic=kv")
	if err != nil {
		t.Fatal(err)
	}
	want := StaticWorker{Name: "w1", URL: "http://10.0.0.5:8000", Events: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558", BlockSize: 16, DPSize: 1, Topic: "kv"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	rec, err := got.Record(0, DefaultHashContract())
	if err != nil {
		t.Fatal(err)
	}
	wantRec := WorkerRecord{
		ID: DeriveID("w1"), Name: "w1", URL: "http://10.0.0.5:8000", BlockSize: 16, DPSize: 1,
		Events:       EventSource{Kind: EventsZMQ, Endpoint: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558", Topic: "kv"},
		Hash:         DefaultHashContract(),
		RegisteredBy: "static",
	}
	if diff := cmp.Diff(wantRec, rec); diff != "" {
		t.Fatalf("record (-want +got):\n%s", diff)
	}
}

func TestParseWorkerFlagErrors(t *testing.T) {
	cases := map[string]string{
		"name=w1,url=http://h:1,blocksize=16":  `unknown key "blocksize"`,
		"name=w1,url=ftp://h:1":                "bad url",
		"name=w1,url=not a url":                "bad url",
		"name=w1,url=http://h:1,block-size=0":  "must be positive",
		"name=w1,url=http://h:1,block-size=-4": "must be positive",
		"name=w1,url=http://h:1,block-size=x":  "not an integer",
		"name=w1,url=http://h:1,events=h:5557": "bad events endpoint",
		"name=w1,url=http://h:1,dp-size=0":     "must be positive",
		"name=w1,url=http://h:1,name=w2":       "given twice",
		"url=http://h:1":                       "name is required",
		"name=w1":                              "url is required",
		"name=w1,url=http://h:1,oops":          "not key=value",
		"name=w1,url=http://h:1,hash=+lora":    "empty scheme",
		"name=w1,url=http://h:1,hash=x+salt":   "unknown salt",
		"name=w1,url=http://h:1,id=0":          "must be positive",
	}
	for in, want := range cases {
		_, err := ParseWorkerFlag(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseWorkerFlag(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestWorkerFlagsIsAFlag(t *testing.T) {
	var ws WorkerFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&ws, "worker", "a worker")
	err := fs.Parse([]string{"--worker", "name=a,url=http://h:1", "--worker", "name=b,url=http://h:2,events=nats"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[1].Events != "nats" {
		t.Fatalf("got %+v", ws)
	}
	if got := ws.String(); got != "name=a,url=http://h:1 name=b,url=http://h:2" {
		t.Errorf("String() = %q", got)
	}
	if err := fs.Parse([]string{"--worker", "name=a,url=http://h:3"}); err == nil || !strings.Contains(err.Error(), "duplicate name") {
		t.Errorf("duplicate name accepted: %v", err)
	}
}

func TestBuildStatic(t *testing.T) {
	entries := []StaticWorker{
		{Name: "a", URL: "http://h:1"},
		{Name: "b", URL: "http://h:2", Events: "nats", BlockSize: 32, Hash: "xxh3-1337-v1"},
	}
	recs, err := BuildStatic(entries, 16, DefaultHashContract())
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].BlockSize != 16 || recs[0].Events.Kind != EventsNone || recs[0].DPSize != 1 {
		t.Errorf("defaults not applied: %+v", recs[0])
	}
	if recs[1].BlockSize != 32 || recs[1].Hash != (HashContract{Scheme: SchemeXXH3}) || recs[1].Events.Kind != EventsNATS {
		t.Errorf("explicit values lost: %+v", recs[1])
	}
	if _, err := BuildStatic(append(entries, StaticWorker{Name: "a", URL: "http://h:3"}), 16, DefaultHashContract()); err == nil || !strings.Contains(err.Error(), "duplicate name") {
		t.Errorf("duplicate name: %v", err)
	}
	dupID := []StaticWorker{{Name: "a", URL: "http://h:1", ID: 5}, {Name: "b", URL: "http://h:1", ID: 5}}
	if _, err := BuildStatic(dupID, 16, DefaultHashContract()); err == nil || !strings.Contains(err.Error(), "id 5 already used") {
		t.Errorf("duplicate id: %v", err)
	}
	if _, err := BuildStatic([]StaticWorker{{Name: "a", URL: "http://h:1"}}, 0, DefaultHashContract()); err == nil || !strings.Contains(err.Error(), "block size 0") {
		t.Errorf("no block size anywhere: %v", err)
	}
	if _, err := BuildStatic([]StaticWorker{{Name: "a", URL: "http://h:1", Replay: "tcp://h:2"}}, 16, DefaultHashContract()); err == nil {
		t.Error("replay without events accepted")
	}
}

func TestParseStaticYAML(t *testing.T) {
	const doc = `
workers:
  - name: w1
    url: http://10.0.0.5:8000
    events: tcp://10.0.0.5:5557
    replay: tcp://10.0.0.5:5558
    topic: kv
    block-size: 16
    dp-size: 2
    kv-blocks: 4096
  - name: w2
    url: http://10.0.0.6:8000
`
	ws, err := ParseStaticYAML(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []StaticWorker{
		{Name: "w1", URL: "http://10.0.0.5:8000", Events: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558", Topic: "kv", BlockSize: 16, DPSize: 2, KVBlocks: 4096},
		{Name: "w2", URL: "http://10.0.0.6:8000"},
	}
	if diff := cmp.Diff(want, ws); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	_, err = ParseStaticYAML(strings.NewReader("workers:\n  - name: w1\n    url: http://h:1\n    blok-size: 16\n"))
	if err == nil || !strings.Contains(err.Error(), "blok-size") {
		t.Errorf("unknown key accepted: %v", err)
	}
	ws, err = ParseStaticYAML(strings.NewReader(""))
	if err != nil || len(ws) != 0 {
		t.Errorf("empty document: %v %v", ws, err)
	}
}

func TestDeriveID(t *testing.T) {
	a, b := DeriveID("w1"), DeriveID("w2")
	if a == b || a == 0 || a >= 1<<53 || a != DeriveID("w1") {
		t.Errorf("DeriveID: w1=%d w2=%d", a, b)
	}
}

func TestHashContractString(t *testing.T) {
	for _, h := range []HashContract{DefaultHashContract(), {Scheme: "x"}, {Scheme: "x", NamespaceSalt: true}} {
		p, err := ParseHashContract(h.String())
		if err != nil || p != h {
			t.Errorf("round trip %v: %v %v", h, p, err)
		}
	}
	if DefaultHashContract().String() != "xxh3-1337-v1+lora+ns" {
		t.Errorf("default = %s", DefaultHashContract())
	}
}

func TestExpectCheck(t *testing.T) {
	e := Expect{BlockSize: 16, Hash: DefaultHashContract()}
	rec := WorkerRecord{BlockSize: 32, Events: EventSource{Kind: EventsZMQ}, Hash: HashContract{Scheme: "other"}}
	err := e.Check(rec)
	if !errors.Is(err, ErrBlockSizeMismatch) || !strings.Contains(err.Error(), "block size 32 ≠ 16") {
		t.Errorf("block size: %v", err)
	}
	rec.BlockSize = 16
	if err := e.Check(rec); err != nil {
		t.Errorf("zmq worker's contract checked: %v", err)
	}
	rec.Events.Kind = EventsNATS
	if err := e.Check(rec); !errors.Is(err, ErrHashContractMismatch) {
		t.Errorf("hash contract: %v", err)
	}
	if err := (Expect{Hash: DefaultHashContract()}).Check(WorkerRecord{BlockSize: 64, Hash: DefaultHashContract(), Events: EventSource{Kind: EventsNATS}}); err != nil {
		t.Errorf("any block size: %v", err)
	}
}

func TestStatusTo(t *testing.T) {
	t0 := time.Unix(100, 0)
	s := Status{}.To(StateDegraded, "gap 5-9", t0)
	s = s.To(StateDegraded, "gap 5-12", t0.Add(time.Second))
	if s.Since != t0 || s.Reason != "gap 5-12" {
		t.Errorf("same state moved since: %+v", s)
	}
	s = s.To(StateExact, "", t0.Add(2*time.Second))
	if s.Since != t0.Add(2*time.Second) || s.State != StateExact {
		t.Errorf("transition: %+v", s)
	}
	for st := StateDown; st <= StateRefused; st++ {
		var back State
		b, _ := st.MarshalText()
		if err := back.UnmarshalText(b); err != nil || back != st {
			t.Errorf("state %v round trip: %v %v", st, back, err)
		}
	}
	if StateRefused.Routable() || StateDown.Routable() || !StateApprox.Routable() {
		t.Error("Routable wrong")
	}
}

func FuzzParseWorkerFlag(f *testing.F) {
	f.Add("name=w1,url=http://10.0.0.5:8000,events=tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558,block-size=16,dp-size=1,topic=kv")
	f.Add("name=a,url=https://h,events=nats,hash=xxh3-1337-v1+ns,id=7,dp-start=2,kv-blocks=9,max-batched-tokens=8192")
	f.Add("name==,url=http://[::1]:80,,")
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseWorkerFlag(s)
		if err != nil {
			return
		}
		if w.Name == "" || w.URL == "" {
			t.Fatalf("accepted %q without name or url: %+v", s, w)
		}
		rec, err := w.Record(16, DefaultHashContract())
		if err != nil {
			return
		}
		if rec.BlockSize <= 0 || rec.DPSize == 0 || rec.ID == 0 || rec.ID != kvevent.WorkerID(w.ID) && w.ID != 0 {
			t.Fatalf("bad record from %q: %+v", s, rec)
		}
	})
}

// The registry record's JSON is a wire format (agents and mockers write
// it): pin it.
func TestWorkerRecordJSON(t *testing.T) {
	r := WorkerRecord{
		ID: 42, Name: "w1", Model: "qwen3", URL: "http://10.0.0.5:8000", BlockSize: 16, DPStart: 0, DPSize: 2,
		KVCapacityBlocks: 4096, MaxBatchedTokens: 8192,
		Events:       EventSource{Kind: EventsZMQ, Endpoint: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558", Topic: "kv"},
		Hash:         DefaultHashContract(),
		RegisteredBy: "agent",
	}
	const want = `{"worker_id":42,"name":"w1","model":"qwen3","url":"http://10.0.0.5:8000","block_size":16,"dp_start":0,"dp_size":2,` +
		`"kv_capacity_blocks":4096,"max_batched_tokens":8192,` +
		`"events":{"kind":"zmq","endpoint":"tcp://10.0.0.5:5557","replay":"tcp://10.0.0.5:5558","topic":"kv"},` +
		`"hash":{"scheme":"xxh3-1337-v1","lora_salt":true,"namespace_salt":true},"registered_by":"agent"}`
	got, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("json\n got %s\nwant %s", got, want)
	}
	var back WorkerRecord
	if err := json.Unmarshal([]byte(want), &back); err != nil || back != r {
		t.Errorf("decode: %+v %v", back, err)
	}
}

// TestRoleSyntax: role= and bootstrap-port= in the flag syntax reach the
// record; a record without a role reads as both; a bad role is refused.
func TestRoleSyntax(t *testing.T) {
	w, err := ParseWorkerFlag("name=p1,url=http://10.0.0.5:8000,role=prefill,bootstrap-port=8998")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := w.Record(16, DefaultHashContract())
	if err != nil || rec.Role != RolePrefill || rec.BootstrapPort != 8998 {
		t.Fatalf("record %+v (%v), want role prefill and bootstrap port 8998", rec, err)
	}
	if _, err := ParseWorkerFlag("name=p1,url=http://10.0.0.5:8000,role=chef"); err == nil {
		t.Error("role=chef accepted")
	}
	var old WorkerRecord
	if err := json.Unmarshal([]byte(`{"worker_id":1,"name":"w","url":"http://h:1","block_size":16,"dp_size":1,"events":{"kind":"none"},"hash":{"scheme":"x"}}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Role.Normal() != RoleBoth || old.Validate() != nil {
		t.Errorf("an old record reads as role %q (valid: %v), want both", old.Role.Normal(), old.Validate())
	}
}
