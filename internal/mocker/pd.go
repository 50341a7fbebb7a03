package mocker

import "time"

// Disaggregated serving: a prefill rank keeps a finished request's blocks
// (Request.Hold) until the decode side has pulled them, and a decode rank
// takes a request whose prompt KV arrives from elsewhere (Request.Remote).

// finish ends a request whose last token came out: its blocks are freed,
// or kept when it holds them for a decode worker.
func (e *Engine) finish(r *request) {
	if !r.hold {
		e.releaseAll(r)
		return
	}
	r.running = false // leaves the running queue; its blocks stay
	if e.held == nil {
		e.held = make(map[uint64]*request)
	}
	e.held[r.id] = r
}

// Held returns the device block ids request id holds for a decode
// worker, or false when it holds none.
func (e *Engine) Held(id uint64) ([]int32, bool) {
	r := e.held[id]
	if r == nil {
		return nil, false
	}
	return append([]int32(nil), r.blocks...), true
}

// Release frees the blocks a finished request held for a decode worker.
// It reports whether the request was holding any.
func (e *Engine) Release(id uint64) bool {
	r := e.held[id]
	if r == nil {
		return false
	}
	delete(e.held, id)
	e.releaseAll(r)
	return true
}

// HeldRequests returns how many finished requests keep their blocks for
// a decode worker.
func (e *Engine) HeldRequests() int { return len(e.held) }

func (e *Engine) releaseHeld() {
	for id := range e.held {
		e.Release(id)
	}
}

// LocalPrefix returns how many leading full blocks of tokens the rank's
// device cache holds, as admission would find them (the last token is
// always computed): what a decode rank need not receive.
func (e *Engine) LocalPrefix(tokens []uint32) int {
	if !e.cfg.EnablePrefixCaching || len(tokens) == 0 {
		return 0
	}
	r := &request{tokens: tokens}
	maxHit := (len(tokens) - 1) / e.cfg.BlockSize
	e.hashUpTo(r, maxHit)
	n := 0
	for n < maxHit {
		if _, ok := e.pool.byHash[r.seq[n]]; !ok {
			break
		}
		n++
	}
	return n
}

// TransferTime is the modelled time to receive blocks KV blocks from a
// prefill worker: their bytes (block size × KVBytesPerToken each) over
// KVTransferBandwidth, divided by the speedup ratio.
func (c Config) TransferTime(blocks int) time.Duration {
	if blocks <= 0 {
		return 0
	}
	secs := float64(blocks) * float64(c.BlockSize) * float64(c.KVBytesPerToken) / c.KVTransferBandwidth
	return time.Duration(secs / c.SpeedupRatio * float64(time.Second))
}
