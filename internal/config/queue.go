package config

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/admission"
	"github.com/kvrouter/kvrouter/internal/frontend"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/sim"
)

// Queue holds the admission queue's and session affinity's options
// (docs/config.md, "Overload: queue, fairness, sessions").
type Queue struct {
	// Threshold turns the queue on: requests wait while every worker has
	// more than this many times its max batched tokens of prompt still to
	// prefill (--router-queue-threshold, Dynamo's name); 0 is off.
	// Default 0.
	Threshold float64
	// PrefillTokens: also saturated above this many pending prefill
	// tokens (--router-queue-prefill-tokens); 0 is off. Default 0.
	PrefillTokens int
	// KVThreshold: also saturated above this fraction of its KV capacity
	// held by running requests (--router-queue-kv-threshold); 0 is off.
	// Default 0.
	KVThreshold float64
	// Policy is the release order: fcfs, wspt or priority
	// (--router-queue-policy). Default fcfs.
	Policy string
	// MaxLen is the most requests waiting (--router-queue-max-len).
	// Default 1024.
	MaxLen int
	// Timeout is a request's longest wait (--router-queue-timeout); then
	// 503 with Retry-After. Default 30 s.
	Timeout time.Duration
	// TTFTTarget turns on deadline-aware release
	// (--router-queue-ttft-target): a released request whose wait plus
	// its predicted prefill on the worker it is routed to exceeds this is
	// refused (503 queue_late) rather than served late. 0 is off.
	// Default 0.
	TTFTTarget time.Duration
	// AgingTokensPerSec is WSPT's aging: each second waited counts as
	// this many prompt tokens less (--router-queue-wspt-aging).
	// Default 4096.
	AgingTokensPerSec float64
	// TenantHeader names the header saying the tenant when no API keys
	// are set (--router-tenant-header). Default "X-Tenant-ID".
	TenantHeader string
	// TenantWeights are fair-queueing weights, "name=weight,..."
	// (--router-tenant-weights); others weigh 1. Default "".
	TenantWeights string
	// TenantMaxInFlight caps each tenant's requests in flight (waiting
	// beyond it, 429 at the timeout) (--router-tenant-max-in-flight); 0 is
	// no cap. Default 0.
	TenantMaxInFlight int
	// TenantBurstCredit lets a tenant back from idle keep up to this many
	// tokens of predicted prefill of unused share
	// (--router-tenant-burst-credit): its short burst goes ahead of a
	// tenant that keeps the queue full instead of alternating with it.
	// 0 banks nothing (plain fair queueing). Default 0.
	TenantBurstCredit float64
	// StaggerGap turns on staggered release (--router-queue-stagger-gap):
	// while one tenant crowds another, a release of the crowding tenant
	// is held while its prefill would be predicted to end within this of
	// another released prefill's predicted end, so that the workers'
	// prefills end spread out and the lighter tenant's request waits
	// less. About the crowding tenant's prefill time ÷ the number of
	// workers, a little less; "auto" works the gap out for each held
	// request (its predicted prefill ÷ the prefills running + 1,
	// admission.Config.StaggerAuto). 0 is off. Default 0.
	StaggerGap StaggerGap
	// StaggerMaxHold is the longest one release is held by staggering
	// (--router-queue-stagger-max-hold); 0 is three times the gap.
	// Default 0.
	StaggerMaxHold time.Duration
	// SessionAffinityTTLSecs keeps a session (X-Session-ID or
	// X-Dynamo-Session-ID) on its worker this many seconds after its last
	// request (--router-session-affinity-ttl-secs); 0 is off. Default 0.
	SessionAffinityTTLSecs float64
}

func defaultQueue() Queue {
	f := frontend.DefaultQueueConfig()
	return Queue{Policy: string(f.Admission.Policy), MaxLen: f.Admission.MaxLen, Timeout: f.Timeout,
		TTFTTarget:        f.Admission.TTFTTarget,
		AgingTokensPerSec: f.Admission.AgingTokensPerSecond, TenantHeader: f.TenantHeader}
}

// bind registers the queue's flags.
func (q *Queue) bind(fs *flag.FlagSet) {
	fs.Float64Var(&q.Threshold, "router-queue-threshold", q.Threshold, "queue a request while every worker of its model has more than this × its max batched tokens of prefill pending (0: off)")
	fs.IntVar(&q.PrefillTokens, "router-queue-prefill-tokens", q.PrefillTokens, "queue a request while every worker of its model has more than this many prefill tokens pending (0: off)")
	fs.Float64Var(&q.KVThreshold, "router-queue-kv-threshold", q.KVThreshold, "queue a request while every worker of its model holds more than this fraction of its KV capacity (0: off)")
	fs.StringVar(&q.Policy, "router-queue-policy", q.Policy, "release order of waiting requests: fcfs, wspt (shortest prefill first, aged) or priority (lower \"priority\" first)")
	fs.IntVar(&q.MaxLen, "router-queue-max-len", q.MaxLen, "most requests waiting at once (in each model's queue)")
	fs.DurationVar(&q.Timeout, "router-queue-timeout", q.Timeout, "longest wait of a request in the queue, then 503 with Retry-After")
	fs.DurationVar(&q.TTFTTarget, "router-queue-ttft-target", q.TTFTTarget, "refuse (503) a released request whose wait plus predicted prefill exceeds this time to first token (0: off)")
	fs.Float64Var(&q.AgingTokensPerSec, "router-queue-wspt-aging", q.AgingTokensPerSec, "wspt: each second waited counts as this many prompt tokens less")
	fs.StringVar(&q.TenantHeader, "router-tenant-header", q.TenantHeader, "header naming the tenant when no API keys are set (with keys, the key is the tenant)")
	fs.StringVar(&q.TenantWeights, "router-tenant-weights", q.TenantWeights, "fair-queueing weights, name=weight,... (others weigh 1)")
	fs.IntVar(&q.TenantMaxInFlight, "router-tenant-max-in-flight", q.TenantMaxInFlight, "cap on each tenant's requests in flight, of every model together (0: none)")
	fs.Float64Var(&q.TenantBurstCredit, "router-tenant-burst-credit", q.TenantBurstCredit, "tokens of predicted prefill a tenant back from idle may be released ahead of tenants that kept waiting (0: none)")
	fs.Var(&q.StaggerGap, "router-queue-stagger-gap", "while one tenant crowds another, hold its release while its prefill would end within this of another's predicted end: a duration, or auto (its prefill ÷ the prefills running + 1) (0: off)")
	fs.DurationVar(&q.StaggerMaxHold, "router-queue-stagger-max-hold", q.StaggerMaxHold, "longest a release is held by --router-queue-stagger-gap (0: three times the gap)")
	fs.Float64Var(&q.SessionAffinityTTLSecs, "router-session-affinity-ttl-secs", q.SessionAffinityTTLSecs, "keep a session (X-Session-ID, X-Dynamo-Session-ID) on its worker this long after its last request (0: off)")
}

// weights parses TenantWeights.
func (q Queue) weights() (map[string]float64, error) {
	if strings.TrimSpace(q.TenantWeights) == "" {
		return nil, nil
	}
	out := map[string]float64{}
	for part := range strings.SplitSeq(q.TenantWeights, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		v, err := strconv.ParseFloat(strings.TrimSpace(w), 64)
		if !ok || name == "" || err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("--router-tenant-weights: %q is not name=weight with a positive weight", part)
		}
		out[strings.TrimSpace(name)] = v
	}
	return out, nil
}

func (q Queue) validate() error {
	if _, err := q.weights(); err != nil {
		return err
	}
	if !(q.SessionAffinityTTLSecs >= 0 && q.SessionAffinityTTLSecs <= 31_536_000) {
		return fmt.Errorf("--router-session-affinity-ttl-secs %v out of [0, 31536000]", q.SessionAffinityTTLSecs)
	}
	if q.SessionAffinityTTLSecs > 0 && q.SessionAffinityTTLSecs < 1 {
		return fmt.Errorf("--router-session-affinity-ttl-secs %v: at least 1 when on", q.SessionAffinityTTLSecs)
	}
	if !(q.TenantBurstCredit >= 0) || math.IsInf(q.TenantBurstCredit, 0) {
		return fmt.Errorf("--router-tenant-burst-credit %v: must be finite and >= 0", q.TenantBurstCredit)
	}
	if q.StaggerGap.Gap < 0 || q.StaggerMaxHold < 0 {
		return fmt.Errorf("--router-queue-stagger-gap %v, --router-queue-stagger-max-hold %v: must be >= 0", q.StaggerGap, q.StaggerMaxHold)
	}
	return nil
}

// thresholds are the queue's saturation thresholds.
func (q Queue) thresholds() scheduler.Thresholds {
	return scheduler.Thresholds{ActivePrefillTokensThresholdFrac: q.Threshold, ActivePrefillTokensThreshold: q.PrefillTokens,
		ActiveDecodeBlocksThreshold: q.KVThreshold}
}

func (q Queue) admission() admission.Config {
	a := admission.DefaultConfig()
	a.Policy = admission.Policy(q.Policy)
	a.MaxLen = q.MaxLen
	a.AgingTokensPerSecond = q.AgingTokensPerSec
	a.TenantInFlight = q.TenantMaxInFlight
	a.TTFTTarget = q.TTFTTarget
	a.Weights, _ = q.weights()
	a.BurstCredit = q.TenantBurstCredit
	a.StaggerGap, a.StaggerAuto, a.StaggerMaxHold = q.StaggerGap.Gap, q.StaggerGap.Auto, q.StaggerMaxHold
	return a
}

// apply writes the queue's options into the front door's config.
func (q Queue) apply(fc *frontend.Config) {
	fc.Queue.Thresholds = q.thresholds()
	fc.Queue.Admission = q.admission()
	fc.Queue.Timeout = q.Timeout
	fc.Queue.TenantHeader = q.TenantHeader
	fc.SessionTTL = time.Duration(q.SessionAffinityTTLSecs * float64(time.Second))
}

// simQueue is the simulator's queue model, nil when the queue is off.
func (q Queue) simQueue() *sim.QueueConfig {
	th := q.thresholds()
	if !th.On() && q.TenantMaxInFlight == 0 {
		return nil
	}
	return &sim.QueueConfig{Thresholds: th, Admission: q.admission(), Timeout: q.Timeout}
}

// bindSim registers the queue flags that the simulator models.
func (q *Queue) bindSim(fs *flag.FlagSet) {
	all := flag.NewFlagSet("queue", flag.ContinueOnError)
	q.bind(all)
	for _, name := range []string{"router-queue-threshold", "router-queue-prefill-tokens", "router-queue-kv-threshold",
		"router-queue-policy", "router-queue-max-len", "router-queue-timeout", "router-queue-wspt-aging",
		"router-queue-ttft-target", "router-queue-stagger-gap", "router-queue-stagger-max-hold",
		"router-tenant-weights", "router-tenant-max-in-flight", "router-tenant-burst-credit"} {
		f := all.Lookup(name)
		fs.Var(f.Value, f.Name, f.Usage)
	}
}

// SimConfig is the simulated fleet with the admission queue modelled
// when its flags turn it on.
func (s *Sim) SimConfig() sim.Config {
	c := s.Sim
	c.Queue = s.Queue.simQueue()
	return c
}

// bindSimThresholds registers the router's busy thresholds for the
// simulator (reject-on-busy runs): the same names as serve's, and
// Dynamo's fraction of max batched tokens.
func bindSimThresholds(fs *flag.FlagSet, s *scheduler.Config) {
	fs.Float64Var(&s.ActiveDecodeBlocksThreshold, "active-decode-blocks-threshold", s.ActiveDecodeBlocksThreshold, "refuse (503) when every worker holds more than this fraction of its KV capacity (0: off)")
	fs.IntVar(&s.ActivePrefillTokensThreshold, "active-prefill-tokens-threshold", s.ActivePrefillTokensThreshold, "refuse (503) when every worker has more than this many prefill tokens pending (0: off)")
	fs.Float64Var(&s.ActivePrefillTokensThresholdFrac, "active-prefill-tokens-threshold-frac", s.ActivePrefillTokensThresholdFrac, "refuse (503) when every worker has more than this × its max batched tokens of prefill pending (0: off)")
}

// StaggerGap is --router-queue-stagger-gap: a duration (0 is off) or
// "auto", the gap worked out for each held request.
type StaggerGap struct {
	// Auto is "auto" (Gap is 0 then).
	Auto bool
	// Gap is the fixed gap.
	Gap time.Duration
}

var _ flag.Value = (*StaggerGap)(nil)

// String is the flag's text: "auto" or the duration.
func (g *StaggerGap) String() string {
	if g.Auto {
		return "auto"
	}
	return g.Gap.String()
}

// Set parses "auto" or a duration of at least 0.
func (g *StaggerGap) Set(s string) error {
	if strings.TrimSpace(s) == "auto" {
		*g = StaggerGap{Auto: true}
		return nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < 0 {
		return fmt.Errorf("%q is neither auto nor a duration of at least 0", s)
	}
	*g = StaggerGap{Gap: d}
	return nil
}
