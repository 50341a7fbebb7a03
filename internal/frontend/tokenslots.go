package frontend

import (
	"context"
	"errors"
	"time"
)

// largePrompt is the body size (bytes) from which a request's prompt
// takes a tokenization slot: below it tokenizing costs at most a few
// milliseconds and is never queued.
const largePrompt = 64 << 10

// errTokenizerBusy reports a large prompt that waited TokenizeQueueTimeout
// for a tokenization slot (503).
var errTokenizerBusy = errors.New("tokenizer busy")

// tokenSlots bounds how many large prompts are tokenized at once, so that
// a few huge requests (seconds of CPU and hundreds of MB each) cannot take
// every core and the memory with them while small ones wait behind.
type tokenSlots struct {
	ch      chan struct{}
	timeout time.Duration
}

func newTokenSlots(n int, timeout time.Duration) *tokenSlots {
	return &tokenSlots{ch: make(chan struct{}, n), timeout: timeout}
}

// acquire waits for a slot for at most the queue timeout or until ctx
// ends; the returned release must be called once the tokenizing is done.
func (s *tokenSlots) acquire(ctx context.Context) (release func(), err error) {
	select {
	case s.ch <- struct{}{}:
		return s.release, nil
	default:
	}
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case s.ch <- struct{}{}:
		return s.release, nil
	case <-t.C:
		return nil, errTokenizerBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *tokenSlots) release() { <-s.ch }
