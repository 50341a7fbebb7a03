package workload

import (
	"flag"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/trace"
)

// Workload kinds accepted by Options.Kind.
const (
	// KindTrace replays a Mooncake trace (Options.Trace).
	KindTrace = "trace"
	// KindPrefixRatio is Dynamo's prefix-ratio benchmark.
	KindPrefixRatio = "prefix-ratio"
	// KindSharedPrefix is SGLang's generated-shared-prefix benchmark.
	KindSharedPrefix = "shared-prefix"
	// KindMultiTurn is multi-turn conversations.
	KindMultiTurn = "multi-turn"
)

// Kinds lists the workload kinds.
var Kinds = []string{KindTrace, KindPrefixRatio, KindSharedPrefix, KindMultiTurn}

// Options selects and configures one workload from command-line flags, so
// `kvrouter sim` and `kvrouter bench` accept the same workload flags.
type Options struct {
	// Kind is one of Kinds. Default KindTrace.
	Kind string
	// Trace is an embedded trace name (trace.Embedded) or a JSONL file path,
	// plain or gzipped. Default "conversation".
	Trace string
	// Seed, when non-negative, replaces the chosen generator's seed.
	// Default -1 (each generator's own default).
	Seed int64
	// Mooncake configures trace replay.
	Mooncake MooncakeConfig
	// PrefixRatio configures KindPrefixRatio.
	PrefixRatio PrefixRatioConfig
	// SharedPrefix configures KindSharedPrefix.
	SharedPrefix SharedPrefixConfig
	// MultiTurn configures KindMultiTurn.
	MultiTurn MultiTurnConfig

	rows []trace.Request // loaded trace, kept for later Opens
}

// DefaultOptions returns every generator's defaults and the conversation
// trace.
func DefaultOptions() Options {
	return Options{Kind: KindTrace, Trace: "conversation", Seed: -1, Mooncake: DefaultMooncakeConfig(),
		PrefixRatio: DefaultPrefixRatioConfig(), SharedPrefix: DefaultSharedPrefixConfig(), MultiTurn: DefaultMultiTurnConfig()}
}

// RegisterFlags defines the workload flags on fs, with o's current values
// as defaults. Names follow the original tools: Dynamo's for prefix-ratio
// (--isl, --osl, --requests, --concurrency, --num-prefix-prompts,
// --prefix-ratio), SGLang's --gsp-* and --request-rate, --max-concurrency.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Kind, "workload", o.Kind, "workload kind: trace | prefix-ratio | shared-prefix | multi-turn")
	fs.StringVar(&o.Trace, "trace", o.Trace, "Mooncake trace: embedded name (conversation, synthetic) or JSONL file (plain or .gz)")
	fs.Int64Var(&o.Seed, "workload-seed", o.Seed, "seed of the workload's random draws (-1: the generator's default)")

	m := &o.Mooncake
	fs.Float64Var(&m.Speedup, "speedup", m.Speedup, "trace: divide arrival times by this factor")
	fs.BoolVar(&m.Spread, "spread-bursts", m.Spread, "trace: spread each timestamp bucket's requests uniformly over the bucket")
	fs.DurationVar(&m.Bucket, "burst-bucket", m.Bucket, "trace: width of a timestamp bucket, for --spread-bursts")
	fs.IntVar(&m.Limit, "trace-limit", m.Limit, "trace: replay only the first N requests (0: all)")

	p := &o.PrefixRatio
	fs.IntVar(&p.ISL, "isl", p.ISL, "prefix-ratio: input sequence length (tokens)")
	fs.IntVar(&p.OSL, "osl", p.OSL, "prefix-ratio: mean output sequence length (tokens)")
	fs.IntVar(&p.Requests, "requests", p.Requests, "prefix-ratio: number of requests")
	fs.IntVar(&p.Concurrency, "concurrency", p.Concurrency, "prefix-ratio: requests in flight (closed loop)")
	fs.IntVar(&p.NumPrefixPrompts, "num-prefix-prompts", p.NumPrefixPrompts, "prefix-ratio: number of shared prefixes")
	fs.Float64Var(&p.PrefixRatio, "prefix-ratio", p.PrefixRatio, "prefix-ratio: shared fraction of the input, in [0, 1]")

	g := &o.SharedPrefix
	fs.IntVar(&g.NumGroups, "gsp-num-groups", g.NumGroups, "shared-prefix: number of system prompts")
	fs.IntVar(&g.PromptsPerGroup, "gsp-prompts-per-group", g.PromptsPerGroup, "shared-prefix: questions per system prompt")
	fs.IntVar(&g.SystemPromptLen, "gsp-system-prompt-len", g.SystemPromptLen, "shared-prefix: system prompt length (tokens)")
	fs.IntVar(&g.QuestionLen, "gsp-question-len", g.QuestionLen, "shared-prefix: question length (tokens)")
	fs.IntVar(&g.OutputLen, "gsp-output-len", g.OutputLen, "shared-prefix: output length (tokens)")
	fs.Float64Var(&g.RangeRatio, "gsp-range-ratio", g.RangeRatio, "shared-prefix: lengths drawn from [L·ratio, L]")
	fs.IntVar(&g.NumTurns, "gsp-num-turns", g.NumTurns, "shared-prefix: turns (only 1; use --workload multi-turn)")
	fs.BoolVar(&g.Ordered, "gsp-ordered", g.Ordered, "shared-prefix: keep groups together instead of shuffling")
	fs.Float64Var(&g.RequestRate, "request-rate", g.RequestRate, "shared-prefix: Poisson arrival rate, requests/s (inf: all at once)")
	fs.IntVar(&g.MaxConcurrency, "max-concurrency", g.MaxConcurrency, "shared-prefix: cap on requests in flight (0: none)")

	t := &o.MultiTurn
	fs.IntVar(&t.Sessions, "mt-sessions", t.Sessions, "multi-turn: number of conversations")
	fs.IntVar(&t.Turns, "mt-turns", t.Turns, "multi-turn: requests per conversation")
	fs.IntVar(&t.SystemPrompts, "mt-system-prompts", t.SystemPrompts, "multi-turn: distinct system prompts")
	fs.IntVar(&t.SystemPromptLen, "mt-system-prompt-len", t.SystemPromptLen, "multi-turn: system prompt length (tokens)")
	fs.IntVar(&t.UserLen, "mt-user-len", t.UserLen, "multi-turn: user message length (tokens)")
	fs.IntVar(&t.OutputLen, "mt-output-len", t.OutputLen, "multi-turn: answer length (tokens)")
	fs.Float64Var(&t.RangeRatio, "mt-range-ratio", t.RangeRatio, "multi-turn: lengths drawn from [L·ratio, L]")
	fs.Float64Var(&t.SessionRate, "mt-session-rate", t.SessionRate, "multi-turn: new conversations per second (Poisson; inf: all at once)")
	fs.DurationVar(&t.ThinkTime, "mt-think-time", t.ThinkTime, "multi-turn: gap between a conversation's turns")
}

// Name describes the workload for reports, e.g. "trace conversation ×2".
func (o *Options) Name() string {
	switch o.Kind {
	case KindTrace:
		s := fmt.Sprintf("trace %s ×%g", o.Trace, o.Mooncake.Speedup)
		if o.Mooncake.Spread {
			s += " spread"
		}
		return s
	case KindPrefixRatio:
		return fmt.Sprintf("prefix-ratio %.2f", o.PrefixRatio.PrefixRatio)
	default:
		return o.Kind
	}
}

// Open builds a fresh source (call it again to replay the same workload,
// once per policy and once for the bound). A trace is read on the first call
// and kept.
func (o *Options) Open() (Source, error) {
	seed := func(def uint64) uint64 {
		if o.Seed >= 0 {
			return uint64(o.Seed)
		}
		return def
	}
	switch o.Kind {
	case KindTrace:
		if o.rows == nil {
			rows, err := trace.Load(o.Trace)
			if err != nil {
				return nil, fmt.Errorf("loading workload: %w", err)
			}
			o.rows = rows
		}
		c := o.Mooncake
		c.Seed = seed(c.Seed)
		return NewMooncake(o.rows, c)
	case KindPrefixRatio:
		c := o.PrefixRatio
		c.Seed = seed(c.Seed)
		return NewPrefixRatio(c)
	case KindSharedPrefix:
		c := o.SharedPrefix
		c.Seed = seed(c.Seed)
		return NewSharedPrefix(c)
	case KindMultiTurn:
		c := o.MultiTurn
		c.Seed = seed(c.Seed)
		return NewMultiTurn(c)
	}
	return nil, fmt.Errorf("%w: unknown workload %q (want one of %v)", ErrConfig, o.Kind, Kinds)
}
