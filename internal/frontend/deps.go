package frontend

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/liveindex"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
	"github.com/prometheus/client_golang/prometheus"
)

// Router is what the front door needs from the router: the one API it
// routes, books and hashes through (*router.Router, with replica sync's
// shadow booking attached to its Route when replica sync runs).
//
// Route books the request on the chosen worker rank; the front door then
// calls MarkPrefillCompleted once at the first output token, SetGenerated
// as tokens stream, and Free exactly once when the request ends for any
// reason (completion, worker error, client disconnect, retry elsewhere).
// Plan decides without booking; LocalHashes gives a prompt's block hashes
// for /v1/query. Observe feeds the worker rank's time model what a
// streamed response showed (TTFT, inter-token time, cached tokens);
// TimeModels shows the fits on the status page. Refusals are told apart with the router's sentinels
// (router.ErrNoCandidates, router.ErrAllBusy, router.ErrRequest). All
// methods must be safe for concurrent use and return quickly (no I/O).
type Router interface {
	Route(req router.Request) (router.Decision, error)
	Plan(req router.Request) (router.Decision, error)
	LocalHashes(req router.Request) ([]uint64, error)
	MarkPrefillCompleted(id string) bool
	Free(id string) bool
	SetGenerated(id string, tokens int) bool
	Loads() []router.Load
	Workers() (infos []router.WorkerInfo, down []bool)
	Config() router.Config
	Observe(w kvevent.WorkerRank, s router.Sample, now time.Time) bool
	TimeModels() []router.TimeModel
	// PrefillModel gives one rank's prefill fit for the queue's
	// deadline check (queue.go).
	PrefillModel(w kvevent.WorkerRank) (router.PrefillModel, bool)
	// PoolSaturated, WorkersSaturated and RankSaturated judge load
	// against the admission queue's thresholds (queue.go, session.go):
	// PoolSaturated one model's pool (the Request.Model naming it, ""
	// the default model; a single *router.Router is its one pool), each
	// pool having a queue of its own; WorkersSaturated the same pool
	// among the allowed workers only (every worker when allowed is
	// empty), a LoRA adapter's queue judged by the workers with the
	// adapter loaded; RankSaturated one worker rank.
	PoolSaturated(model string, t scheduler.Thresholds) bool
	WorkersSaturated(model string, t scheduler.Thresholds, allowed []kvevent.WorkerID) bool
	RankSaturated(t scheduler.Thresholds, w kvevent.WorkerRank) bool
}

var _ Router = (*router.Router)(nil)

// WorkerEntry is what the directory knows of one worker.
type WorkerEntry struct {
	// ID is the worker id the router knows it by.
	ID kvevent.WorkerID
	// Name is the operator's name for it ("w1").
	Name string
	// URL is its OpenAI server's base URL ("http://10.0.0.5:8000"),
	// without the /v1 suffix.
	URL string
	// Status is its state and reason.
	Status fleet.Status
	// LastSequence is the last KV event sequence number applied, when
	// HasSequence.
	LastSequence uint64
	// HasSequence says whether LastSequence is known.
	HasSequence bool
	// SendDPRank says the worker serves several data-parallel ranks behind
	// one URL: requests carry the chosen rank in X-Data-Parallel-Rank.
	SendDPRank bool
	// BootstrapPort is an SGLang prefill worker's KV bootstrap port (0:
	// none), sent to both hops of a disaggregated request.
	BootstrapPort int
}

// Directory maps router worker ids to where and how the workers are. The
// composition root implements it from the fleet directory. Both methods must be safe
// for concurrent use and must not block on I/O: Lookup is on every
// request's path.
type Directory interface {
	// Lookup returns the worker with this id, or false if unknown.
	Lookup(id kvevent.WorkerID) (WorkerEntry, bool)
	// List returns every known worker, in a stable order.
	List() []WorkerEntry
}

// FailureReporter is optionally implemented by a Directory to learn that
// a worker failed before its first response byte (reason: connect,
// status_5xx, read), so that discovery can probe it or mark it DOWN; the
// front door itself only retries the request elsewhere. Called on the
// request's goroutine: it must not block.
type FailureReporter interface {
	WorkerFailed(id kvevent.WorkerID, reason string, err error)
}

// Tokenizer turns prompt text into token ids; *tokenizer.Tokenizer
// satisfies it. It must be safe for concurrent use.
type Tokenizer interface {
	Encode(text string, addSpecialTokens bool) []uint32
}

var _ Tokenizer = (*tokenizer.Tokenizer)(nil)

// limitedEncoder is optionally implemented by a Tokenizer: EncodeLimit
// stops as soon as the text has more than limit tokens (ok false), so a
// prompt far over MaxPromptTokens costs the work of the limit, not of the
// prompt.
type limitedEncoder interface {
	EncodeLimit(text string, addSpecialTokens bool, limit int) (ids []uint32, ok bool)
}

var _ limitedEncoder = (*tokenizer.Tokenizer)(nil)

// vocabulary is optionally implemented by a Tokenizer; the front door then
// knows the longest token in bytes and refuses prompts that cannot fit
// MaxPromptTokens before tokenizing them.
type vocabulary interface {
	VocabSize() int
	IDToToken(id uint32) (string, bool)
}

var _ vocabulary = (*tokenizer.Tokenizer)(nil)

// ChatTemplate renders an OpenAI conversation into the model's prompt
// text; *chattemplate.Template satisfies it. It must be safe for
// concurrent use.
type ChatTemplate interface {
	Render(messages, tools json.RawMessage, opts chattemplate.Options) (string, error)
}

var _ ChatTemplate = (*chattemplate.Template)(nil)

// Index answers /v1/query: every worker rank's leading overlap with a list
// of local block hashes, per tier. *liveindex.Index satisfies it (and
// also reports each rank's indexed block count). It must be safe for
// concurrent use.
type Index interface {
	Query(local []uint64, dst *index.Scores)
}

// indexedCounter is optionally implemented by an Index: the number of
// blocks a worker rank has indexed, shown by /v1/workers.
type indexedCounter interface {
	Indexed(w kvevent.WorkerRank) int
}

var (
	_ Index          = (*liveindex.Index)(nil)
	_ indexedCounter = (*liveindex.Index)(nil)
)

// Deps are the front door's collaborators, wired by the composition root.
type Deps struct {
	// Router decides and books; required.
	Router Router
	// Directory names workers and gives their URLs; required.
	Directory Directory
	// Tokenizer encodes prompts; required.
	Tokenizer Tokenizer
	// ChatTemplate renders chat requests; required.
	ChatTemplate ChatTemplate
	// Index answers /v1/query directly; nil makes /v1/query use the
	// router's Plan (and refuse "block_hashes").
	Index Index
	// Models describes the models besides Config.Model (see Models); nil
	// serves Config.Model alone.
	Models Models
	// Registry receives the front door's metrics; nil means a fresh one
	// (never the global registry). /metrics serves this registry.
	Registry *prometheus.Registry
	// Logger receives logs; nil means slog.Default().
	Logger *slog.Logger
	// Clock is the time source; nil means time.Now.
	Clock func() time.Time
	// Ready reports readiness for /ready (nil error = ready); nil means
	// always ready.
	Ready func() error
}
