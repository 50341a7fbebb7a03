package router

// Golden scenario files: testdata/*.txt hold scripts in a small command
// language (in the spirit of etcd raft's datadriven tests, written here by
// hand). Each case is optional '#' comment lines, one command line, a line
// "----" and the expected output up to a blank line. Run
// `go test ./internal/router -run TestScenarios -update` to rewrite the
// expected outputs, then review the diff like code.

import (
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/sequences"
)

var update = flag.Bool("update", false, "rewrite the golden scenario files with the actual output")

type scenarioCase struct {
	prelude []string // comments and blank lines before the command
	cmd     string
	want    []string
	line    int
}

func parseScenario(t *testing.T, path string) []scenarioCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out []scenarioCase
	var cur scenarioCase
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			cur.prelude = append(cur.prelude, l)
			continue
		}
		cur.cmd, cur.line = l, i+1
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command %q is not followed by ----", path, i+1, l)
		}
		i += 2
		for ; i < len(lines) && lines[i] != ""; i++ {
			cur.want = append(cur.want, lines[i])
		}
		out = append(out, cur)
		cur = scenarioCase{}
	}
	return out
}

func writeScenario(path string, cases []scenarioCase) error {
	var b strings.Builder
	for _, c := range cases {
		for _, p := range c.prelude {
			b.WriteString(p + "\n")
		}
		b.WriteString(c.cmd + "\n----\n")
		for _, w := range c.want {
			b.WriteString(w + "\n")
		}
		b.WriteString("\n")
	}
	return os.WriteFile(path, []byte(strings.TrimRight(b.String(), "\n")+"\n"), 0o644)
}

func TestScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no scenario files")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cases := parseScenario(t, f)
			s := &scenario{t: t}
			defer s.close()
			for i := range cases {
				c := &cases[i]
				got := s.run(c.cmd)
				if *update {
					c.want = got
					continue
				}
				if !slices.Equal(got, c.want) {
					t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", f, c.line, c.cmd,
						strings.Join(got, "\n"), strings.Join(c.want, "\n"))
				}
			}
			if *update {
				if err := writeScenario(f, cases); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// scenario is the state a script drives.
type scenario struct {
	t      *testing.T
	r      *Router
	now    time.Time
	events []LifecycleEvent
	bs     int
}

func (s *scenario) close() {}

// bareFlags are options written without a value.
var bareFlags = map[string]bool{"approx": true, "predict": true, "track-output": true}

var workerVerb = regexp.MustCompile(`^w(\d+)(?:/(\d+))?$`)

type handler func(s *scenario, args []string, kv map[string]string) ([]string, error)

var handlers = map[string]handler{
	"config":        (*scenario).cmdConfig,
	"add-worker":    (*scenario).cmdAddWorker,
	"remove-worker": (*scenario).cmdRemoveWorker,
	"down":          (*scenario).cmdDown,
	"up":            (*scenario).cmdUp,
	"route":         (*scenario).cmdRoute,
	"plan":          (*scenario).cmdRoute,
	"mark":          (*scenario).cmdMark,
	"free":          (*scenario).cmdFree,
	"generated":     (*scenario).cmdGenerated,
	"tick":          (*scenario).cmdTick,
	"load":          (*scenario).cmdLoad,
	"events":        (*scenario).cmdEvents,
	"remote":        (*scenario).cmdRemote,
	"stats":         (*scenario).cmdStats,
	"stores":        (*scenario).cmdStores,
	"removes":       (*scenario).cmdRemoves,
	"clears":        (*scenario).cmdClears,
}

// run executes one command line and returns its output lines.
func (s *scenario) run(line string) []string {
	fields := strings.Fields(line)
	name := fields[0]
	args := fields[1:]
	if m := workerVerb.FindStringSubmatch(name); m != nil && len(args) > 0 {
		// "w1 stores a b" is the worker command "stores" with the worker first.
		name, args = args[0], append([]string{fields[0]}, args[1:]...)
	}
	h, ok := handlers[name]
	if !ok {
		s.t.Fatalf("unknown command %q", line)
	}
	if name != "config" && s.r == nil {
		s.t.Fatalf("%q before config", line)
	}
	var pos []string
	kv := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else if bareFlags[a] {
			kv[a] = "true"
		} else {
			pos = append(pos, a)
		}
	}
	if name == "plan" {
		kv["plan"] = "true"
	}
	out, err := h(s, pos, kv)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	if len(out) == 0 {
		return []string{"ok"}
	}
	return out
}

func num[T int | uint64 | float64](s *scenario, kv map[string]string, key string, def T) T {
	v, ok := kv[key]
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		s.t.Fatalf("%s=%q: %v", key, v, err)
	}
	return T(f)
}

func flagSet(kv map[string]string, key string) bool { _, ok := kv[key]; return ok }

// blockTokens returns the tokens of the block called name.
func blockTokens(name string, bs int) []uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	base := h.Sum32()
	out := make([]uint32, bs)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

// promptTokens concatenates named blocks; a "+N" argument appends N extra
// tokens (a partial block).
func (s *scenario) promptTokens(names []string) []uint32 {
	var toks []uint32
	for _, n := range names {
		if extra, ok := strings.CutPrefix(n, "+"); ok {
			k, _ := strconv.Atoi(extra)
			for i := range k {
				toks = append(toks, uint32(1_000_000+i))
			}
			continue
		}
		toks = append(toks, blockTokens(n, s.bs)...)
	}
	return toks
}

func parseWorker(s *scenario, a string) kvevent.WorkerRank {
	m := workerVerb.FindStringSubmatch(a)
	if m == nil {
		s.t.Fatalf("bad worker %q", a)
	}
	id, _ := strconv.Atoi(m[1])
	rk, _ := strconv.Atoi(m[2])
	return kvevent.WorkerRank{ID: kvevent.WorkerID(id), Rank: kvevent.DPRank(rk)}
}

func (s *scenario) cmdConfig(_ []string, kv map[string]string) ([]string, error) {
	cfg := DefaultConfig()
	cfg.BlockSize = num(s, kv, "block-size", 4)
	cfg.Seed = num(s, kv, "seed", uint64(1))
	cfg.RouterID = num(s, kv, "router-id", uint64(1))
	if p, ok := kv["policy"]; ok {
		cfg.Policy = p
	}
	sc := &cfg.Scheduler
	sc.Temperature = num(s, kv, "temperature", sc.Temperature)
	sc.OverlapScoreCredit = num(s, kv, "credit", sc.OverlapScoreCredit)
	sc.OverlapScoreCreditDecay = num(s, kv, "decay", sc.OverlapScoreCreditDecay)
	sc.PrefillLoadScale = num(s, kv, "prefill-scale", sc.PrefillLoadScale)
	sc.HostCacheHitWeight = num(s, kv, "host", sc.HostCacheHitWeight)
	sc.DiskCacheHitWeight = num(s, kv, "disk", sc.DiskCacheHitWeight)
	sc.DecodeActiveRequestWeight = num(s, kv, "request-weight", sc.DecodeActiveRequestWeight)
	sc.ActiveDecodeBlocksThreshold = num(s, kv, "busy-decode", sc.ActiveDecodeBlocksThreshold)
	sc.ActivePrefillTokensThreshold = num(s, kv, "busy-prefill", sc.ActivePrefillTokensThreshold)
	sc.ActivePrefillTokensThresholdFrac = num(s, kv, "busy-prefill-frac", sc.ActivePrefillTokensThresholdFrac)
	cfg.PredictOnRoute = flagSet(kv, "predict")
	cfg.Sequences.ActiveSequenceStride = num(s, kv, "stride", 1)
	cfg.Sequences.TrackOutputBlocks = flagSet(kv, "track-output")
	cfg.Sequences.AssumeKVReuse = kv["reuse"] != "off"
	cfg.Sequences.Expiry = time.Duration(num(s, kv, "expiry-s", 300)) * time.Second
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		return nil, err
	}
	s.now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.events = nil
	s.bs = cfg.BlockSize
	r, err := New(cfg, NewSerial(x), func() time.Time { return s.now }, func(ev LifecycleEvent) { s.events = append(s.events, ev) })
	if err != nil {
		return nil, err
	}
	s.r = r
	return nil, nil
}

func (s *scenario) cmdAddWorker(pos []string, kv map[string]string) ([]string, error) {
	for _, p := range pos {
		id, err := strconv.Atoi(p)
		if err != nil {
			s.t.Fatalf("add-worker %q", p)
		}
		info := WorkerInfo{
			ID:               kvevent.WorkerID(id),
			BlockSize:        num(s, kv, "block-size", s.bs),
			DPStart:          num(s, kv, "dp-start", 0),
			DPSize:           num(s, kv, "ranks", 1),
			KVCapacityBlocks: num(s, kv, "capacity", 0),
			MaxBatchedTokens: num(s, kv, "max-batched", 0),
		}
		if flagSet(kv, "approx") {
			info.Mode = Approximate
		}
		if err := s.r.AddWorker(info); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func (s *scenario) workerID(pos []string) kvevent.WorkerID {
	id, err := strconv.Atoi(pos[0])
	if err != nil {
		s.t.Fatalf("worker id %q", pos[0])
	}
	return kvevent.WorkerID(id)
}

func (s *scenario) cmdRemoveWorker(pos []string, _ map[string]string) ([]string, error) {
	return nil, s.r.RemoveWorker(s.workerID(pos))
}

func (s *scenario) cmdDown(pos []string, _ map[string]string) ([]string, error) {
	if !s.r.SetDown(s.workerID(pos), true) {
		return []string{"unknown worker"}, nil
	}
	return nil, nil
}

func (s *scenario) cmdUp(pos []string, _ map[string]string) ([]string, error) {
	if !s.r.SetDown(s.workerID(pos), false) {
		return []string{"unknown worker"}, nil
	}
	return nil, nil
}

func fl(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func (s *scenario) cmdRoute(pos []string, kv map[string]string) ([]string, error) {
	req := Request{ID: pos[0], Tokens: s.promptTokens(pos[1:])}
	req.ExpectedOutputTokens = num(s, kv, "expect", 0)
	if v, ok := kv["pin"]; ok {
		id, _ := strconv.Atoi(v)
		req.PinnedWorker, req.HasPinned = kvevent.WorkerID(id), true
	}
	if v, ok := kv["allow"]; ok {
		for _, f := range strings.Split(v, ",") {
			id, _ := strconv.Atoi(f)
			req.AllowedWorkers = append(req.AllowedWorkers, kvevent.WorkerID(id))
		}
	}
	if v, ok := kv["dp"]; ok {
		a, b, _ := strings.Cut(v, ":")
		req.DPRankStart, _ = strconv.Atoi(a)
		req.DPRankSize, _ = strconv.Atoi(b)
	}
	for key, dst := range map[string]**float64{"credit": &req.Overrides.OverlapScoreCredit, "prefill-scale": &req.Overrides.PrefillLoadScale, "temperature": &req.Overrides.Temperature} {
		if _, ok := kv[key]; ok {
			v := num(s, kv, key, 0.0)
			*dst = &v
		}
	}
	if kv["reuse"] == "off" {
		req.Reuse = sequences.ReuseOff
	}
	var d Decision
	var err error
	if flagSet(kv, "plan") {
		d, err = s.r.Plan(req)
	} else {
		d, err = s.r.Route(req)
	}
	if err != nil {
		return nil, err
	}
	out := []string{fmt.Sprintf("chose %v (policy %s, overlap %d blocks, prefill %d tokens)", d.Worker, d.Policy, d.OverlapBlocks, d.PrefillTokens)}
	for _, c := range d.Candidates {
		if c.Excluded != scheduler.Eligible {
			out = append(out, fmt.Sprintf("  %v excluded: %s", c.Worker, c.Excluded))
			continue
		}
		line := fmt.Sprintf("  %v overlap %d/%d/%d raw %s credit %s adj %s decode %s reqs %d cost %s",
			c.Worker, c.Overlap.Device, c.Overlap.Host, c.Overlap.Disk,
			fl(c.RawPrefillBlocks), fl(c.CreditBlocks), fl(c.AdjustedPrefillBlocks), fl(c.DecodeBlocks), c.ActiveRequests, fl(c.Cost))
		if c.Probability > 0 {
			line += fmt.Sprintf(" p %.4f", c.Probability)
		}
		out = append(out, line)
	}
	return out, nil
}

func okOrUnknown(ok bool) ([]string, error) {
	if ok {
		return nil, nil
	}
	return []string{"unknown request"}, nil
}

func (s *scenario) cmdMark(pos []string, _ map[string]string) ([]string, error) {
	return okOrUnknown(s.r.MarkPrefillCompleted(pos[0]))
}

func (s *scenario) cmdFree(pos []string, _ map[string]string) ([]string, error) {
	return okOrUnknown(s.r.Free(pos[0]))
}

func (s *scenario) cmdGenerated(pos []string, _ map[string]string) ([]string, error) {
	n, _ := strconv.Atoi(pos[1])
	return okOrUnknown(s.r.SetGenerated(pos[0], n))
}

func (s *scenario) cmdTick(pos []string, _ map[string]string) ([]string, error) {
	d, err := time.ParseDuration(pos[0])
	if err != nil {
		s.t.Fatalf("tick %q: %v", pos[0], err)
	}
	s.now = s.now.Add(d)
	if ids := s.r.Sweep(); len(ids) > 0 {
		return []string{"expired " + strings.Join(ids, " ")}, nil
	}
	return nil, nil
}

func (s *scenario) cmdLoad(_ []string, _ map[string]string) ([]string, error) {
	var out []string
	for _, l := range s.r.Loads() {
		out = append(out, fmt.Sprintf("%v requests %d prefill %d blocks %s", l.Worker, l.ActiveRequests, l.ActivePrefillTokens, fl(l.ActiveBlocks)))
	}
	return out, nil
}

func (s *scenario) cmdEvents(_ []string, _ map[string]string) ([]string, error) {
	var out []string
	for _, ev := range s.events {
		line := fmt.Sprintf("%s router %d request %s on %v", ev.Kind, ev.RouterID, ev.RequestID, ev.Worker)
		if ev.Kind == AddRequest {
			line += fmt.Sprintf(" blocks %d prefill %d expected %d private %v", len(ev.BlockHashes), ev.PrefillTokens, ev.ExpectedOutputTokens, ev.Private)
		}
		out = append(out, line)
	}
	s.events = nil
	if len(out) == 0 {
		return []string{"none"}, nil
	}
	return out, nil
}

// remote <kind> <router-id> <request> [w<id>] [blocks...] [prefill=N]
func (s *scenario) cmdRemote(pos []string, kv map[string]string) ([]string, error) {
	kinds := map[string]LifecycleKind{"add": AddRequest, "mark": MarkPrefillCompleted, "free": Free}
	rid, _ := strconv.ParseUint(pos[1], 10, 64)
	ev := LifecycleEvent{Kind: kinds[pos[0]], RouterID: rid, RequestID: pos[2]}
	if len(pos) > 3 {
		ev.Worker = parseWorker(s, pos[3])
		local, _ := kvhash.LocalHashes(s.promptTokens(pos[4:]), kvhash.Options{BlockSize: s.bs}, nil)
		ev.BlockHashes = kvhash.SequenceHashes(local, nil)
		ev.PrefillTokens = num(s, kv, "prefill", 0)
	}
	if s.r.ApplyRemote(ev) {
		return []string{"applied"}, nil
	}
	return []string{"not applied"}, nil
}

func (s *scenario) cmdStats(_ []string, _ map[string]string) ([]string, error) {
	st := s.r.Stats()
	return []string{fmt.Sprintf("routed %d rejected %d remote-applied %d remote-dropped %d index-errors %d unknown-ids %d expired %d",
		st.Routed, st.Rejected, st.RemoteApplied, st.RemoteDropped, st.IndexErrors, st.Sequences.UnknownIDs, st.Sequences.Expired)}, nil
}

// chainEvent builds a stored event for the chain of named blocks, engine
// hashes being the blocks' sequence hashes.
func (s *scenario) chain(names []string) (local, seq []uint64) {
	local, _ = kvhash.LocalHashes(s.promptTokens(names), kvhash.Options{BlockSize: s.bs}, nil)
	return local, kvhash.SequenceHashes(local, nil)
}

var tiers = map[string]kvevent.Tier{"": kvevent.TierDevice, "device": kvevent.TierDevice, "host": kvevent.TierHostPinned, "disk": kvevent.TierDisk, "external": kvevent.TierExternal}

// w1 stores a b c [after=n] [tier=host]: stores the chain's blocks from
// position `after` on (default 0), below the block before them.
func (s *scenario) cmdStores(pos []string, kv map[string]string) ([]string, error) {
	w := parseWorker(s, pos[0])
	local, seq := s.chain(pos[1:])
	after := num(s, kv, "after", 0)
	ev := kvevent.Event{Worker: w, Kind: kvevent.Stored, Tier: tiers[kv["tier"]]}
	if after > 0 {
		ev.HasParent, ev.Parent = true, seq[after-1]
	}
	for i := after; i < len(local); i++ {
		ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: seq[i], LocalHash: local[i]})
	}
	return nil, s.r.ApplyEvent(ev)
}

// w1 removes a b c: removes the last block of the chain.
func (s *scenario) cmdRemoves(pos []string, kv map[string]string) ([]string, error) {
	_, seq := s.chain(pos[1:])
	return nil, s.r.ApplyEvent(kvevent.Event{Worker: parseWorker(s, pos[0]), Kind: kvevent.Removed, Tier: tiers[kv["tier"]], Removed: []uint64{seq[len(seq)-1]}})
}

func (s *scenario) cmdClears(pos []string, _ map[string]string) ([]string, error) {
	return nil, s.r.ApplyEvent(kvevent.Event{Worker: parseWorker(s, pos[0]), Kind: kvevent.Cleared})
}
