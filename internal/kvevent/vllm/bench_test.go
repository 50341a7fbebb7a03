package vllm

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// benchBatch is a typical scheduler step of a busy engine: 8 stores of 4
// 16-token blocks each (a 64-token prefill chunk per request) and 4
// single-block evictions.
func benchBatch() (RawBatch, int, int) {
	b := RawBatch{TS: 1.7e9, DPRank: Int(0)}
	h := uint64(1 << 63)
	blocks := 0
	for r := range 8 {
		s := BlockStored{ParentBlockHash: UintHash(h), BlockSize: 16, Medium: Str("GPU"),
			ExtraKeys: make([]ExtraKey, 4), GroupIdx: Int(0), KVCacheSpecKind: Str("full_attention")}
		for i := range 4 {
			h++
			s.BlockHashes = append(s.BlockHashes, UintHash(h*0x9e3779b97f4a7c15))
			for j := range 16 {
				s.TokenIDs = append(s.TokenIDs, uint32(1000*r+16*i+j))
			}
		}
		b.Events = append(b.Events, s)
		blocks += 4
	}
	for i := range 4 {
		b.Events = append(b.Events, BlockRemoved{BlockHashes: []Hash{UintHash(uint64(i) * 77)}, Medium: Str("GPU"), GroupIdx: Int(0)})
		blocks++
	}
	return b, len(b.Events), blocks
}

// BenchmarkDecode measures parse + validate + local hashing of one batch.
func BenchmarkDecode(b *testing.B) {
	for _, f := range []Format{{Encoding: EncodingMap}, {Encoding: EncodingArray}} {
		b.Run(f.Encoding.String(), func(b *testing.B) {
			raw, events, blocks := benchBatch()
			payload, err := Encode(raw, f)
			if err != nil {
				b.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.Worker = kvevent.WorkerRank{ID: 1}
			d, _ := NewDecoder(cfg)
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				res, err := d.Decode(payload)
				if err != nil || len(res.Events) != events {
					b.Fatal(err, len(res.Refused))
				}
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(events*b.N)/sec, "events/s")
			b.ReportMetric(float64(blocks*b.N)/sec, "blocks/s")
		})
	}
}

// BenchmarkEncode measures the publisher side (what the mock engine pays).
func BenchmarkEncode(b *testing.B) {
	raw, events, _ := benchBatch()
	e := NewEncoder(Format{Encoding: EncodingMap})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Encode(raw); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(events*b.N)/b.Elapsed().Seconds(), "events/s")
}
