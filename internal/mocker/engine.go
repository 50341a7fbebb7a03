package mocker

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
)

// Errors returned by the engine.
var (
	// ErrInvalidRequest wraps every reason Add refuses a request: empty
	// prompt, max tokens below 1, a duplicate id, or a sequence that could
	// never fit in the KV cache.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrBusy is returned by Reset while requests are waiting or running.
	ErrBusy = errors.New("engine has requests in flight")
)

// Request is one generation request given to an engine rank.
type Request struct {
	// ID identifies the request in outputs and Abort; unique per engine.
	ID uint64
	// Tokens is the prompt's token ids; the engine does not modify it.
	Tokens []uint32
	// MaxTokens is the number of tokens to generate (at least 1). The mock
	// has no end-of-sequence token: it always generates MaxTokens.
	MaxTokens int
	// Hold keeps the request's blocks when it finishes, for a decode
	// worker to pull (a disaggregated prefill); Release frees them.
	Hold bool
	// Remote says the prompt's KV arrives from a prefill worker: only the
	// last prompt token is computed, and the received blocks are cached
	// (and reported stored) as computed ones are.
	Remote bool
	// LoRA names the LoRA adapter the request runs with ("" none). Its
	// blocks are hashed apart from the base model's (vLLM puts the
	// adapter's name in every block's extra keys) and its stored events
	// carry the name.
	LoRA string
	// CacheSalt is vLLM's cache_salt ("" none): the request's blocks are
	// hashed apart from every other salt's (vLLM puts it in block 0's extra
	// keys, so the whole chain differs) and its stored events carry it.
	CacheSalt string
}

// blockSalt is what a block was hashed with besides its tokens.
type blockSalt struct{ lora, cache string }

// Output is what one request produced in a step: one new token.
type Output struct {
	// ID is the request's id.
	ID uint64
	// Token is the generated token id (deterministic filler).
	Token uint32
	// First is true for the request's first token (its prefill ended).
	First bool
	// Finished is true for the request's last token; its blocks are freed.
	Finished bool
	// CachedTokens is the number of prompt tokens served from the prefix
	// cache (device or host tier) when the request was first scheduled.
	CachedTokens int
	// PromptTokens is the prompt length.
	PromptTokens int
	// Generated counts the tokens generated so far, this one included.
	Generated int
}

// StepResult is what one Step did. Its slices belong to the engine and are
// valid until the next call of any engine method.
type StepResult struct {
	// Duration is the modelled wall time of the step; the outputs appear,
	// and the next step may start, Duration after the step began.
	Duration time.Duration
	// Outputs has one entry per request that produced a token.
	Outputs []Output
	// Events are the KV events of the step, in the order they happened.
	Events []Event
	// PrefillTokens and DecodeTokens count the tokens computed.
	PrefillTokens, DecodeTokens int
	// Scheduled is the number of requests that computed tokens.
	Scheduled int
}

// Stats is a snapshot of a rank's counters and gauges.
type Stats struct {
	// Running and Waiting are the queue lengths.
	Running, Waiting int
	// UsedBlocks of TotalBlocks device blocks are held by requests.
	UsedBlocks, TotalBlocks int
	// CachedBlocks is the number of device blocks with a hash (in use or
	// free); CPUBlocks the number of blocks in the host tier.
	CachedBlocks, CPUBlocks int
	// PrefixQueries and PrefixHits count prompt tokens looked up in the
	// prefix cache and tokens found, as vLLM's prefix cache counters do.
	PrefixQueries, PrefixHits uint64
	// Preemptions counts requests preempted for lack of blocks.
	Preemptions uint64
	// Steps counts steps that did work.
	Steps uint64
}

// Usage is the fraction of device blocks held by requests.
func (s Stats) Usage() float64 {
	if s.TotalBlocks == 0 {
		return 0
	}
	return float64(s.UsedBlocks) / float64(s.TotalBlocks)
}

type request struct {
	id          uint64
	tokens      []uint32 // prompt then generated tokens
	salt        blockSalt
	promptLen   int
	maxTokens   int
	seq         []uint64 // router sequence hashes of full blocks, as far as computed
	blocks      []int32  // device blocks held, in chain order
	numComputed int      // tokens whose KV is in blocks
	numCached   int
	cachedSet   bool
	generated   int
	outSeed     uint64
	running     bool
	hold        bool
	remote      bool
}

type scheduled struct {
	r *request
	n int
}

// Engine is one data-parallel rank of a simulated vLLM engine: a paged KV
// cache with prefix caching and a continuous-batching scheduler. It is a
// pure state machine: no goroutines, no I/O, no clock. Callers add
// requests and call Step; each step reports how long it takes in model
// time. Not safe for concurrent use.
type Engine struct {
	cfg     Config
	pool    *gpuPool
	cpu     *cpuPool
	log     eventLog
	waiting []*request
	running []*request
	byID    map[uint64]*request
	sched   []scheduled
	outputs []Output
	stats   Stats
	held    map[uint64]*request // finished, blocks kept for a decode worker (pd.go)
}

// NewEngine returns an empty engine rank.
func NewEngine(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, byID: make(map[uint64]*request)}
	e.log = eventLog{bs: cfg.BlockSize, enabled: cfg.EnablePrefixCaching}
	if cfg.NumCPUBlocks > 0 && cfg.EnablePrefixCaching {
		e.cpu = newCPUPool(cfg.NumCPUBlocks, &e.log, cfg.HashSeed)
	}
	e.pool = newGPUPool(cfg.NumGPUBlocks, cfg.BlockSize, e.cpu != nil, &e.log, e.cpu, cfg.HashSeed)
	return e, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// EngineHash is the opaque id an engine with the given hash seed publishes
// for a block whose router sequence hash is seq: a bijective mix of seq and
// the seed, so it is as unique as seq but never equal to it.
func EngineHash(seq, seed uint64) uint64 {
	x := seq ^ seed ^ 0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func engineHash(seq, seed uint64) uint64 { return EngineHash(seq, seed) }

// VocabSize bounds the filler token ids the engine generates.
const VocabSize = 151_643

// OutputToken is the j-th filler token of a request whose output seed is
// seed. Deterministic, so the same prompt always yields the same output.
func OutputToken(seed uint64, j int) uint32 {
	return uint32(EngineHash(seed+uint64(j), 0x0ddba11) % VocabSize)
}

// outputSeed derives a request's output seed from its prompt: its length
// and its last 64 tokens.
func outputSeed(tokens []uint32) uint64 {
	s := uint64(len(tokens))
	for _, t := range tokens[max(0, len(tokens)-64):] {
		s = EngineHash(s^uint64(t), 7)
	}
	return s
}

func (e *Engine) blocksFor(tokens int) int {
	return (tokens + e.cfg.BlockSize - 1) / e.cfg.BlockSize
}

// Add queues a request. The prompt is copied.
func (e *Engine) Add(req Request) error {
	switch {
	case len(req.Tokens) == 0:
		return fmt.Errorf("%w: empty prompt", ErrInvalidRequest)
	case req.MaxTokens < 1:
		return fmt.Errorf("%w: max tokens %d, must be at least 1", ErrInvalidRequest, req.MaxTokens)
	case e.byID[req.ID] != nil || e.held[req.ID] != nil:
		return fmt.Errorf("%w: duplicate request id %d", ErrInvalidRequest, req.ID)
	}
	// Compared as a difference: len(req.Tokens)+req.MaxTokens can
	// overflow (a client's max_tokens of 2^63-1). have*BlockSize is at
	// most 2^46 (Validate's bounds).
	have := e.cfg.NumGPUBlocks - e.cfg.watermarkBlocks()
	if room := have * e.cfg.BlockSize; req.MaxTokens > room-len(req.Tokens) {
		return fmt.Errorf("%w: %d prompt + %d max tokens exceed the %d tokens of the engine's %d KV blocks",
			ErrInvalidRequest, len(req.Tokens), req.MaxTokens, room, have)
	}
	toks := make([]uint32, len(req.Tokens), len(req.Tokens)+req.MaxTokens)
	copy(toks, req.Tokens)
	r := &request{id: req.ID, tokens: toks, salt: blockSalt{req.LoRA, req.CacheSalt}, promptLen: len(toks), maxTokens: req.MaxTokens, outSeed: outputSeed(toks),
		hold: req.Hold, remote: req.Remote}
	e.byID[r.id] = r
	e.waiting = append(e.waiting, r)
	return nil
}

// Has reports whether a request is waiting or running.
func (e *Engine) Has(id uint64) bool { return e.byID[id] != nil }

// Idle reports whether no request is waiting or running.
func (e *Engine) Idle() bool { return len(e.byID) == 0 }

// Abort drops a waiting or running request and frees its blocks. It
// reports whether the request was known.
func (e *Engine) Abort(id uint64) bool {
	r := e.byID[id]
	if r == nil {
		return false
	}
	delete(e.byID, id)
	if r.running {
		e.running = slices.DeleteFunc(e.running, func(x *request) bool { return x == r })
		e.releaseAll(r)
	} else {
		e.waiting = slices.DeleteFunc(e.waiting, func(x *request) bool { return x == r })
	}
	return true
}

// Reset drops the whole prefix cache, like vLLM's reset_prefix_cache, and
// reports one Cleared event. It refuses (ErrBusy) while requests are in
// flight.
func (e *Engine) Reset() ([]Event, error) {
	if !e.Idle() {
		return nil, ErrBusy
	}
	e.releaseHeld()
	e.log.reset()
	e.pool.clear()
	if e.cpu != nil {
		e.cpu.clear()
	}
	e.log.cleared()
	return e.log.finish(), nil
}

// Stats returns the rank's counters and gauges.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Running, s.Waiting = len(e.running), len(e.waiting)
	s.TotalBlocks = e.pool.total()
	s.UsedBlocks = s.TotalBlocks - e.pool.free()
	s.CachedBlocks = len(e.pool.byHash)
	if e.cpu != nil {
		s.CPUBlocks = e.cpu.len()
	}
	return s
}

// CachedHashes appends the engine hashes of every cached block, per tier,
// to dst and returns it; tests compare it with an event-fed model.
func (e *Engine) CachedHashes(tier kvevent.Tier, dst []uint64) []uint64 {
	switch tier {
	case kvevent.TierDevice:
		for h := range e.pool.byHash {
			dst = append(dst, EngineHash(h, e.cfg.HashSeed))
		}
	case kvevent.TierHostPinned:
		if e.cpu != nil {
			for h := range e.cpu.byHash {
				dst = append(dst, EngineHash(h, e.cfg.HashSeed))
			}
		}
	}
	return dst
}

// hashUpTo makes sure r.seq covers the first n full blocks of r.tokens.
func (e *Engine) hashUpTo(r *request, n int) {
	bs := e.cfg.BlockSize
	for i := len(r.seq); i < n; i++ {
		l := kvhash.LocalHash(r.tokens[i*bs:(i+1)*bs], kvhash.SaltedSeed(r.salt.lora, r.salt.cache))
		if i == 0 {
			r.seq = append(r.seq, l)
		} else {
			r.seq = append(r.seq, kvhash.ChainHash(r.seq[i-1], l))
		}
	}
}

// releaseAll frees a request's blocks, last block first, so that the tail
// of its chain is evicted before the shared prefix.
func (e *Engine) releaseAll(r *request) {
	for i := len(r.blocks) - 1; i >= 0; i-- {
		e.pool.release(r.blocks[i])
	}
	r.blocks = r.blocks[:0]
	r.running = false
}

// grow allocates blocks so r can hold target tokens; false when the pool
// has too few free blocks.
func (e *Engine) grow(r *request, target int) bool {
	need := e.blocksFor(target) - len(r.blocks)
	if need <= 0 {
		return true
	}
	if e.pool.free() < need {
		return false
	}
	for range need {
		r.blocks = append(r.blocks, e.pool.allocate())
	}
	return true
}

// preemptNewest requeues the most recently admitted running request at the
// front of the waiting queue, freeing its blocks (recompute preemption).
func (e *Engine) preemptNewest() *request {
	v := e.running[len(e.running)-1]
	e.running = e.running[:len(e.running)-1]
	e.releaseAll(v)
	v.numComputed = 0
	e.waiting = slices.Insert(e.waiting, 0, v)
	e.stats.Preemptions++
	return v
}

// Step runs one scheduler iteration: running requests first (decodes and
// prefill chunks), then, if nothing was preempted, waiting requests in
// arrival order while sequences, token budget and free blocks (above the
// watermark) allow; no request computes more than the long-prefill
// threshold's tokens when one is set. A step with nothing to do returns a
// zero result.
func (e *Engine) Step() StepResult {
	e.log.reset()
	e.sched = e.sched[:0]
	e.outputs = e.outputs[:0]
	budget := e.cfg.MaxNumBatchedTokens
	preempted := false

	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := e.chunk(len(r.tokens)-r.numComputed, budget)
		for !e.grow(r, r.numComputed+n) {
			v := e.preemptNewest()
			preempted = true
			if v == r {
				n = 0
				break
			}
		}
		if n == 0 {
			break
		}
		e.sched = append(e.sched, scheduled{r, n})
		budget -= n
	}

	onboard := 0
	for !preempted && len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs && budget > 0 {
		r := e.waiting[0]
		n, ok := e.admit(r, budget, &onboard)
		if !ok {
			break
		}
		e.waiting = e.waiting[1:]
		r.running = true
		e.running = append(e.running, r)
		e.sched = append(e.sched, scheduled{r, n})
		budget -= n
	}
	if len(e.sched) == 0 {
		return StepResult{Events: e.log.finish()}
	}

	var res StepResult
	for _, s := range e.sched {
		r := s.r
		if s.n == 1 && r.generated > 0 && r.numComputed+1 == len(r.tokens) {
			res.DecodeTokens++
		} else {
			res.PrefillTokens += s.n
		}
	}
	usage := float64(e.pool.total()-e.pool.free()) / float64(e.pool.total())
	res.Duration = e.cfg.stepDuration(res.PrefillTokens, res.DecodeTokens, usage, onboard)
	res.Scheduled = len(e.sched)

	finished := false
	for _, s := range e.sched {
		r := s.r
		old := r.numComputed
		r.numComputed += s.n
		e.fill(r, old)
		if r.numComputed < len(r.tokens) {
			continue
		}
		r.generated++
		tok := OutputToken(r.outSeed, r.generated-1)
		out := Output{ID: r.id, Token: tok, First: r.generated == 1, CachedTokens: r.numCached,
			PromptTokens: r.promptLen, Generated: r.generated}
		if r.generated >= r.maxTokens {
			out.Finished = true
			finished = true
			delete(e.byID, r.id)
			e.finish(r)
		} else {
			r.tokens = append(r.tokens, tok)
		}
		e.outputs = append(e.outputs, out)
	}
	if finished {
		e.running = slices.DeleteFunc(e.running, func(r *request) bool { return !r.running })
	}
	e.stats.Steps++
	res.Outputs = e.outputs
	res.Events = e.log.finish()
	return res
}

// chunk is how many of a request's remaining tokens it computes in a step
// with budget tokens left: all of them, capped by the long-prefill
// threshold when one is set (vLLM caps first, then takes the budget's
// minimum, for running and waiting requests alike).
func (e *Engine) chunk(remaining, budget int) int {
	if t := e.cfg.LongPrefillTokenThreshold; t > 0 && remaining > t {
		remaining = t
	}
	return min(remaining, budget)
}

// admit looks up r's cached prefix and, if its first chunk fits above the
// watermark, takes the cached blocks, brings host-tier hits back to the
// device and allocates the chunk's blocks. It returns the chunk size.
func (e *Engine) admit(r *request, budget int, onboard *int) (int, bool) {
	bs := e.cfg.BlockSize
	// At least one token is always computed, as in vLLM: a fully cached
	// prompt recomputes its last token to produce the first output.
	maxHit := (len(r.tokens) - 1) / bs
	hits := 0
	gpuHits, freeHits := 0, 0
	if e.cfg.EnablePrefixCaching {
		e.hashUpTo(r, maxHit)
		for hits < maxHit {
			h := r.seq[hits]
			if b, ok := e.pool.byHash[h]; ok {
				gpuHits++
				if e.pool.ref[b] == 0 {
					freeHits++
				}
			} else if e.cpu == nil || !e.cpu.has(h) {
				break
			}
			hits++
		}
	}
	computed := hits * bs
	local := computed
	if r.remote && r.generated == 0 {
		computed = max(computed, r.promptLen-1) // received, not computed
	}
	n := e.chunk(len(r.tokens)-computed, budget)
	newBlocks := e.blocksFor(computed+n) - gpuHits
	if e.pool.free()-freeHits-newBlocks < e.cfg.watermarkBlocks() {
		return 0, false
	}
	if !r.cachedSet {
		r.cachedSet = true
		r.numCached = local
		e.stats.PrefixQueries += uint64(r.promptLen)
		e.stats.PrefixHits += uint64(min(computed, r.promptLen))
	}
	// Take the device hits first so that allocating for host hits cannot
	// evict them.
	r.blocks = slices.Grow(r.blocks[:0], e.blocksFor(len(r.tokens)+r.maxTokens-r.generated))
	for i := range hits {
		if b, ok := e.pool.byHash[r.seq[i]]; ok {
			e.pool.touch(b)
		}
	}
	for i := range hits {
		h := r.seq[i]
		b, ok := e.pool.byHash[h]
		if !ok {
			b = e.pool.allocate()
			e.cacheBlock(r, i, b)
			*onboard += bs
		}
		r.blocks = append(r.blocks, b)
	}
	r.numComputed = computed
	if !e.grow(r, computed+n) {
		// Unreachable: the free-block check above covers the allocation.
		// Should it ever happen, give everything back and wait.
		e.releaseAll(r)
		r.numComputed = 0
		return 0, false
	}
	if computed > local {
		e.fill(r, local) // the received blocks enter the prefix cache
	}
	return n, true
}

// cacheBlock gives device block b the hash of r's block i and reports it
// stored.
func (e *Engine) cacheBlock(r *request, i int, b int32) {
	bs := e.cfg.BlockSize
	var parent uint64
	if i > 0 {
		parent = r.seq[i-1]
	}
	toks := r.tokens[i*bs : (i+1)*bs]
	e.pool.cache(b, r.seq[i], parent, i > 0, toks, r.salt)
	e.log.stored(kvevent.TierDevice, EngineHash(r.seq[i], e.cfg.HashSeed), EngineHash(parent, e.cfg.HashSeed), i > 0, toks, r.salt)
}

// fill caches the blocks r filled while its computed tokens grew from old.
// A block whose content is already cached elsewhere (two requests with the
// same prefix computed it at the same time) is swapped for the cached one
// and its own block returned empty, so every full block in use is cached
// exactly once and every stored block's parent is cached.
func (e *Engine) fill(r *request, old int) {
	if !e.cfg.EnablePrefixCaching {
		return
	}
	bs := e.cfg.BlockSize
	full := r.numComputed / bs
	first := old / bs
	if full <= first {
		return
	}
	e.hashUpTo(r, full)
	for i := first; i < full; i++ {
		b := r.blocks[i]
		if x, ok := e.pool.byHash[r.seq[i]]; ok {
			if x != b {
				e.pool.touch(x)
				e.pool.release(b)
				r.blocks[i] = x
			}
			continue
		}
		e.cacheBlock(r, i, b)
	}
}
