package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/prometheus/client_golang/prometheus"
)

// stubWorker answers every completion at once with a fixed 8-event SSE
// stream (or a JSON body), so that the benchmark measures the front door,
// not an engine.
func stubWorker() http.Handler {
	var sse bytes.Buffer
	for i := range 8 {
		fmt.Fprintf(&sse, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" t%d\",\"finish_reason\":null}]}\n\n", i)
	}
	sse.WriteString("data: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":8192,\"completion_tokens\":8,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n")
	sse.WriteString("data: [DONE]\n\n")
	stream := sse.Bytes()
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(200)
		_, _ = rw.Write(stream)
	})
}

// benchPrompts returns n prompts of about tokens tokens each, drawn from
// a word list in random order (so they share no long prefix).
func benchPrompts(tb testing.TB, n, tokens int) []string {
	tok := testTokenizer(tb)
	vocab := strings.Fields("the router sends each request to the worker where serving it costs least knowing which prompt prefixes each worker holds in its cache and how loaded it is engines publish events blocks stored removed cleared index tree overlap tier device host disk cost credit temperature scheduler sequence hash token prefill decode latency throughput")
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for b.Len() < tokens*5 {
			b.WriteString(vocab[rng.IntN(len(vocab))])
			b.WriteByte(' ')
		}
		s := b.String()
		ids := tok.Encode(s, true)
		for len(ids) > tokens {
			s = s[:len(s)*tokens/len(ids)]
			ids = tok.Encode(s, true)
		}
		out[i] = s
	}
	return out
}

// BenchmarkFrontDoor measures the latency a request sees through the front
// door versus straight to the worker (loopback HTTP both ways), with 8k
// token prompts streamed back as SSE. The added latency is the difference
// of the p50s (and p99s) reported.
func BenchmarkFrontDoor(b *testing.B) {
	stub := httptest.NewServer(stubWorker())
	defer stub.Close()
	rc := router.DefaultConfig()
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	r, err := router.New(rc, router.NewSerial(x), time.Now, nil)
	if err != nil {
		b.Fatal(err)
	}
	dir := &testDir{}
	for i := range 8 {
		id := kvevent.WorkerID(i + 1)
		if err := r.AddWorker(router.WorkerInfo{ID: id, BlockSize: 16, Mode: router.Approximate}); err != nil {
			b.Fatal(err)
		}
		dir.set(WorkerEntry{ID: id, Name: fmt.Sprint("w", i+1), URL: stub.URL, Status: fleet.Status{State: fleet.StateApprox}})
	}
	f, err := New(DefaultConfig(), Deps{Router: r, Directory: dir, Tokenizer: testTokenizer(b), ChatTemplate: testTemplate(b),
		Index: router.NewSerial(x), Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	front := httptest.NewServer(f.Handler())
	defer front.Close()
	defer f.CloseIdleConnections()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()

	prompts := benchPrompts(b, 64, 8192)
	tok := testTokenizer(b)
	chat := make([][]byte, len(prompts))
	text := make([][]byte, len(prompts))
	ids := make([][]byte, len(prompts))
	for i, p := range prompts {
		text[i], _ = json.Marshal(map[string]any{"model": testModel, "prompt": p, "max_tokens": 8, "stream": true})
		ids[i], _ = json.Marshal(map[string]any{"model": testModel, "prompt": tok.Encode(p, true), "max_tokens": 8, "stream": true})
		chat[i], _ = json.Marshal(map[string]any{"model": testModel, "max_tokens": 8, "stream": true,
			"messages": []map[string]string{{"role": "system", "content": "You are terse."}, {"role": "user", "content": p}}})
	}
	uniqueText := false
	scratch := make([]byte, 0, 64<<10)
	run := func(b *testing.B, url string, bodies [][]byte, path ...string) {
		endpoint := "/v1/completions"
		if len(path) > 0 {
			endpoint = path[0]
		}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		cpu0 := processCPU()
		for i := range b.N {
			body := bodies[i%len(bodies)]
			if uniqueText {
				body = uniquePrompt(scratch[:0], body, i)
			}
			start := time.Now()
			resp, err := client.Post(url+endpoint, "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || n == 0 {
				b.Fatalf("status %d", resp.StatusCode)
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		// Process CPU (client + front door + stub worker) per request:
		// the front door's own cost is the difference from "direct",
		// whatever share of a core the machine's load leaves us.
		b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	// paced sends b.N requests open-loop at 500 requests/s.
	paced := func(b *testing.B, url string, bodies [][]byte) {
		lat := make([]time.Duration, b.N)
		var wg sync.WaitGroup
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		b.ResetTimer()
		for i := range b.N {
			<-tick.C
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				resp, err := client.Post(url+"/v1/completions", "application/json", bytes.NewReader(bodies[i%len(bodies)]))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat[i] = time.Since(start)
			}()
		}
		wg.Wait()
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	b.Run("direct", func(b *testing.B) { run(b, stub.URL, text) })
	b.Run("front-text", func(b *testing.B) { run(b, front.URL, text) })
	// Every prompt new (its first 8 bytes a request number): the
	// tokenizer's segment cache never hits, only its word cache.
	b.Run("front-text-uncached", func(b *testing.B) {
		uniqueText = true
		defer func() { uniqueText = false }()
		run(b, front.URL, text)
	})
	b.Run("front-token-ids", func(b *testing.B) { run(b, front.URL, ids) })
	b.Run("direct-chat", func(b *testing.B) { run(b, stub.URL, chat, "/v1/chat/completions") })
	b.Run("front-chat", func(b *testing.B) { run(b, front.URL, chat, "/v1/chat/completions") })
	b.Run("500rps-direct", func(b *testing.B) { paced(b, stub.URL, text) })
	b.Run("500rps-front-text", func(b *testing.B) { paced(b, front.URL, text) })
	b.Run("500rps-front-token-ids", func(b *testing.B) { paced(b, front.URL, ids) })
}

// uniquePrompt copies a completion body into dst with the prompt's first 8
// bytes replaced by the digits of n, so that no two requests share a prompt.
func uniquePrompt(dst, body []byte, n int) []byte {
	dst = append(dst, body...)
	const key = `"prompt":"`
	if i := bytes.Index(dst, []byte(key)); i >= 0 && i+len(key)+8 <= len(dst) {
		copy(dst[i+len(key):], fmt.Sprintf("%08d", n%100000000))
	}
	return dst
}

// BenchmarkParse8kIDs measures reading an 8k-token-id completion body:
// the syntax check of the whole body plus the id decoding.
func BenchmarkParse8kIDs(b *testing.B) {
	ids := make([]uint32, 8192)
	for i := range ids {
		ids[i] = uint32(i * 7919 % 151000)
	}
	body, _ := json.Marshal(map[string]any{"model": testModel, "prompt": ids, "max_tokens": 8, "stream": true})
	p := promptParser{model: testModel, maxTokens: 1 << 20}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		f, err := parseFields(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.idsPrompt(f.promptIDs); err != nil {
			b.Fatal(err)
		}
	}
}
