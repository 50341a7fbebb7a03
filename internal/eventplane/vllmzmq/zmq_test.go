package vllmzmq

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/google/go-cmp/cmp"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/vllm"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/prometheus/client_golang/prometheus"
)

// recorder is a Handler that keeps everything it is given.
type recorder struct {
	mu      sync.Mutex
	seqs    []uint64
	events  []kvevent.Event
	states  []StateChange
	refused []string // "seq: refusal"
}

var _ RefusalHandler = (*recorder)(nil)

func (r *recorder) Refused(seq uint64, rs []vllm.Refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range rs {
		r.refused = append(r.refused, fmt.Sprintf("%d: %s %s", seq, x.Reason, x.Detail))
	}
}

func (r *recorder) Apply(seq uint64, evs []kvevent.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seqs = append(r.seqs, seq)
	r.events = append(r.events, evs...)
}

func (r *recorder) StateChanged(c StateChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, c)
}

func (r *recorder) lastState() StateChange {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.states) == 0 {
		return StateChange{}
	}
	return r.states[len(r.states)-1]
}

func (r *recorder) snapshot() ([]uint64, []kvevent.Event, []StateChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs), slices.Clone(r.events), slices.Clone(r.states)
}

const testTopic = "kv-events"

// quiet discards the subscribers' logs in tests.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var worker = kvevent.WorkerRank{ID: 42, Rank: 0}

// batch i stores one 4-token block (tokens 4i..4i+3), hash 1000+i, parent
// 1000+i-1; the expected decoded event is storedEvent(i).
func batch(i int) vllm.RawBatch {
	s := vllm.BlockStored{BlockHashes: []vllm.Hash{vllm.UintHash(uint64(1000 + i))}, BlockSize: 4, Medium: vllm.Str("GPU")}
	if i > 0 {
		s.ParentBlockHash = vllm.UintHash(uint64(1000 + i - 1))
	}
	for j := range 4 {
		s.TokenIDs = append(s.TokenIDs, uint32(4*i+j))
	}
	return vllm.RawBatch{TS: float64(i), Events: []vllm.RawEvent{s}}
}

func storedEvent(i int) kvevent.Event {
	toks := []uint32{uint32(4 * i), uint32(4*i + 1), uint32(4*i + 2), uint32(4*i + 3)}
	return kvevent.Event{Worker: worker, Kind: kvevent.Stored, HasParent: i > 0, Parent: uint64(1000+i-1) * boolU(i > 0),
		Blocks: []kvevent.Block{{EngineHash: uint64(1000 + i), LocalHash: kvhash.LocalHash(toks, kvhash.Seed)}}}
}

func boolU(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

type fixture struct {
	more []*Publisher // closed after the subscriber stops
	pub  *Publisher
	rec  *recorder
	sub  *Subscriber
	reg  *prometheus.Registry
	stop func()
}

func newPublisher(t *testing.T, cfg PublisherConfig) *Publisher {
	t.Helper()
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs a subscriber against p and waits until it is synced and the
// publisher sees its subscription (so no live message is lost to the slow
// joiner problem unless a test wants it).
func start(t *testing.T, p *Publisher, replay bool) *fixture {
	t.Helper()
	f := &fixture{pub: p, rec: &recorder{}, reg: prometheus.NewRegistry()}
	m, err := NewMetrics(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultSubscriberConfig()
	cfg.Worker, cfg.Endpoint, cfg.Topic, cfg.BlockSize, cfg.Metrics = worker, p.Endpoint(), testTopic, 4, m
	cfg.DialRetry, cfg.ReplayTimeout = 20*time.Millisecond, 3*time.Second
	cfg.Logger = quiet
	if replay {
		cfg.ReplayEndpoint = p.ReplayEndpoint()
	}
	f.sub, err = NewSubscriber(cfg, f.rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.sub.Run(ctx) }()
	f.stop = func() {
		// Subscriber first, publishers after: closing a publisher under a
		// live subscriber makes zmq4 redial into the closing listener.
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = p.Close()
		for _, q := range f.more {
			_ = q.Close()
		}
	}
	t.Cleanup(f.stop)
	poll.Until(t, 10*time.Second, func() bool { return f.sub.Status().State == StateExact }, "initial sync")
	poll.Until(t, 10*time.Second, func() bool {
		return slices.Contains(p.pub.(zmq4.Topics).Topics(), testTopic)
	}, "subscription")
	return f
}

func (f *fixture) publish(t *testing.T, i int, fault Fault) {
	t.Helper()
	seq, err := f.pub.PublishFault(batch(i), fault)
	if err != nil {
		t.Fatal(err)
	}
	_ = seq
}

func (f *fixture) waitSeq(t *testing.T, seq uint64) {
	t.Helper()
	poll.Until(t, 10*time.Second, func() bool {
		st := f.sub.Status()
		return st.HasSeq && st.LastSeq >= seq
	}, fmt.Sprintf("sequence %d", seq))
}

func loopback() PublisherConfig {
	c := DefaultPublisherConfig()
	c.Topic = testTopic
	c.ReplayEndpoint = "tcp://127.0.0.1:0"
	return c
}

func TestPublishSubscribeBothEncodings(t *testing.T) {
	for _, enc := range []vllm.Encoding{vllm.EncodingMap, vllm.EncodingArray} {
		t.Run(enc.String(), func(t *testing.T) {
			cfg := loopback()
			cfg.Format = vllm.Format{Encoding: enc}
			f := start(t, newPublisher(t, cfg), true)
			var want []kvevent.Event
			for i := range 20 {
				f.publish(t, i, FaultNone)
				want = append(want, storedEvent(i))
			}
			f.waitSeq(t, 19)
			seqs, got, _ := f.rec.snapshot()
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			if len(seqs) != 20 || seqs[19] != 19 {
				t.Errorf("sequences %v", seqs)
			}
			if n := metricstest.Sum(t, f.reg, "kvrouter_vllm_events_batches_total"); n != 20 {
				t.Errorf("batches_total = %v", n)
			}
		})
	}
}

// A batch dropped on the wire but kept by the publisher is replayed, in
// both reply formats, and nothing is cleared.
func TestGapFilledByReplay(t *testing.T) {
	for _, rf := range []ReplayFormat{ReplayTopic, ReplayLegacy} {
		t.Run(rf.String(), func(t *testing.T) {
			cfg := loopback()
			cfg.ReplayFormat = rf
			f := start(t, newPublisher(t, cfg), true)
			faults := map[int]Fault{3: FaultDropLive, 4: FaultDropLive}
			var want []kvevent.Event
			for i := range 10 {
				f.publish(t, i, faults[i])
				want = append(want, storedEvent(i))
			}
			f.waitSeq(t, 9)
			poll.Until(t, 10*time.Second, func() bool { return f.rec.lastState().State == StateExact }, "EXACT")
			seqs, got, states := f.rec.snapshot()
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			if !slices.Equal(seqs, []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
				t.Errorf("applied sequences %v", seqs)
			}
			last := states[len(states)-1]
			if last.State != StateExact || last.Reason != "replay recovered sequences 3–4" {
				t.Errorf("final state %+v (all: %+v)", last, states)
			}
			if g := metricstest.Sum(t, f.reg, "kvrouter_vllm_events_gaps_total"); g != 1 {
				t.Errorf("gaps_total = %v", g)
			}
			if c := metricstest.Sum(t, f.reg, "kvrouter_vllm_events_clears_total"); c != 0 {
				t.Errorf("clears_total = %v", c)
			}
		})
	}
}

// When replay cannot cover a gap (lost batch, buffer overrun, no replay
// socket) the worker rank is cleared, DEGRADED with the range, and EXACT
// again at the next contiguous batch.
func TestGapNotCoverable(t *testing.T) {
	cases := []struct {
		name   string
		replay bool
		buffer int
		faults map[int]Fault
		resume int // the live batch that reveals the gap, applied after the clear
		reason string
	}{
		{"lost", true, 100, map[int]Fault{3: FaultLose}, 4, "replay could not cover sequences 3 (the publisher's buffer resumes at sequence 4"},
		{"overrun", true, 2, map[int]Fault{3: FaultDropLive, 4: FaultDropLive, 5: FaultDropLive}, 6, "replay could not cover sequences 3–5 (the publisher's buffer resumes at sequence 5"},
		{"no replay", false, 100, map[int]Fault{3: FaultDropLive}, 4, "replay could not cover sequences 3 (no replay endpoint)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := loopback()
			cfg.BufferSteps = c.buffer
			f := start(t, newPublisher(t, cfg), c.replay)
			const n = 9
			for i := range n {
				f.publish(t, i, c.faults[i])
				switch i {
				case 2:
					f.waitSeq(t, 2)
				case 6:
					// Let the gap be handled before publishing more, so the
					// replay buffer's content is known.
					f.waitSeq(t, 6)
				}
			}
			f.waitSeq(t, n-1)
			_, got, states := f.rec.snapshot()
			var degraded *StateChange
			for i := range states {
				if states[i].State == StateDegraded && strings.HasPrefix(states[i].Reason, "replay could not") {
					degraded = &states[i]
				}
			}
			if degraded == nil || !strings.HasPrefix(degraded.Reason, c.reason) {
				t.Fatalf("no DEGRADED with reason %q in %+v", c.reason, states)
			}
			if last := states[len(states)-1]; last.State != StateExact || !strings.HasPrefix(last.Reason, "stream contiguous again") {
				t.Errorf("not EXACT again: %+v", last)
			}
			// Everything before the gap, a clear, then the stream from the
			// batch that revealed the gap.
			want := []kvevent.Event{storedEvent(0), storedEvent(1), storedEvent(2), {Worker: worker, Kind: kvevent.Cleared}}
			for i := c.resume; i < n; i++ {
				want = append(want, storedEvent(i))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			if n := metricstest.Sum(t, f.reg, "kvrouter_vllm_events_clears_total", "cause", "gap"); n != 1 {
				t.Errorf("clears_total{cause=gap} = %v", n)
			}
		})
	}
}

// A message delivered twice is applied once.
func TestDuplicateDropped(t *testing.T) {
	f := start(t, newPublisher(t, loopback()), true)
	for i := range 4 {
		fault := FaultNone
		if i == 1 {
			fault = FaultDuplicate
		}
		f.publish(t, i, fault)
	}
	f.waitSeq(t, 3)
	poll.Until(t, 10*time.Second, func() bool { return metricstest.Sum(t, f.reg, "kvrouter_vllm_events_duplicates_total") == 1 }, "duplicate counted")
	seqs, got, _ := f.rec.snapshot()
	if !slices.Equal(seqs, []uint64{0, 1, 2, 3}) || len(got) != 4 {
		t.Errorf("sequences %v, %d events", seqs, len(got))
	}
	if g := metricstest.Sum(t, f.reg, "kvrouter_vllm_events_gaps_total") + metricstest.Sum(t, f.reg, "kvrouter_vllm_events_clears_total"); g != 0 {
		t.Errorf("gaps + clears = %v", g)
	}
}

// An engine restart (sequence back to 0) clears the rank and recovers.
func TestSequenceReset(t *testing.T) {
	f := start(t, newPublisher(t, loopback()), true)
	for i := range 4 {
		f.publish(t, i, FaultNone)
	}
	f.waitSeq(t, 3)
	f.pub.Restart()
	f.publish(t, 10, FaultNone) // seq 0 of the new engine
	poll.Until(t, 10*time.Second, func() bool {
		_, _, st := f.rec.snapshot()
		return st[len(st)-1].State == StateDegraded
	}, "restart detected")
	f.publish(t, 11, FaultNone) // seq 1
	poll.Until(t, 10*time.Second, func() bool {
		_, _, st := f.rec.snapshot()
		return st[len(st)-1].State == StateExact
	}, "EXACT again")
	seqs, got, states := f.rec.snapshot()
	want := []kvevent.Event{storedEvent(0), storedEvent(1), storedEvent(2), storedEvent(3),
		{Worker: worker, Kind: kvevent.Cleared}, storedEvent(10), storedEvent(11)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if !slices.Equal(seqs, []uint64{0, 1, 2, 3, 3, 0, 1}) {
		t.Errorf("sequences %v", seqs)
	}
	found := false
	for _, s := range states {
		found = found || s.State == StateDegraded && strings.Contains(s.Reason, "sequence went back from 3 to 0")
	}
	if !found {
		t.Errorf("no restart reason in %+v", states)
	}
	if n := metricstest.Sum(t, f.reg, "kvrouter_vllm_events_clears_total", "cause", "restart"); n != 1 {
		t.Errorf("clears_total{cause=restart} = %v", n)
	}
}

// A subscriber started before its publisher keeps dialling, then syncs by
// replay (the initial replay) and follows the live stream. Until the
// publisher starts, a peer that is not one holds the live port, counting
// the subscriber's dials and closing each: after two dials (the first
// handshake failed and was handled) the subscriber must not report itself
// connected.
func TestSubscriberBeforePublisher(t *testing.T) {
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	live, replay := port(), port()
	rec := &recorder{}
	cfg := DefaultSubscriberConfig()
	cfg.Worker, cfg.Topic, cfg.BlockSize, cfg.DialRetry = worker, testTopic, 4, 20*time.Millisecond
	cfg.Logger = quiet
	cfg.Endpoint = fmt.Sprintf("tcp://127.0.0.1:%d", live)
	cfg.ReplayEndpoint = fmt.Sprintf("tcp://127.0.0.1:%d", replay)
	sub, err := NewSubscriber(cfg, rec)
	if err != nil {
		t.Fatal(err)
	}
	squatter := newClosingPeer(t, fmt.Sprintf("127.0.0.1:%d", live))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	poll.Until(t, 10*time.Second, func() bool { return squatter.accepted.Load() >= 2 }, "two dials of the live port")
	if sub.Status().Connected {
		t.Fatal("connected to a peer that is not a publisher")
	}
	squatter.stop()
	pc := loopback()
	pc.Endpoint, pc.ReplayEndpoint = cfg.Endpoint, cfg.ReplayEndpoint
	p := newPublisher(t, pc)
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		_ = p.Close()
	}()
	// Published before the subscription reaches the publisher: lost live,
	// recovered by replay (initial sync or gap).
	for i := range 3 {
		if _, err := p.Publish(batch(i)); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 10*time.Second, func() bool { return slices.Contains(p.pub.(zmq4.Topics).Topics(), testTopic) }, "subscription")
	poll.Until(t, 10*time.Second, func() bool { return sub.Status().State == StateExact }, "synced")
	for i := 3; i < 6; i++ {
		if _, err := p.Publish(batch(i)); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 10*time.Second, func() bool { st := sub.Status(); return st.HasSeq && st.LastSeq == 5 }, "all batches")
	_, got, _ := rec.snapshot()
	var want []kvevent.Event
	for i := range 6 {
		want = append(want, storedEvent(i))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// Messages on another topic are not delivered; refused events are counted.
func TestTopicFilterAndRefusalMetrics(t *testing.T) {
	f := start(t, newPublisher(t, loopback()), false)
	f.publish(t, 0, FaultNone)
	// Sequence 1 on another topic: if it got through, the real sequence 1
	// below would look like a restart and clear the rank.
	other, _ := vllm.Encode(batch(7), vllm.Format{})
	if err := f.pub.pub.Send(zmq4.NewMsgFrom([]byte("other"), seqFrame(1), other)); err != nil {
		t.Fatal(err)
	}
	bad := batch(1)
	s := bad.Events[0].(vllm.BlockStored)
	s.BlockSize = 8
	bad.Events = append(bad.Events, s)
	if _, err := f.pub.Publish(bad); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() bool {
		return metricstest.Sum(t, f.reg, "kvrouter_vllm_events_events_refused_total", "reason", "block_size") == 1
	}, "refusal counted")
	_, got, _ := f.rec.snapshot()
	if diff := cmp.Diff([]kvevent.Event{storedEvent(0), storedEvent(1)}, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if n := metricstest.Sum(t, f.reg, "kvrouter_vllm_events_batches_total"); n != 2 {
		t.Errorf("batches_total = %v", n)
	}
	f.rec.mu.Lock()
	refused := slices.Clone(f.rec.refused)
	f.rec.mu.Unlock()
	if want := []string{"1: block_size block size 8 ≠ 4"}; !slices.Equal(refused, want) {
		t.Errorf("RefusalHandler heard %q, want %q", refused, want)
	}
}

func TestOffsetEndpoint(t *testing.T) {
	cases := map[string]string{"tcp://*:5557/2": "tcp://*:5559", "tcp://10.0.0.5:5557/0": "tcp://10.0.0.5:5557",
		"inproc://kv/3": "inproc://kv_dp3", "tcp://[::1]:6000/1": "tcp://[::1]:6001"}
	for in, want := range cases {
		i := strings.LastIndex(in, "/")
		var rank int
		fmt.Sscan(in[i+1:], &rank)
		got, err := OffsetEndpoint(in[:i], rank)
		if err != nil || got != want {
			t.Errorf("OffsetEndpoint(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ipc:///tmp/x", "tcp://host", "tcp://*:0", "tcp://*:001", "tcp://*:+5", "tcp://*:65535", "tcp://*:"} {
		if _, err := OffsetEndpoint(bad, 1); err == nil {
			t.Errorf("OffsetEndpoint(%q) accepted", bad)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// A restarted engine process (new sockets on the same ports) whose new
// sequence has already passed the old one is detected through the dropped
// connection: the rank is cleared and resynced from the new replay buffer.
func TestPublisherProcessRestart(t *testing.T) {
	cfg := loopback()
	cfg.Endpoint = fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	cfg.ReplayEndpoint = fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	p1 := newPublisher(t, cfg)
	f := start(t, p1, true)
	for i := range 4 {
		f.publish(t, i, FaultNone)
	}
	f.waitSeq(t, 3)
	_ = p1.Close()
	// zmq4 reports the dropped connection only once its automatic redial
	// succeeded, so the new publisher must come up first.
	var p2 *Publisher
	poll.Until(t, 10*time.Second, func() bool {
		var err error
		p2, err = NewPublisher(cfg)
		return err == nil
	}, "rebind")
	f.more = append(f.more, p2)
	poll.Until(t, 10*time.Second, func() bool { return slices.Contains(p2.pub.(zmq4.Topics).Topics(), testTopic) }, "resubscription")
	poll.Until(t, 10*time.Second, func() bool { return metricstest.Sum(t, f.reg, "kvrouter_vllm_events_receive_errors_total") >= 1 }, "receive error")
	for i := 10; i < 16; i++ { // new seq 0..5, lost live but replayable
		if _, err := p2.PublishFault(batch(i), FaultDropLive); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p2.Publish(batch(16)); err != nil { // new seq 6
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() bool { st := f.sub.Status(); return st.LastSeq == 6 && st.State == StateDegraded }, "resync")
	if _, err := p2.Publish(batch(17)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() bool { return f.sub.Status().State == StateExact }, "EXACT again")
	_, got, _ := f.rec.snapshot()
	want := []kvevent.Event{storedEvent(0), storedEvent(1), storedEvent(2), storedEvent(3), {Worker: worker, Kind: kvevent.Cleared}}
	for i := 10; i < 18; i++ {
		want = append(want, storedEvent(i))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}
