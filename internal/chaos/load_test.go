package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// window is a time interval during which a fault may legitimately make a
// client wait until its own deadline (a stalled worker).
type window struct{ from, to time.Time }

// windows records the stall intervals.
type windows struct {
	mu   sync.Mutex
	list []window
	open map[int]time.Time
}

func (ws *windows) begin(k int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.open == nil {
		ws.open = map[int]time.Time{}
	}
	ws.open[k] = time.Now()
}

func (ws *windows) end(k int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if from, ok := ws.open[k]; ok {
		ws.list = append(ws.list, window{from, time.Now()})
		delete(ws.open, k)
	}
}

// overlaps reports whether [from, to] meets a stall.
func (ws *windows) overlaps(from, to time.Time) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.open) > 0 {
		return true
	}
	for _, w := range ws.list {
		if !w.to.Before(from) && !w.from.After(to) {
			return true
		}
	}
	return false
}

// outcome is how one request ended, from the client's side.
type outcome string

const (
	outOK        outcome = "ok"
	outHTTP      outcome = "error status"
	outBroken    outcome = "stream ended without [DONE]"
	outTransport outcome = "transport error"
	outTimeout   outcome = "client deadline (stalled worker)"
	outStarting  outcome = "client deadline (router not serving yet: never accepted)"
	outVanished  outcome = "client deadline outside any stall (request vanished)"
)

// load is a set of streaming clients spread over the routers. Every
// request's outcome is counted client-side.
type load struct {
	c       *cluster
	prompts [][]uint32
	timeout time.Duration
	stalls  *windows
	client  *http.Client

	sent atomic.Int64
	mu   sync.Mutex
	outs map[outcome]int
	errs []string

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func newLoad(c *cluster, seed uint64, timeout time.Duration, stalls *windows) *load {
	return &load{c: c, prompts: prompts(48, seed), timeout: timeout, stalls: stalls, outs: map[outcome]int{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

// run starts n clients; each sends requests back to back until halt.
func (l *load) run(n int, seed uint64) {
	l.stop = make(chan struct{})
	for i := range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				r := l.c.routers[rng.IntN(len(l.c.routers))]
				start := time.Now()
				o, detail := l.do(r.url(), l.prompts[rng.IntN(len(l.prompts))], 1+rng.IntN(12))
				if o == outVanished && r.starting.overlaps(start, time.Now()) {
					// The router's listener was open (TCP handshake done by
					// the kernel) but it was not serving yet: the request
					// was never accepted by kvrouter.
					o = outStarting
				}
				l.record(o, detail)
				if o != outOK { // a client backs off after an error
					select {
					case <-l.stop:
					case <-time.After(time.Duration(10+rng.IntN(40)) * time.Millisecond):
					}
				}
			}
		}()
	}
}

// halt stops the clients and waits until each one's last request ended
// (bounded by the client deadline: nothing can hang here).
// halt stops the clients and waits for them; halting twice is fine.
func (l *load) halt() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
	l.client.CloseIdleConnections()
}

func (l *load) record(o outcome, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outs[o]++
	// The first few of each kind, so that a rare kind is not hidden
	// behind twenty of a common one.
	if o != outOK && l.outs[o] <= 4 && len(l.errs) < 40 {
		l.errs = append(l.errs, string(o)+": "+detail)
	}
}

func (l *load) counts() (map[outcome]int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[outcome]int, len(l.outs))
	for k, v := range l.outs {
		out[k] = v
	}
	return out, append([]string(nil), l.errs...)
}

// do sends one streaming completion and classifies how it ended.
func (l *load) do(base string, prompt []uint32, maxTokens int) (outcome, string) {
	l.sent.Add(1)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	body := fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":%d,"stream":true}`, modelName, jsonInts(prompt), maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return outTransport, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		return l.deadline(ctx, start, outTransport, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		// Counted per status, the body kept as the detail.
		return outcome(fmt.Sprintf("%s %d", outHTTP, resp.StatusCode)), string(b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			return outOK, ""
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"error"`) {
			return outBroken, line
		}
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return l.deadline(ctx, start, outBroken, err)
}

// deadline tells a client deadline (allowed only while a worker stalls)
// from other errors.
func (l *load) deadline(ctx context.Context, start time.Time, other outcome, err error) (outcome, string) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		if l.stalls.overlaps(start, time.Now()) {
			return outTimeout, err.Error()
		}
		return outVanished, fmt.Sprintf("%v after %v", err, time.Since(start).Round(time.Millisecond))
	}
	return other, err.Error()
}

// prompts builds n token-id prompts over a few shared prefixes, so workers
// hold different, overlapping prefixes and the routers have cache to find.
func prompts(n int, seed uint64) [][]uint32 {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b9))
	tok := func() uint32 { return 1000 + uint32(rng.IntN(100000)) }
	var prefixes [][]uint32
	for range 6 {
		p := make([]uint32, 4*blockSize+3)
		for i := range p {
			p[i] = tok()
		}
		prefixes = append(prefixes, p)
	}
	out := make([][]uint32, n)
	for i := range out {
		p := append([]uint32(nil), prefixes[i%len(prefixes)]...)
		for range blockSize + rng.IntN(4*blockSize) {
			p = append(p, tok())
		}
		out[i] = p
	}
	return out
}
