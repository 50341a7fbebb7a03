package admission

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Policy is the order in which waiting requests are released.
type Policy string

// Policies.
const (
	// PolicyFCFS releases in arrival order: the shortest tail wait.
	PolicyFCFS Policy = "fcfs"
	// PolicyWSPT releases the shortest predicted prefill first, aged by
	// AgingTokensPerSecond: the shortest mean wait.
	PolicyWSPT Policy = "wspt"
	// PolicyPriority releases the lowest Priority value first (strict
	// tiers), in arrival order within a tier.
	PolicyPriority Policy = "priority"
)

// Policies lists the policy names, for flag help and validation.
var Policies = []Policy{PolicyFCFS, PolicyWSPT, PolicyPriority}

// Config configures a Queue.
type Config struct {
	// Policy is the release order. Default fcfs.
	Policy Policy
	// MaxLen is the most requests waiting at once; at least 1. Default
	// 1024.
	MaxLen int
	// AgingTokensPerSecond is WSPT's aging: each second a request has
	// waited counts as this many prompt tokens less. 0 is pure
	// shortest-first (a long prompt may starve). Default 4096.
	AgingTokensPerSecond float64
	// TenantInFlight caps each tenant's requests in flight (released and
	// not yet done, queued or not), counted in the queue's Ledger
	// (every queue sharing it, NewShared); a tenant at its cap waits even
	// when workers are free. 0 is no cap. Default 0.
	TenantInFlight int
	// DefaultWeight is the fair-queueing weight of a tenant absent from
	// Weights. Default 1.
	DefaultWeight float64
	// Weights are per-tenant fair-queueing weights: a tenant of weight 2
	// gets twice the service of a tenant of weight 1 while both wait.
	Weights map[string]float64
	// TTFTTarget turns on deadline-aware release (Queue.Late): a request
	// whose wait plus the least its prefill can take on the worker it is
	// routed to (LeastPrefill) exceeds this is refused when released
	// instead of being served late, and the next one is released. Set it
	// to the time to first token you promise. 0 is off. Default 0.
	TTFTTarget time.Duration
	// BurstCredit lets a tenant that starts waiting again keep up to this
	// many tokens of predicted prefill (Entry.Cost) of unused share: its
	// virtual time is brought up to the queue's less BurstCredit / its
	// weight, so a short burst of an otherwise light tenant is released
	// ahead of a tenant that kept the queue full, instead of alternating
	// with it. A tenant banks at most this much however long it was idle.
	// 0 banks nothing (plain start-time fair queueing). Default 0.
	BurstCredit float64
	// StaggerGap turns on staggered release (stagger.go): while a tenant
	// crowds another (Queue.Crowds), a request of the crowding tenant is
	// held (Queue.Hold) when its prefill would be predicted to end within
	// StaggerGap of the predicted end of another prefill the queue
	// released, so that the workers' prefills end spread out in time and
	// a light tenant's request finds a worker freeing soon. Set it to
	// about the crowding tenant's prefill time ÷ the number of workers,
	// a little less, or use StaggerAuto. 0 is off. Default 0.
	StaggerGap time.Duration
	// StaggerAuto turns on staggered release with a gap worked out for
	// each held request instead of StaggerGap: its predicted prefill ÷
	// (the prefills predicted to be running + 1), so that it and the
	// prefills already running would end evenly spread over one prefill
	// time. It scales with the prompts and the fleet without a setting
	// (the fairness scenario: 86–105 ms prefills on 4 workers give gaps
	// of about 21–26 ms, where a fixed 22 ms was the best hand-set gap).
	// StaggerGap must be 0 with it. Default false.
	StaggerAuto bool
	// StaggerMaxHold is the longest a release is held by StaggerGap: a
	// request that would have to wait longer to end clear of the others
	// is released at once. 0 is three times the gap. Default 0.
	StaggerMaxHold time.Duration
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{Policy: PolicyFCFS, MaxLen: 1024, AgingTokensPerSecond: 4096, DefaultWeight: 1}
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("invalid admission config")

// Sentinel errors of Push.
var (
	// ErrFull says the queue holds MaxLen requests of tenants within
	// their shares: the front door answers 503 with Retry-After.
	ErrFull = errors.New("admission queue full")
	// ErrOverShare says the queue is full and the request's tenant holds
	// its weighted share of it or more: 429.
	ErrOverShare = errors.New("tenant over its share of the admission queue")
	// ErrEntry refuses an entry without an id, or with the id of one
	// already waiting.
	ErrEntry = errors.New("invalid admission entry")
)

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Policy != PolicyFCFS && c.Policy != PolicyWSPT && c.Policy != PolicyPriority:
		return fmt.Errorf("%w: policy %q is not one of %v", ErrConfig, c.Policy, Policies)
	case c.MaxLen < 1 || c.MaxLen > 1<<24:
		return fmt.Errorf("%w: max length %d out of [1, 2^24]", ErrConfig, c.MaxLen)
	case !finite(c.AgingTokensPerSecond) || c.AgingTokensPerSecond < 0:
		return fmt.Errorf("%w: aging %v tokens/s must be finite and >= 0", ErrConfig, c.AgingTokensPerSecond)
	case c.TenantInFlight < 0:
		return fmt.Errorf("%w: tenant in-flight cap %d is negative", ErrConfig, c.TenantInFlight)
	case !finite(c.DefaultWeight) || c.DefaultWeight <= 0:
		return fmt.Errorf("%w: default weight %v must be finite and > 0", ErrConfig, c.DefaultWeight)
	case c.TTFTTarget < 0:
		return fmt.Errorf("%w: TTFT target %v is negative", ErrConfig, c.TTFTTarget)
	case !finite(c.BurstCredit) || c.BurstCredit < 0:
		return fmt.Errorf("%w: burst credit %v tokens must be finite and >= 0", ErrConfig, c.BurstCredit)
	case c.StaggerGap < 0 || c.StaggerMaxHold < 0:
		return fmt.Errorf("%w: stagger gap %v and max hold %v must be >= 0", ErrConfig, c.StaggerGap, c.StaggerMaxHold)
	case c.StaggerAuto && c.StaggerGap != 0:
		return fmt.Errorf("%w: stagger gap %v set beside the automatic gap", ErrConfig, c.StaggerGap)
	}
	for t, w := range c.Weights {
		if !finite(w) || w <= 0 {
			return fmt.Errorf("%w: tenant %q weight %v must be finite and > 0", ErrConfig, t, w)
		}
	}
	return nil
}
