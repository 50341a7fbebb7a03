package vllm

import (
	"encoding/hex"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzDecode feeds arbitrary payloads to the decoder: it must never panic,
// every dropped event must carry a reason, and whatever parses must survive
// a re-encode (map form keeps every field) unchanged.
func FuzzDecode(f *testing.F) {
	for _, s := range loadSamples(f) {
		p, _ := hex.DecodeString(s.PayloadHex)
		f.Add(p)
	}
	f.Add([]byte{0x92, 0x00, 0x91, 0x91, 0xa1, 'x'})
	f.Fuzz(func(t *testing.T, payload []byte) {
		cfg := DefaultConfig()
		cfg.Limits.MaxBlocks, cfg.Limits.MaxTokens = 1024, 1<<14
		d, err := NewDecoder(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ParseBatch(payload, cfg.Limits)
		if err != nil {
			return
		}
		res := d.Convert(b)
		for _, r := range res.Refused {
			if r.Reason == 0 || r.Reason.String() == "" {
				t.Fatalf("refusal without reason: %+v", r)
			}
		}
		for _, ev := range b.Events {
			switch ev.(type) {
			case UnknownEvent, MalformedEvent:
				return
			}
		}
		again, err := Encode(b, Format{Encoding: EncodingMap})
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		b2, err := ParseBatch(again, cfg.Limits)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if diff := cmp.Diff(b, b2, cmpopts.EquateEmpty(), cmpopts.EquateNaNs()); diff != "" {
			t.Fatalf("re-encode changed the batch (-first +second)\n%s", diff)
		}
	})
}
