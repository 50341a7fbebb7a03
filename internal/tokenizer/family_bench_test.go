package tokenizer

import "testing"

// BenchmarkFamilyEncode measures each family's tokenizer on the bench texts
// (docs, cjk, corpus as in BenchmarkEncode), warm (default word cache,
// warmed by one encode; segment cache off) and cold (no caches).
func BenchmarkFamilyEncode(b *testing.B) {
	texts := benchTexts(b)
	for _, fam := range families {
		for _, mode := range []string{"warm", "cold"} {
			cfg := Config{}
			if mode == "warm" {
				cfg.CacheWords = DefaultConfig().CacheWords
			}
			tok, err := LoadJSONConfig(familyJSON(b, fam), cfg)
			if err != nil {
				b.Fatal(err)
			}
			for _, name := range []string{"docs", "cjk", "corpus"} {
				text := texts[name]
				b.Run(fam+"/"+mode+"/"+name, func(b *testing.B) {
					if mode == "warm" {
						tok.Encode(text, false)
					}
					b.SetBytes(int64(len(text)))
					defer reportCPU(b, len(text))()
					for b.Loop() {
						tok.Encode(text, false)
					}
				})
			}
		}
	}
}

// BenchmarkFamilyLoad measures building each family's tokenizer from its
// tokenizer.json already in memory.
func BenchmarkFamilyLoad(b *testing.B) {
	for _, fam := range families {
		raw := familyJSON(b, fam)
		b.Run(fam, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			cpu0 := cpuTime()
			n := 0
			for b.Loop() {
				if _, err := LoadJSON(raw); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(n), "cpu-ms/op")
		})
	}
}
