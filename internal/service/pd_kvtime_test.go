package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestPDPrefillHopTeaches: a vLLM prefill hop's answer is its time to
// first token, so the prefill worker's time model takes a prefill sample
// from it; the decode worker's model takes none (its first token waited
// for the transfer), only its inter-token time.
func TestPDPrefillHopTeaches(t *testing.T) {
	r := pdRig(t, "vllm", nil)
	resp, body := r.post("/v1/completions", pdBody("Teach the prefill model over two hops", 5, true))
	p, d := pdAnswer(t, resp, body, 5, true)
	ids := map[string]uint64{}
	for _, w := range r.svc.Workers() {
		ids[w.Name] = uint64(w.ID)
	}
	samples := func() map[uint64][2]uint64 {
		out := map[uint64][2]uint64{}
		for _, m := range r.svc.Router().TimeModels() {
			out[uint64(m.Worker.ID)] = [2]uint64{m.PrefillSamples, m.DecodeSamples}
		}
		return out
	}
	// The decode side's sample lands when its stream ends (maybe just
	// after the client read it).
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		s := samples()[ids[d]]
		return s[1] == 1, fmt.Sprintf("decode worker %s: %v samples", d, s)
	}, "the decode worker's inter-token sample")
	got := samples()
	if s := got[ids[p]]; s[0] != 1 {
		t.Errorf("prefill worker %s: %d prefill samples, want 1 (the hop's answer)", p, s[0])
	}
	if s := got[ids[d]]; s[0] != 0 {
		t.Errorf("decode worker %s: %d prefill samples, want 0 (its first token waited for the transfer)", d, s[0])
	}
}
