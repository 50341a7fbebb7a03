package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/timemodel"
)

// PolicyKVTime names the policy that routes by predicted seconds.
const PolicyKVTime = "kv-time"

// Models gives the kv-time policy each worker rank's time model; nil
// means none is known yet (the prior is used).
type Models interface {
	// Model returns w's model or nil.
	Model(w kvevent.WorkerRank) *timemodel.Model
}

// Preparer is a Policy that needs the request and the full candidate
// facts: Select calls Prepare on the rows (aligned with cands, eligible
// ones marked) before Choose.
type Preparer interface {
	Policy
	// Prepare fills in the eligible rows' policy columns.
	Prepare(req *Request, cands []Candidate, rows []Explanation)
}

var _ Preparer = (*KVTime)(nil)

// Prediction is the kv-time policy's estimate for one candidate, in
// seconds.
type Prediction struct {
	// Queue is the extra time to first token from the prefill already
	// booked on the worker rank, ahead of this request.
	Queue float64
	// Prefill is the time to prefill this request's uncached tokens there.
	Prefill float64
	// Load is the time to bring its host- and disk-tier blocks back.
	Load float64
	// Transfer, on a decode hop, is the time to receive the prompt's
	// blocks the worker rank does not hold on device from the prefill
	// worker (KVTimeConfig.TransferBandwidth); 0 on other hops.
	Transfer float64
	// KVWait is the time until the worker rank's running requests free
	// the KV blocks this one needs beyond its capacity (0 when it fits).
	KVWait float64
	// KVPressure is the congestion price of the KV blocks this request
	// adds there (not part of TTFT): see KVTime.kvPressure.
	KVPressure float64
	// TTFT is Queue + Transfer + Prefill + Load + KVWait, the predicted
	// time to first token.
	TTFT float64
	// Decode is the decode term: the weighted delay its prefill adds to
	// the worker rank's running decodes and to their mean inter-token
	// times (see KVTime.decodeTerm).
	Decode float64
	// Later is the delay its prefill adds to the first tokens of the
	// requests that will reach the worker rank after it (not part of its
	// TTFT): see later.
	Later float64
	// Recompute is the price of recomputing prompt tokens another
	// eligible worker rank holds cached for no other running request:
	// KVTimeConfig.RecomputeWeight × the prefill seconds they add here
	// (0 on the rank holding the most, and on a decode hop).
	Recompute float64
	// Total is TTFT + KVPressure + Decode + Later + Recompute, what the
	// policy minimises; on a prefill hop TTFT + Later + Recompute (see
	// KVTime.Prepare).
	Total float64
	// Error is the model's typical relative error of a TTFT there.
	Error float64
	// InFlight is the prompt tokens the prediction counts as computed by
	// a request already prefilling them on the worker rank, which this
	// one would wait for instead of computing (see
	// KVTime.creditInFlight); 0 when none is credited.
	InFlight int
}

// KVTimeConfig holds the kv-time policy's settings.
type KVTimeConfig struct {
	// Tolerance floors the relative near-tie band: every row whose Total
	// is within the band of the lowest Total (plus 1 ms) ties, and the tie
	// goes to the longest cached prefix. The band is the larger of
	// Tolerance and the typical relative error of the fastest row's model
	// (a difference the model cannot resolve is no reason to move a
	// prefix). Default 0.05.
	Tolerance float64
	// DecodeWeight weighs the decode term: seconds of TTFT traded for one
	// second of delay added to one running decode. Default 0.1.
	DecodeWeight float64
	// RecomputeWeight prices a cache miss the fleet could have avoided:
	// seconds of TTFT traded for one second of prefill spent recomputing
	// prompt tokens another eligible worker rank holds cached and its
	// running requests do not share (on top of that prefill's own place
	// in this request's TTFT; see recomputeRef). A move off a cached
	// prefix must save the request (1 + RecomputeWeight) × the
	// recompute. Default 8 (docs/design.md, "The kv-time policy", says
	// why; docs/benchmarks.md measures 0 to 16).
	RecomputeWeight float64
	// ITLWeight weighs the inter-token term: seconds of TTFT traded for
	// one second added to the mean inter-token time of one running
	// request. This request's prefill stalls every running decode for
	// the same time, and a stall of s seconds raises the mean
	// inter-token time of a request answering n tokens by s/(n − 1), so
	// the short answers running there carry most of it
	// (Candidate.ITLExposure). Default 1: others' seconds against this
	// request's, as the later term counts them (docs/design.md, "The
	// kv-time policy"; docs/benchmarks.md measures 0.5 to 3).
	ITLWeight float64
	// KVBytesPerToken is one token's KV size, for tier transfer times.
	// Default timemodel.DefaultKVBytesPerToken.
	KVBytesPerToken int
	// HostBandwidth is the host-to-device bandwidth in bytes per second.
	// Default timemodel.DefaultTransferBandwidth.
	HostBandwidth float64
	// DiskBandwidth is the disk- or external-tier bandwidth in bytes per
	// second. Default timemodel.DefaultTransferBandwidth (the mocker's
	// only transfer figure).
	DiskBandwidth float64
	// TransferBandwidth is the prefill-to-decode KV transfer bandwidth in
	// bytes per second, for a decode hop's Transfer (the mocker's
	// --kv-transfer-bandwidth). Default timemodel.DefaultTransferBandwidth.
	TransferBandwidth float64
	// KVHeadroom is the fraction of a worker's KV blocks its engine keeps
	// free when admitting (vLLM's watermark). Default 0.01.
	KVHeadroom float64
}

// DefaultKVTimeConfig returns the defaults documented on KVTimeConfig.
func DefaultKVTimeConfig() KVTimeConfig {
	return KVTimeConfig{Tolerance: 0.05, DecodeWeight: 0.1, RecomputeWeight: 8, ITLWeight: 1, KVBytesPerToken: timemodel.DefaultKVBytesPerToken,
		HostBandwidth: timemodel.DefaultTransferBandwidth, DiskBandwidth: timemodel.DefaultTransferBandwidth,
		TransferBandwidth: timemodel.DefaultTransferBandwidth, KVHeadroom: 0.01}
}

// Validate reports the first invalid field.
func (c KVTimeConfig) Validate() error {
	switch {
	case !validKnob(c.Tolerance) || !validKnob(c.DecodeWeight) || !validKnob(c.RecomputeWeight) || !validKnob(c.ITLWeight):
		return fmt.Errorf("%w: kv-time tolerance %v, decode weight %v, recompute weight %v and inter-token weight %v must be finite and >= 0",
			ErrConfig, c.Tolerance, c.DecodeWeight, c.RecomputeWeight, c.ITLWeight)
	case c.KVBytesPerToken < 0 || !validKnob(c.HostBandwidth) || !validKnob(c.DiskBandwidth) || !validKnob(c.TransferBandwidth) || !(c.KVHeadroom >= 0 && c.KVHeadroom < 1):
		return fmt.Errorf("%w: kv-time transfer settings must be >= 0", ErrConfig)
	}
	return nil
}

// KVTime predicts each eligible candidate's time to first token from its
// time model (see package timemodel) and picks the lowest Total, near-ties
// going to the longest cached prefix. It ignores the temperature. It is
// not safe for concurrent use (nor is the Scheduler).
type KVTime struct {
	cfg    KVTimeConfig
	models Models
	prior  *timemodel.Model
}

// NewKVTime returns the policy over models (nil: every worker at the
// prior).
func NewKVTime(cfg KVTimeConfig, models Models) (*KVTime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &KVTime{cfg: cfg, models: models, prior: timemodel.New(timemodel.DefaultConfig())}, nil
}

// Name returns "kv-time".
func (*KVTime) Name() string { return PolicyKVTime }

// Config returns the policy's settings.
func (p *KVTime) Config() KVTimeConfig { return p.cfg }

// Prepare implements Preparer: it fills Prediction on every eligible row.
func (p *KVTime) Prepare(req *Request, cands []Candidate, rows []Explanation) {
	bs := max(req.BlockSize, 1)
	isl := max(req.InputTokens, 0)
	ref := p.recomputeRef(cands, rows, isl, bs)
	for i := range rows {
		row := &rows[i]
		if row.Excluded != Eligible || i >= len(cands) {
			continue
		}
		c := &cands[i]
		m := p.prior
		if p.models != nil {
			if wm := p.models.Model(c.Worker); wm != nil {
				m = wm
				if !req.Now.IsZero() {
					m.Relax(req.Now)
				}
			}
		}
		if req.Hop == HopDecode {
			row.Prediction = p.predictDecodeHop(m, c, isl, bs, req.Now)
			continue
		}
		row.Prediction = p.predict(m, c, isl, bs, 0, ref, req.Now)
		if req.Hop == HopPrefill {
			// Nothing decodes on a prefill worker, and its blocks leave
			// with the transfer: the booked prefill's drain and this
			// prompt's uncached prefill (with tier loads and any wait for
			// KV room), the delay it adds to later prefills there and the
			// price of recomputing what another prefill worker holds are
			// the whole prediction.
			pr := &row.Prediction
			pr.KVPressure, pr.Decode, pr.Total = 0, 0, pr.TTFT+pr.Later+pr.Recompute
		}
	}
	if req.Hop != HopDecode {
		p.creditInFlight(req, cands, rows, isl, bs, ref)
	}
}

// creditInFlight lets a request wait for a prefix another request is
// prefilling on a worker rank instead of computing it: engines admit in
// order, so it runs after the booked prefill there (which holds that
// prefix's computation) and computes only the rest. It is credited only
// when waiting there is honestly faster: the credited TTFT (the booked
// queue, in-flight prefill included, plus the tail) must be below every
// other eligible rank's TTFT computing the whole uncached prompt now. As
// followers queue behind the holder its queue grows by each tail, and
// once it passes the best full prefill elsewhere the next follower goes
// there, computing the prefix again: a hot prefix spreads to as many
// workers as its traffic needs.
func (p *KVTime) creditInFlight(req *Request, cands []Candidate, rows []Explanation, isl, bs int, ref recomputeRef) {
	// The two lowest uncredited TTFTs: every rank's best alternative.
	lo, lo2 := math.Inf(1), math.Inf(1)
	for i := range rows {
		if rows[i].Excluded == Eligible && i < len(cands) {
			if t := rows[i].Prediction.TTFT; t < lo {
				lo, lo2 = t, lo
			} else if t < lo2 {
				lo2 = t
			}
		}
	}
	for i := range rows {
		if rows[i].Excluded != Eligible || i >= len(cands) {
			continue
		}
		c := &cands[i]
		inflight := inFlightTokens(c, isl, bs)
		if inflight <= 0 {
			continue
		}
		m := p.prior
		if p.models != nil {
			if wm := p.models.Model(c.Worker); wm != nil {
				m = wm
			}
		}
		pr := p.predict(m, c, isl, bs, inflight, ref, req.Now)
		best := lo
		if rows[i].Prediction.TTFT == lo {
			best = lo2 // its own full prefill is no alternative
		}
		if pr.TTFT < best {
			if req.Hop == HopPrefill {
				pr.KVPressure, pr.Decode, pr.Total = 0, 0, pr.TTFT+pr.Later+pr.Recompute
			}
			pr.InFlight = inflight
			rows[i].Prediction = pr
		}
	}
}

// inFlightTokens is how many of the request's leading tokens the worker
// rank's running requests hold beyond its cached prefix: a prefix being
// prefilled there (the blocks the ledger does not count as new, from
// DecodeBlocks − ActiveBlocks). 0 without block tracking.
func inFlightTokens(c *Candidate, isl, bs int) int {
	if !(c.DecodeBlocks > 0) {
		return 0
	}
	held := min(max(isl/bs-int(math.Round(c.DecodeBlocks-c.ActiveBlocks)), 0)*bs, isl)
	return max(held-min(cached(c.Overlap)*bs, isl), 0)
}

// predict predicts a whole request (or a prefill hop) on candidate c;
// ref is the prefix the recompute term prices (see recomputeRef).
func (p *KVTime) predict(m *timemodel.Model, c *Candidate, isl, bs, inflight int, ref recomputeRef, now time.Time) Prediction {
	o := c.Overlap
	dev := min(max(o.Device, 0)*bs, isl)
	tier := min(max(o.Host, 0)*bs, isl-dev)
	disk := min(max(o.Disk, 0)*bs, isl-dev-tier)
	uncached := max(isl-dev-tier-disk-inflight, 0)
	dec := max(c.ActiveRequests, 0)
	own := timemodel.Job{Uncached: uncached, Decodes: dec, Chunk: c.MaxBatchedTokens}
	all := own
	all.Queued, all.Elapsed = c.ActivePrefillTokens, c.PrefillElapsed
	var pr Prediction
	pr.Prefill = m.PrefillSeconds(own)
	pr.Queue = max(m.PrefillSeconds(all)-pr.Prefill, 0)
	pr.Load = timemodel.TransferSeconds(tier, p.cfg.KVBytesPerToken, p.cfg.HostBandwidth) +
		timemodel.TransferSeconds(disk, p.cfg.KVBytesPerToken, p.cfg.DiskBandwidth)
	pr.KVWait, pr.KVPressure = p.kvWait(m, c)
	pr.TTFT = pr.Queue + pr.Prefill + pr.Load + pr.KVWait
	if dec > 0 {
		pr.Decode = p.decodeTerm(c, dec, p.decodeDelay(m, c, own, pr.Prefill+pr.Load))
	}
	pr.Later = later(m.RequestRate(now), pr.Queue, pr.Prefill)
	if priced := ref.held - max(isl-uncached, ref.shared); priced > 0 && p.cfg.RecomputeWeight > 0 {
		// The prefill this rank spends on the tokens the holder keeps
		// for no other running request.
		rest := own
		rest.Uncached = uncached - priced
		pr.Recompute = p.cfg.RecomputeWeight * max(pr.Prefill-m.PrefillSeconds(rest), 0)
	}
	pr.Total = pr.TTFT + pr.KVPressure + pr.Decode + pr.Later + pr.Recompute
	pr.Error = m.PrefillError()
	return pr
}

// later is the delay a prefill of x seconds, behind q seconds of booked
// prefill, adds to the first tokens of the requests that reach the worker
// rank after it, at the rate λ (requests per second) the rank has been
// receiving: the work is ahead of every one that arrives while it is
// still to run, so those arriving in the next q seconds wait x longer
// each and those arriving during its x seconds wait out what is left of
// it, x/2 on average:
//
//	later = λ·q·x + λ·x·x/2 = λ·x·(q + x/2)
//
// It is the price of a cache miss that own TTFT does not see: recomputing
// a prefix elsewhere makes x larger, and everyone queued behind it pays
// (the marginal-cost view of routing: own delay plus the delay imposed
// on others). Light load (λ·q and λ·x small) makes it vanish; a cache
// worker's backlog still moves a request when the wait there outweighs
// the recompute plus its toll on the other worker's later requests.
func later(lambda, q, x float64) float64 {
	if !(lambda > 0) || !(x > 0) {
		return 0
	}
	return lambda * x * (max(q, 0) + x/2)
}

// predictDecodeHop predicts a decode hop: the prompt's blocks not on the
// rank's device arrive by transfer (the mocker pulls every block its
// device prefix lacks, tier-cached ones too, so Load stays 0), then the
// rank computes one token, the last of the prompt, behind any prefill
// booked there (whole requests whose prefill hop was skipped), and the
// decode term and KV wait and pressure count as on a whole request.
func (p *KVTime) predictDecodeHop(m *timemodel.Model, c *Candidate, isl, bs int, now time.Time) Prediction {
	dev := min(max(c.Overlap.Device, 0)*bs, isl)
	dec := max(c.ActiveRequests, 0)
	own := timemodel.Job{Uncached: min(isl, 1), Decodes: dec, Chunk: c.MaxBatchedTokens}
	all := own
	all.Queued, all.Elapsed = c.ActivePrefillTokens, c.PrefillElapsed
	var pr Prediction
	pr.Transfer = timemodel.TransferSeconds(isl-dev, p.cfg.KVBytesPerToken, p.cfg.TransferBandwidth)
	pr.Prefill = m.PrefillSeconds(own)
	pr.Queue = max(m.PrefillSeconds(all)-pr.Prefill, 0)
	pr.KVWait, pr.KVPressure = p.kvWait(m, c)
	pr.TTFT = pr.Queue + pr.Transfer + pr.Prefill + pr.KVWait
	if dec > 0 {
		pr.Decode = p.decodeTerm(c, dec, p.decodeDelay(m, c, own, pr.Prefill))
	}
	pr.Later = later(m.RequestRate(now), pr.Queue, pr.Prefill)
	pr.Total = pr.TTFT + pr.KVPressure + pr.Decode + pr.Later
	pr.Error = m.PrefillError()
	return pr
}

// decodeTerm prices a stall of the worker rank's dec running decodes by
// stall seconds: DecodeWeight × the delay they suffer together, plus
// ITLWeight × what it adds to their mean inter-token times together
// (ITLExposure × stall: a stall weighs most on short answers, whose mean
// is over few tokens, and they set the inter-token tail).
func (p *KVTime) decodeTerm(c *Candidate, dec int, stall float64) float64 {
	return p.cfg.DecodeWeight*float64(dec)*stall + p.cfg.ITLWeight*max(c.ITLExposure, 0)*stall
}

// decodeDelay is the delay this request's prefill adds to each running
// decode on the worker rank: its passes (with any tier load) stall them,
// beyond the decode steps those passes replace.
func (p *KVTime) decodeDelay(m *timemodel.Model, c *Candidate, own timemodel.Job, prefill float64) float64 {
	use := 0.0
	if c.KVCapacityBlocks > 0 {
		use = c.ActiveBlocks / float64(c.KVCapacityBlocks)
	}
	passes, _, _ := own.Passes(m.Config().DefaultChunkTokens)
	return max(prefill-passes*m.DecodeStepSeconds(use), 0)
}

// kvWait predicts how long the request waits for KV room, and prices the
// KV blocks it adds. Both use the worker rank's residence R (the model's
// mean time a request holds its blocks) and its usable capacity C (less
// the engine's headroom):
//
//   - wait: when the blocks held (H) plus the request's exceed C, running
//     requests must free the excess first, and they free H blocks per R:
//     wait = R × excess / H, at most R;
//   - pressure: its n new blocks take n/C of the worker's KV for about R,
//     at use u = H/C; as in a single-server queue, the delay that much
//     work adds at utilisation u is R × (n/C) × u/(1 − u) (u at most 0.99).
//     It keeps KV use even across workers before any of them fills (where
//     admissions stall and running requests are preempted), and makes a
//     cache miss cost more on a fuller worker.
//
// Unknown capacity or residence predicts neither.
func (p *KVTime) kvWait(m *timemodel.Model, c *Candidate) (wait, pressure float64) {
	if c.KVCapacityBlocks <= 0 {
		return 0, 0
	}
	res, ok := m.ResidenceSeconds()
	if !ok {
		return 0, 0
	}
	capacity := float64(c.KVCapacityBlocks) * (1 - p.cfg.KVHeadroom)
	if excess := c.DecodeBlocks - capacity; excess > 0 {
		wait = res * min(excess/max(c.ActiveBlocks, 1), 1)
	}
	if n := c.DecodeBlocks - c.ActiveBlocks; n > 0 {
		u := min(max(c.ActiveBlocks, 0)/capacity, 0.99)
		pressure = res * n / capacity * u / (1 - u)
	}
	return wait, pressure
}

// Choose implements Policy: among rows within the tolerance of the lowest
// Total, the longest cached prefix (all tiers), then the lowest Total,
// exact ties at random.
func (p *KVTime) Choose(rows []Explanation, _ float64, rng *rand.Rand) int {
	lo, tol := math.Inf(1), p.cfg.Tolerance
	for i := range rows {
		if t := rows[i].Prediction.Total; t < lo {
			lo, tol = t, max(p.cfg.Tolerance, rows[i].Prediction.Error)
		}
	}
	band := lo*(1+tol) + 1e-3
	return argmin(rows, func(a, b *Explanation) int {
		ina, inb := a.Prediction.Total <= band, b.Prediction.Total <= band
		switch {
		case ina && !inb:
			return -1
		case inb && !ina:
			return 1
		case ina:
			if c := cmp.Compare(cached(b.Overlap), cached(a.Overlap)); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.Prediction.Total, b.Prediction.Total)
	}, rng)
}

// recomputeRef is what the recompute term prices against: the longest
// cached prefix among the eligible candidates (held tokens, all tiers) and
// how much of it its holder's running requests also hold (shared tokens).
// Recomputing the shared part elsewhere is no waste: that copy stays in
// use on the holder whatever this request does (a system prompt many
// sessions start from), so a second copy adds a place to serve it. The
// rest is the request's own history, which a move leaves idle on the
// holder and computes again.
type recomputeRef struct{ held, shared int }

// recomputeRef finds the holder of the longest cached prefix (ties: the
// one whose running requests share the least of it). A rank's shared
// tokens are the request's leading blocks its running requests hold: the
// blocks the ledger does not count as new there (DecodeBlocks −
// ActiveBlocks); without block tracking (no new blocks reported) all of
// them count as shared and nothing is priced.
func (p *KVTime) recomputeRef(cands []Candidate, rows []Explanation, isl, bs int) recomputeRef {
	var ref recomputeRef
	for i := range rows {
		if rows[i].Excluded != Eligible || i >= len(cands) {
			continue
		}
		c := &cands[i]
		held := min(cached(c.Overlap)*bs, isl)
		shared := min(max(isl/bs-int(math.Round(c.DecodeBlocks-c.ActiveBlocks)), 0)*bs, held)
		if held > ref.held || held == ref.held && shared < ref.shared {
			ref = recomputeRef{held: held, shared: shared}
		}
	}
	return ref
}

func cached(o Overlap) int { return o.Device + o.Host + o.Disk }
