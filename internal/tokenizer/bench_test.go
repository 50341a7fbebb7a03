package tokenizer

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	qwen3files "github.com/kvrouter/kvrouter/internal/modelfiles/qwen3"
)

// benchTexts are the inputs of the encoding benchmarks: "corpus" is every
// golden string joined (including the deliberately pathological ones: 1000
// repeated letters, 500 spaces…); "docs" is only the long documents (Go
// source, Markdown, a multilingual chat transcript), the closest to real
// prompts; "cjk" is Chinese and Japanese prose, which has no spaces and so
// makes long words.
func benchTexts(b testing.TB) map[string]string {
	var corpus, docs, cjk strings.Builder
	for _, g := range readGoldens(b) {
		corpus.WriteString(g.Text)
		corpus.WriteByte('\n')
		if len(g.Text) > 2000 && strings.Count(g.Text, g.Text[:20]) == 1 {
			docs.WriteString(g.Text)
		}
	}
	for cjk.Len() < 20000 {
		cjk.WriteString("路由器根据缓存命中选择工作节点，以减少预填充的时间。今天天气很好，我们去公园散步吧。")
		cjk.WriteString("キャッシュがヒットすると速い。日本語のテキストです。\n")
	}
	return map[string]string{"corpus": corpus.String(), "docs": docs.String(), "cjk": cjk.String()}
}

// loadBench loads Qwen3 with cfg.
func loadBench(b *testing.B, cfg Config) *Tokenizer {
	raw, err := qwen3files.TokenizerJSON()
	if err != nil {
		b.Fatal(err)
	}
	tok, err := LoadJSONConfig(raw, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return tok
}

// BenchmarkEncode measures single-core throughput with a warm word cache
// and the segment cache off (it would turn the repeated input into lookups).
func BenchmarkEncode(b *testing.B) {
	tok := loadBench(b, Config{CacheWords: DefaultConfig().CacheWords})
	for _, name := range []string{"corpus", "docs", "cjk"} {
		text := benchTexts(b)[name]
		b.Run(name, func(b *testing.B) {
			tok.Encode(text, false)
			b.SetBytes(int64(len(text)))
			defer reportCPU(b, len(text))()
			for b.Loop() {
				tok.Encode(text, false)
			}
		})
	}
}

// BenchmarkEncodeNoCache measures throughput with the word cache disabled
// (every word goes through BPE merging).
func BenchmarkEncodeNoCache(b *testing.B) {
	tok := loadBench(b, Config{})
	for _, name := range []string{"corpus", "docs", "cjk"} {
		text := benchTexts(b)[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			defer reportCPU(b, len(text))()
			for b.Loop() {
				tok.Encode(text, false)
			}
		})
	}
}

// BenchmarkEncodeParallel measures throughput with all cores encoding the
// corpus through one shared tokenizer.
func BenchmarkEncodeParallel(b *testing.B) {
	tok := loadBench(b, Config{CacheWords: DefaultConfig().CacheWords})
	text := benchTexts(b)["corpus"]
	tok.Encode(text, false)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tok.Encode(text, false)
		}
	})
}

// conversation renders a chat of turns messages in the Qwen3 format, each
// message about 1 KB of mixed prose.
func conversation(turns int) []string {
	paras := []string{
		"Routing requests by KV-cache overlap saves prefill time on every worker. ",
		"路由器根据缓存命中选择工作节点，以减少预填充的时间。",
		"func route(req Request) (Worker, error) { return pick(req.Tokens), nil }\n",
		"Les caches KV évitent de recalculer le préfixe commun. ",
	}
	var prompts []string
	var sb strings.Builder
	sb.WriteString("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
	for i := 0; i < turns; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		sb.WriteString("<|im_start|>" + role + "\n")
		for sb.Len() < (i+1)*1100 {
			sb.WriteString(paras[(i+sb.Len())%len(paras)])
		}
		sb.WriteString(strconv.Itoa(i) + "<|im_end|>\n")
		if role == "user" {
			prompts = append(prompts, sb.String()+"<|im_start|>assistant\n")
		}
	}
	return prompts
}

// BenchmarkEncodeConversation encodes the prompts of a 40-turn conversation
// in order (each re-sends the whole history), as a router sees them, with
// and without the segment cache. Throughput counts all prompt bytes.
func BenchmarkEncodeConversation(b *testing.B) {
	prompts := conversation(40)
	total := 0
	for _, p := range prompts {
		total += len(p)
	}
	for _, bc := range []struct {
		name string
		cfg  Config
	}{{"segment-cache", DefaultConfig()}, {"word-cache-only", Config{CacheWords: DefaultConfig().CacheWords}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(total))
			for b.Loop() {
				b.StopTimer()
				tok := loadBench(b, bc.cfg) // cold caches each round
				b.StartTimer()
				for _, p := range prompts {
					tok.Encode(p, false)
				}
			}
		})
	}
}

// BenchmarkDecode measures decoding the ids of the mixed text.
func BenchmarkDecode(b *testing.B) {
	tok := qwen3(b)
	text := benchTexts(b)["corpus"]
	ids := tok.Encode(text, false)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		tok.Decode(ids)
	}
}

// BenchmarkLoad measures building the Qwen3 tokenizer from the 11 MB
// tokenizer.json already in memory (what kvrouter up pays at start, plus
// about 40 ms to gunzip the embedded copy, measured separately).
func BenchmarkLoad(b *testing.B) {
	raw, err := qwen3files.TokenizerJSON()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	cpu0 := cpuTime()
	n := 0
	for b.Loop() {
		if _, err := LoadJSON(raw); err != nil {
			b.Fatal(err)
		}
		n++
	}
	// CPU time is steadier than wall time on a shared machine.
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(n), "cpu-ms/op")
}

// reportCPU, deferred as defer reportCPU(b, n)(), reports throughput per
// CPU-second ("cpu-MB/s"): on a shared machine the wall-clock MB/s of
// SetBytes drops with the load of other processes, CPU time much less so.
func reportCPU(b *testing.B, bytesPerOp int) func() {
	start := cpuTime()
	return func() {
		if d := cpuTime() - start; d > 0 && b.N > 0 {
			b.ReportMetric(float64(bytesPerOp)*float64(b.N)/d.Seconds()/1e6, "cpu-MB/s")
		}
	}
}

// cpuTime returns the process's user plus system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGunzipEmbedded measures decompressing the embedded tokenizer.json.
func BenchmarkGunzipEmbedded(b *testing.B) {
	for b.Loop() {
		if _, err := qwen3files.TokenizerJSON(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeOverLimit measures refusing a 30 MiB prompt at the router's
// default limit of 131,072 tokens (the byte bound alone, 30 MiB / 256-byte
// longest token = 122,880, cannot refuse it): one word of random letters
// (judged by its least token count, no merging) and prose (stopped at the
// first token past the limit).
func BenchmarkEncodeOverLimit(b *testing.B) {
	tok := loadBench(b, DefaultConfig())
	const size = 30 << 20
	var word strings.Builder
	x := uint32(1)
	for word.Len() < size {
		x = x*1664525 + 1013904223
		word.WriteByte(byte('a' + x>>24%26))
	}
	texts := map[string]string{"one-word": word.String(),
		"prose": strings.Repeat("The router hashes blocks of token ids to find cached prefixes. ", size/64)}
	for _, name := range []string{"one-word", "prose"} {
		text := texts[name]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, ok := tok.EncodeLimit(text, false, 131072); ok {
					b.Fatal("accepted")
				}
			}
		})
	}
}
