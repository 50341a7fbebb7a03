package service

// The hostile-peer suite (issue 21 B). One real in-process deployment, built
// by newRig as the other service tests build theirs: a router with its
// embedded NATS server (token generated into <data-dir>/nats-token, as
// `kvrouter up` and `serve` do), replica sync on, and three static mock
// vLLM workers whose engines bind a ZMQ PUB and a replay ROUTER that the
// router subscribes to. This fleet shape is the one that exposes every
// listener an attacker can reach in one process: HTTP (router and
// workers), bound ZMQ sockets, and NATS (registry, RouterEvents, replica
// sync). TestHostilePeers replays, against those real loopback sockets:
//
//   - headers/oversized: 64 KiB of headers get 431;
//   - body/oversized: a 5 MiB body (limit 4 MiB), with and without a
//     Content-Length, gets 413;
//   - json/deep: 200,000 nested arrays get 400;
//   - json/utf8: invalid UTF-8 in a prompt, in chat content and in a key
//     is read as encoding/json reads it (each bad byte a U+FFFD): the same
//     prompt tokens as the repaired body;
//   - slowloris: 40 connections whose headers never end are closed by the
//     router after --read-header-timeout;
//   - body/stalled: 40 connections promising 1000 bytes and sending 9 are
//     answered 408 and closed after --body-read-timeout;
//   - disconnects: 60 streaming completions (max_tokens 20,000) cut after
//     their first chunk: all end, some seen by the router as gone (499 on
//     the status page), nothing left in flight;
//   - max-tokens: absurd max_tokens (2^63-1, -1, 0, 1e300, 2^31) get 400
//     from the router; 2^63-1 sent straight to every mock worker gets a
//     4xx and no panic (a panic in any goroutine ends the test binary);
//   - prompt/huge-word: three parallel 3 MiB one-word prompts (limit 4096
//     tokens) get 413;
//   - zmq: on every worker's bound PUB and replay ROUTER, a frame bomb
//     (greeting, then a header announcing 1 GiB), the same after a full
//     handshake as the socket's peer type, and a greeting followed by
//     garbage are each dropped; 20 connections with a greeting that is none
//     and 20 handshaking as a PUB (with the bomb), which zmq4 keeps open,
//     are left open until the probe ends; nothing near the claim is
//     allocated;
//   - nats/unknown-ids: RouterEvents for 500 made-up worker ids (4 each)
//     are all counted as dropped and none is listed or indexed;
//   - registry: without the NATS token the connection is refused; with it,
//     a record claiming a static worker's id is refused as a conflict
//     (static wins), and a second live instance writing a registered
//     worker's key is counted as a takeover and ignored (its URL never
//     taken);
//   - replica/forged: AddRequests from a router id that never joined are
//     refused and counted, nothing is booked.
//
// After all probes: the router is ready and serves completions, every
// worker answers /health, the heap in use (runtime.MemStats, sampled every
// 20 ms during the probes) never grew by more than heapBound over the
// baseline and VmRSS is reported, bookings and the in-flight gauges on
// /metrics are back to 0, and the router's exact index equals what the
// engines hold (their local indexes, dumped) and answers /v1/query for the
// honest prompts as before the probes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard/zmtptest"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/registry"
	"github.com/kvrouter/kvrouter/internal/replica"
	"github.com/kvrouter/kvrouter/internal/router"
)

// heapBound is how much the heap in use may grow over its baseline while
// the probes run: far below the frame bomb's 1 GiB claim, well above
// what the probes' own bodies (a few MiB each) cost.
const heapBound = 256 << 20

const (
	hostileHeaderTimeout = 400 * time.Millisecond
	// The body timeout is also what the 5 MiB body of body/oversized
	// must arrive within to get its 413 rather than a 408: at 400 ms it
	// did not, three times at load 20–30.
	hostileBodyTimeout = 2 * time.Second
	hostileTTL         = 2 * time.Second
)

func TestHostilePeers(t *testing.T) {
	r := newRig(t, rigOpt{workers: 3, cfg: func(c *config.Config) {
		c.EventPlane.ReplicaSync = true
		c.EventPlane.Registry.TTL = hostileTTL
		c.Frontend.MaxBodyBytes = 4 << 20
		c.Frontend.MaxPromptTokens = 4096
		c.Frontend.MaxHeaderBytes = 16 << 10
		c.Frontend.ReadHeaderTimeout = hostileHeaderTimeout
		c.Frontend.BodyReadTimeout = hostileBodyTimeout
	}})
	r.waitExact()
	addr := strings.TrimPrefix(r.url, "http://")

	// The honest traffic whose index must survive every probe.
	honest := prompts(12, 21)
	r.matchEngines(honest, false)
	before := map[int]map[string]int{}
	for i, p := range honest {
		before[i] = r.query(p)
	}
	// honestQuery is /v1/query's answer for the static workers only.
	honestQuery := func(p []uint32) map[string]int {
		q := r.query(p)
		delete(q, "victim")
		return q
	}

	heap := startHeapSampler()
	defer heap.stop()

	tok, err := natsbus.ReadTokenFile(filepath.Join(r.svc.cfg.DataDir, "nats-token"))
	if err != nil {
		t.Fatal(err)
	}
	natsURL := r.svc.Bus().ClientURL()
	nc, err := nats.Connect(natsURL, nats.Token(tok))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	// A registered worker (approximate, served by mock-3's engine) with a
	// live lease: the target of the key takeover below.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reg, err := registry.OpenRegistry(ctx, js, r.svc.cfg.EventPlane.Registry, nil)
	if err != nil {
		t.Fatal(err)
	}
	victimURL := r.fleet.Workers[2].URL
	victim := fleet.WorkerRecord{Name: "victim", URL: victimURL, BlockSize: blockSize, DPSize: 1,
		Events: fleet.EventSource{Kind: fleet.EventsNone}, Hash: fleet.DefaultHashContract(), RegisteredBy: "hostile test", Instance: "owner"}
	lease, err := reg.Register(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lease.Close(context.Background()) }()
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		_, ok := r.workers()["victim"]
		return ok, "not yet"
	}, "victim listed")

	t.Run("headers/oversized", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/completions", strings.NewReader(`{"prompt":"hi","max_tokens":1}`))
		req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
		if code := do(t, req); code != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("64 KiB of headers: %d, want 431", code)
		}
	})

	t.Run("body/oversized", func(t *testing.T) {
		big := `{"model":"Qwen/Qwen3-0.6B","prompt":"` + strings.Repeat("hello ", (5<<20)/6) + `","max_tokens":1}`
		head := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
		if st := exchange(t, addr, head+fmt.Sprintf("Content-Length: %d\r\n\r\n", len(big)), big); st != http.StatusRequestEntityTooLarge {
			t.Fatalf("5 MiB body with a length: %d, want 413", st)
		}
		chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big)
		if st := exchange(t, addr, head+"Transfer-Encoding: chunked\r\n\r\n", chunked); st != http.StatusRequestEntityTooLarge {
			t.Fatalf("5 MiB chunked body: %d, want 413", st)
		}
	})

	t.Run("json/deep", func(t *testing.T) {
		const depth = 200000
		body := `{"model":"Qwen/Qwen3-0.6B","max_tokens":1,"prompt":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`
		for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/v1/query"} {
			if code := postRaw(t, r.url+path, body); code != http.StatusBadRequest {
				t.Fatalf("%s with %d nested arrays: %d, want 400", path, depth, code)
			}
		}
	})

	t.Run("json/utf8", func(t *testing.T) {
		// Invalid UTF-8 is read as encoding/json reads it (each bad byte a
		// U+FFFD): the prompt counts the tokens of that reading.
		for _, c := range []struct{ path, body string }{
			{"/v1/completions", "{\"model\":\"Qwen/Qwen3-0.6B\",\"max_tokens\":1,\"prompt\":\"hi \xff\xfe there\"}"},
			{"/v1/chat/completions", "{\"model\":\"Qwen/Qwen3-0.6B\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"caf\xc3\x28 \xed\xa0\x80\"}]}"},
			{"/v1/completions", "{\"model\":\"Qwen/Qwen3-0.6B\",\"max_tokens\":1,\"prompt\":\"hi\",\"\xed\xa0\x80\":1}"},
		} {
			var v map[string]any
			if err := json.Unmarshal([]byte(c.body), &v); err != nil {
				t.Fatal(err)
			}
			valid, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			got, want := promptTokens(t, r.url+c.path, c.body), promptTokens(t, r.url+c.path, string(valid))
			if got != want || want <= 0 {
				t.Fatalf("invalid UTF-8 %q on %s: %d prompt tokens, %d for encoding/json's reading of it", c.body, c.path, got, want)
			}
		}
	})

	t.Run("slowloris", func(t *testing.T) {
		conns := dialN(t, addr, 40, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: ")
		for i, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(hostileHeaderTimeout + 10*time.Second))
			_, err := io.Copy(io.Discard, c) // nil (EOF) or a reset: closed by the router
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection %d with unfinished headers still open 10 s after --read-header-timeout", i)
			}
		}
	})

	t.Run("body/stalled", func(t *testing.T) {
		conns := dialN(t, addr, 40, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\"")
		for i, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(hostileBodyTimeout + 10*time.Second))
			b, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("connection %d with a stalled body: read %q: %v", i, b, err)
			}
			if !strings.HasPrefix(string(b), "HTTP/1.1 408 ") || !strings.Contains(string(b), "Connection: close") {
				t.Fatalf("connection %d with a stalled body: %q, want 408 and Connection: close", i, b)
			}
		}
	})

	t.Run("disconnects", func(t *testing.T) {
		var cut atomic.Int64
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Go(func() {
				p := prompts(1, uint32(1000+i))[0]
				body := fmt.Sprintf(`{"model":"Qwen/Qwen3-0.6B","prompt":%s,"max_tokens":20000,"stream":true}`, jsonInts(p))
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close() // mid-stream
				fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Errorf("stream %d ended before a first chunk: %v", i, err)
						return
					}
					if strings.HasPrefix(line, "HTTP/1.1 ") && !strings.HasPrefix(line, "HTTP/1.1 200 ") {
						t.Errorf("stream %d: %s", i, line)
						return
					}
					if strings.HasPrefix(line, "data: ") {
						cut.Add(1)
						return
					}
				}
			})
		}
		wg.Wait()
		// Every request ended, and the router saw clients go mid-stream (the
		// status page's recent requests: 499, "client disconnected").
		poll.UntilState(t, 20*time.Second, func() (bool, string) {
			code, body := r.get("/?format=json")
			var st struct {
				InFlight int `json:"in_flight"`
				Recent   []struct {
					Status  int    `json:"status"`
					Outcome string `json:"outcome"`
				} `json:"recent"`
			}
			if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
				return false, fmt.Sprintf("status page %d %.200s", code, body)
			}
			gone := 0
			for _, rq := range st.Recent {
				if rq.Status == 499 {
					gone++
				}
			}
			return cut.Load() == 60 && st.InFlight == 0 && gone > 0, fmt.Sprintf("%d cut, %d in flight, %d of the %d recent seen gone", cut.Load(), st.InFlight, gone, len(st.Recent))
		}, "every cut stream ended")
	})

	t.Run("max-tokens", func(t *testing.T) {
		for _, v := range []string{"9223372036854775807", "-1", "0", "1e300", "2147483648"} {
			body := `{"model":"Qwen/Qwen3-0.6B","prompt":"hi","max_tokens":` + v + `}`
			if code := postRaw(t, r.url+"/v1/completions", body); code != http.StatusBadRequest {
				t.Fatalf("max_tokens %s through the router: %d, want 400", v, code)
			}
			chat := `{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":` + v + `}`
			if code := postRaw(t, r.url+"/v1/chat/completions", chat); code != http.StatusBadRequest {
				t.Fatalf("max_completion_tokens %s through the router: %d, want 400", v, code)
			}
		}
		for _, w := range r.fleet.Workers {
			body := `{"model":"Qwen/Qwen3-0.6B","prompt":"hi","max_tokens":9223372036854775807}`
			if code := postRaw(t, w.URL+"/v1/completions", body); code < 400 || code >= 500 {
				t.Fatalf("max_tokens 2^63-1 straight to %s: %d, want a 4xx", w.Name, code)
			}
		}
	})

	t.Run("prompt/huge-word", func(t *testing.T) {
		body := `{"model":"Qwen/Qwen3-0.6B","max_tokens":1,"prompt":"` + strings.Repeat("a", 3<<20) + `"}`
		codes := make([]int, 3)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() { codes[i] = postRaw(t, r.url+"/v1/completions", body) })
		}
		wg.Wait()
		for i, code := range codes {
			if code != http.StatusRequestEntityTooLarge {
				t.Fatalf("3 MiB one-word prompt %d: %d, want 413", i, code)
			}
		}
	})

	t.Run("zmq", func(t *testing.T) {
		allocated := zmtptest.Allocated()
		badGreeting := bytes.Repeat([]byte{0x5a}, 64)
		garbage := append(zmtptest.Greeting(), bytes.Repeat([]byte{0xff, 0x00, 0x13, 0x37}, 256)...)
		for _, w := range r.fleet.Workers {
			for _, ep := range []string{w.Events, w.Replay} {
				hp := strings.TrimPrefix(ep, "tcp://")
				// The bombs, after the greeting and after a full handshake as the
				// socket's peer type: dropped at the header.
				peer := "SUB"
				if ep == w.Replay {
					peer = "DEALER"
				}
				zmtptest.BombDial(t, hp, zmtptest.BombSize)
				zmtptest.SendDial(t, hp, zmtptest.HandshakeBomb(peer, zmtptest.BombSize))
				zmtptest.SendDial(t, hp, garbage)
				// A greeting that is none, and a handshake as the wrong peer
				// type (with its bomb): zmq4 keeps such connections open a
				// while, so they are left open (closed at the end) and only
				// what they cost is checked.
				dialN(t, hp, 20, string(badGreeting))
				dialN(t, hp, 20, string(zmtptest.HandshakeBomb("PUB", zmtptest.BombSize)))
			}
		}
		if grown := zmtptest.Allocated() - allocated; grown > zmtptest.BombSize/2 {
			t.Fatalf("%d MiB allocated while frame bombs announcing %d MiB were played", grown>>20, zmtptest.BombSize>>20)
		}
	})

	t.Run("nats/unknown-ids", func(t *testing.T) {
		dropped := func() float64 {
			return r.metric("kvrouter_eventplane_events_dropped_total", "reason", "unknown_worker")
		}
		start := dropped()
		forger, err := natsevents.NewPublisher(natsevents.DefaultPublisherConfig(), nc)
		if err != nil {
			t.Fatal(err)
		}
		defer forger.Close()
		const ids, perID = 500, 4
		for i := range ids {
			var evs []kvevent.Event
			for j := range perID {
				evs = append(evs, kvevent.Event{ID: uint64(j), Worker: kvevent.WorkerRank{ID: kvevent.WorkerID(1_000_000 + i)}, Kind: kvevent.Stored,
					Blocks: []kvevent.Block{{EngineHash: uint64(j + 1), LocalHash: uint64(j + 100)}}})
			}
			if err := forger.Publish(evs); err != nil {
				t.Fatal(err)
			}
		}
		poll.UntilState(t, 15*time.Second, func() (bool, string) {
			d := dropped() - start
			return d == ids*perID, fmt.Sprintf("%v of %d dropped", d, ids*perID)
		}, "every forged event counted as dropped")
		if ws := r.workers(); len(ws) != len(r.fleet.Workers)+1 {
			t.Fatalf("workers after the flood: %v", keys(ws))
		}
	})

	t.Run("registry/no-token", func(t *testing.T) {
		c, err := nats.Connect(natsURL, nats.Timeout(2*time.Second), nats.MaxReconnects(0))
		if err == nil {
			c.Close()
			t.Fatal("a client without the token connected to the embedded NATS server")
		}
		if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Fatalf("refused for another reason: %v", err)
		}
	})

	t.Run("registry/static-takeover", func(t *testing.T) {
		target := r.fleet.Workers[0]
		conflicts := r.metric("kvrouter_discovery_conflicts_total")
		forged := fleet.WorkerRecord{ID: fleet.DeriveID(target.Name), Name: target.Name, URL: "http://127.0.0.1:6666", BlockSize: blockSize,
			DPSize: 1, Instance: "forger", Events: fleet.EventSource{Kind: fleet.EventsNone}, Hash: fleet.DefaultHashContract(), RegisteredBy: "forger"}
		if err := reg.Bucket().Put(ctx, registry.RecordKey(forged.ID), forged); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = reg.Bucket().Delete(ctx, registry.RecordKey(forged.ID)) }()
		poll.UntilState(t, 10*time.Second, func() (bool, string) {
			n := r.metric("kvrouter_discovery_conflicts_total") - conflicts
			return n >= 1, fmt.Sprint(n, " conflicts")
		}, "the forged record refused as a conflict")
		if w, ok := r.svc.dir.Get(forged.ID); !ok || w.Record.URL != target.URL || w.Origin != fleet.OriginStatic {
			t.Fatalf("%s after the forged record: %+v (listed %v)", target.Name, w, ok)
		}
	})

	t.Run("registry/live-takeover", func(t *testing.T) {
		takeovers := r.metric("kvrouter_discovery_takeovers_total")
		intruder := victim
		intruder.ID, intruder.Instance, intruder.URL = fleet.DeriveID("victim"), "intruder", "http://127.0.0.1:7777"
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tk := time.NewTicker(hostileTTL / 5)
			defer tk.Stop()
			for {
				_ = reg.Bucket().Put(ctx, registry.RecordKey(intruder.ID), intruder)
				select {
				case <-stop:
					return
				case <-tk.C:
				}
			}
		})
		poll.UntilState(t, 15*time.Second, func() (bool, string) {
			if w, ok := r.svc.dir.Get(intruder.ID); ok && w.Record.URL != victimURL {
				t.Fatalf("the intruder's URL was taken: %s", w.Record.URL)
			}
			n := r.metric("kvrouter_discovery_takeovers_total") - takeovers
			return n >= 1, fmt.Sprint(n, " takeovers")
		}, "the takeover counted")
		close(stop)
		wg.Wait()
		if w, ok := r.svc.dir.Get(intruder.ID); !ok || w.Record.URL != victimURL {
			t.Fatalf("victim after the takeover: %+v (listed %v)", w, ok)
		}
	})

	t.Run("replica/forged", func(t *testing.T) {
		refused := func() float64 { return r.metric("kvrouter_replica_unannounced_refused_total") }
		start := refused()
		const forged = 50
		subject := replica.EventsSubject(r.svc.cfg.EventPlane.Namespace, r.svc.cfg.EventPlane.Component)
		for i := range forged {
			w := r.fleet.Workers[i%len(r.fleet.Workers)]
			data, err := replica.AppendEvent(nil, replica.Event{LifecycleEvent: router.LifecycleEvent{Kind: router.AddRequest, RouterID: 666,
				RequestID: fmt.Sprint("forged-", i), Worker: kvevent.WorkerRank{ID: fleet.DeriveID(w.Name)}, PrefillTokens: 4096}, Epoch: 1, Seq: uint64(i + 1)})
			if err != nil {
				t.Fatal(err)
			}
			if err := nc.Publish(subject, data); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		poll.UntilState(t, 10*time.Second, func() (bool, string) {
			n := refused() - start
			return n >= forged, fmt.Sprint(n, " refused")
		}, "the forged bookings refused")
		if ok, why := r.noBookings(); !ok {
			t.Fatal(why)
		}
	})

	// The aftermath.
	peak, base := heap.stop()
	t.Logf("heap in use: baseline %d MiB, peak during the probes %d MiB; VmRSS now %s", base>>20, peak>>20, vmRSS())
	if peak > base+heapBound {
		t.Errorf("heap in use peaked at %d MiB during the probes, %d MiB over the baseline (bound %d MiB)", peak>>20, (peak-base)>>20, heapBound>>20)
	}
	poll.UntilState(r.t, 10*time.Second, r.noBookings, "no bookings left")
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		for _, name := range []string{"kvrouter_frontend_worker_active_requests", "kvrouter_frontend_worker_active_prefill_tokens", "kvrouter_frontend_worker_active_blocks"} {
			code, sum, n := r.scrapeSum(name)
			if code != http.StatusOK || n == 0 || sum != 0 {
				return false, fmt.Sprintf("/metrics %d: %s = %v over %d samples", code, name, sum, n)
			}
		}
		return true, ""
	}, "in-flight gauges back to 0")
	if code, body := r.get("/ready"); code != http.StatusOK {
		t.Fatalf("/ready after the probes: %d %s", code, body)
	}
	for _, w := range r.fleet.Workers {
		resp, err := http.Get(w.URL + "/health")
		if err != nil {
			t.Fatalf("%s /health after the probes: %v", w.Name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s /health after the probes: %d", w.Name, resp.StatusCode)
		}
	}
	// The honest workers' index: for the honest prompts as before, and as a
	// whole what the engines hold (the disconnects' prompts included).
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		for i, p := range honest {
			if got, want := honestQuery(p), r.truth(p); !maps.Equal(got, before[i]) || !maps.Equal(got, want) {
				return false, fmt.Sprintf("honest prompt %d: router %v, before the probes %v, engines %v", i, got, before[i], want)
			}
		}
		got, want := r.routerEntries(), r.engineEntries()
		if !maps.Equal(got, want) {
			return false, fmt.Sprintf("router index %d entries, engines %d", len(got), len(want))
		}
		return true, ""
	}, "the index equals the engines' caches")
	// And the process still routes and indexes: fresh prompts through the
	// router, then found where the engines cached them.
	fresh := prompts(6, 77)
	for _, p := range fresh {
		r.complete(p, 3)
	}
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		cached := 0
		for i, p := range fresh {
			got, want := honestQuery(p), r.truth(p)
			if !maps.Equal(got, want) {
				return false, fmt.Sprintf("fresh prompt %d: router %v, engines %v", i, got, want)
			}
			for _, n := range want {
				cached += n
			}
		}
		return cached > 0, "no engine caches a fresh prompt"
	}, "fresh prompts indexed where the engines hold them")
	if ws := r.workers(); len(ws) != len(r.fleet.Workers)+1 {
		t.Fatalf("workers after the probes: %v", keys(ws))
	}
}

// heapSampler records the peak of MemStats.HeapInuse.
type heapSampler struct {
	base, peak atomic.Uint64
	done       chan struct{}
	once       sync.Once
	wg         sync.WaitGroup
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{done: make(chan struct{})}
	runtime.GC()
	h.base.Store(heapInuse())
	h.wg.Go(func() {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			if v := heapInuse(); v > h.peak.Load() {
				h.peak.Store(v)
			}
			select {
			case <-h.done:
				return
			case <-tk.C:
			}
		}
	})
	return h
}

// stop ends sampling and returns the peak and the baseline.
func (h *heapSampler) stop() (peak, base uint64) {
	h.once.Do(func() { close(h.done); h.wg.Wait() })
	return h.peak.Load(), h.base.Load()
}

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// vmRSS returns the process's resident set size from /proc ("?" where
// there is none).
func vmRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// entryKey is one exact index entry.
type entryKey struct {
	worker           kvevent.WorkerID
	rank             kvevent.DPRank
	tier             kvevent.Tier
	engine, localKey uint64
}

func entriesOf(evs []kvevent.Event, into map[entryKey]int) {
	for _, ev := range evs {
		for _, b := range ev.Blocks {
			into[entryKey{ev.Worker.ID, ev.Worker.Rank, ev.Tier, b.EngineHash, b.LocalHash}]++
		}
	}
}

// routerEntries is the router's exact index, as a multiset.
func (r *rig) routerEntries() map[entryKey]int {
	r.t.Helper()
	if err := r.svc.Index().Flush(); err != nil {
		r.t.Fatal(err)
	}
	out := map[entryKey]int{}
	entriesOf(r.svc.Index().Dump(), out)
	return out
}

// engineEntries is what the fleet's engines hold, as a multiset.
func (r *rig) engineEntries() map[entryKey]int {
	out := map[entryKey]int{}
	for _, w := range r.fleet.Workers {
		_, evs := w.Worker.LocalIndex(0).Dump()
		for i := range evs {
			evs[i].Worker = kvevent.WorkerRank{ID: fleet.DeriveID(w.Name)}
		}
		entriesOf(evs, out)
	}
	return out
}

// scrapeSum GETs /metrics and sums every sample of name (any labels); n
// counts the samples.
func (r *rig) scrapeSum(name string) (code int, sum float64, n int) {
	r.t.Helper()
	code, body := r.get("/metrics")
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || (f[0] != name && !strings.HasPrefix(f[0], name+"{")) {
			continue
		}
		if x, err := strconv.ParseFloat(f[1], 64); err == nil {
			sum += x
			n++
		}
	}
	return code, sum, n
}

// do sends req on a fresh connection and returns the status (0 on a
// transport error, reported).
func do(t *testing.T, req *http.Request) int {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", req.Method, req.URL.Path, err)
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func postRaw(t *testing.T, url, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return do(t, req)
}

// dialN opens n connections to addr and sends prefix on each; they are
// closed at the end of the test.
func dialN(t *testing.T, addr string, n int, prefix string) []net.Conn {
	t.Helper()
	out := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, prefix); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func jsonInts(p []uint32) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, v := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(v), 10))
	}
	b.WriteByte(']')
	return b.String()
}

// exchange sends head and body on a fresh connection (the body from
// another goroutine: the router may answer and close before taking it all)
// and returns the response's status, 0 when there is none.
func exchange(t *testing.T, addr, head, body string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() { _, _ = io.WriteString(c, head+body) }()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Errorf("no response: %v", err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// promptTokens posts body and returns the usage's prompt tokens (-1 on a
// non-200 answer, reported).
func promptTokens(t *testing.T, url, body string) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("%q: %d %s", body, resp.StatusCode, b)
		return -1
	}
	var v struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%q: answer %q: %v", body, b, err)
	}
	return v.Usage.PromptTokens
}
