package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/prometheus/client_golang/prometheus"
)

// Config describes one mock worker process (one HTTP server, one or more
// data-parallel engine ranks).
type Config struct {
	// Model is the model path or name (--model). Default "Qwen/Qwen3-0.6B".
	Model string
	// ServedModelName is the name clients use; empty means Model
	// (--served-model-name).
	ServedModelName string
	// LoRAAdapters are the LoRA adapters the worker has loaded
	// (--lora-adapters): listed on /v1/models with the served model as
	// parent, accepted as a request's model, their blocks hashed apart
	// and their KV events carrying the adapter's name. Default none.
	LoRAAdapters []string
	// Engine configures every rank's engine core.
	Engine mocker.Config
	// DataParallelSize is the number of engine ranks (--data-parallel-size).
	// Default 1.
	DataParallelSize int
	// WorkerID identifies the worker in its KV events. Default 0.
	WorkerID uint64
	// MaxModelLen caps prompt + max_tokens, in tokens (--max-model-len); 0
	// means what one rank's KV cache can hold.
	MaxModelLen int
	// MaxBodyBytes limits a request body. Default 32 MiB.
	MaxBodyBytes int64
	// Tokenizer encodes prompts; nil means WordTokenizer.
	Tokenizer Tokenizer
	// ChatTemplate renders chat requests as vLLM's server would (the
	// model's Jinja template, tools and enable_thinking included); nil
	// means a plain ChatML rendering of the messages' text. Give it the
	// router's template so both sides count the same prompt tokens.
	ChatTemplate ChatTemplate
	// Registry receives the worker's metrics; nil means a fresh registry
	// (never the global one).
	Registry *prometheus.Registry
	// Logger receives the worker's logs; nil means slog.Default().
	Logger *slog.Logger
	// Sinks receive every rank's event batches (after fault injection),
	// e.g. a ZMQ publisher. The local indexer is always fed, before faults.
	Sinks []EventSink
	// Faults injects failures for reliability tests.
	Faults Faults
	// Disagg is the worker's part in disaggregated serving (pd.go).
	Disagg Disagg
}

// Faults are the failure-injection knobs (all off by default).
type Faults struct {
	// DropEvents is the probability in [0, 1] that an event batch is not
	// delivered to the sinks (a ZMQ publisher still buffers it for replay,
	// so the consumer sees a gap it can repair).
	DropEvents float64
	// DuplicateEvents is the probability in [0, 1] that a batch is
	// delivered twice.
	DuplicateEvents float64
	// DelayEvents delays every batch delivered to the sinks.
	DelayEvents time.Duration
	// RestartEventsEvery restarts the event sequence (as an engine restart
	// would) every N batches; 0 never.
	RestartEventsEvery int
	// CrashAfter makes the worker stop abruptly (listener and connections
	// closed, Serve returns ErrCrashed) once N requests have completed; 0
	// never.
	CrashAfter int
	// Seed seeds the fault dice.
	Seed uint64
}

// DefaultConfig returns a worker with a default engine.
func DefaultConfig() Config {
	return Config{
		Model:            "Qwen/Qwen3-0.6B",
		Engine:           mocker.DefaultConfig(),
		DataParallelSize: 1,
		MaxBodyBytes:     32 << 20,
		Disagg:           DefaultDisagg(),
	}
}

// ErrConfig wraps every validation failure of Config.
var ErrConfig = errors.New("invalid mock worker config")

// Validate checks the configuration once.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	if err := c.Engine.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := c.Disagg.normal().validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	seen := map[string]bool{c.servedName(): true}
	for _, a := range c.LoRAAdapters {
		if a == "" || len(a) > 256 || seen[a] {
			return bad("LoRA adapter %q: empty, longer than 256 bytes, repeated or the served model's name", a)
		}
		seen[a] = true
	}
	switch {
	case c.Model == "":
		return bad("model name is empty")
	case c.DataParallelSize < 1 || c.DataParallelSize > 1024:
		return bad("data parallel size %d out of range [1, 1024]", c.DataParallelSize)
	case c.MaxModelLen < 0:
		return bad("max model len %d is negative", c.MaxModelLen)
	case c.MaxBodyBytes <= 0:
		return bad("max body bytes %d must be positive", c.MaxBodyBytes)
	case !(c.Faults.DropEvents >= 0 && c.Faults.DropEvents <= 1):
		return bad("drop-events probability %v out of [0, 1]", c.Faults.DropEvents)
	case !(c.Faults.DuplicateEvents >= 0 && c.Faults.DuplicateEvents <= 1):
		return bad("duplicate-events probability %v out of [0, 1]", c.Faults.DuplicateEvents)
	case c.Faults.DelayEvents < 0 || c.Faults.RestartEventsEvery < 0 || c.Faults.CrashAfter < 0:
		return bad("negative fault setting")
	}
	return nil
}

// adapter reports whether name is one of the loaded LoRA adapters.
func (c Config) adapter(name string) bool {
	for _, a := range c.LoRAAdapters {
		if a == name {
			return true
		}
	}
	return false
}

func (c Config) servedName() string {
	if c.ServedModelName != "" {
		return c.ServedModelName
	}
	return c.Model
}

// maxModelLen is the context limit: MaxModelLen, or what one rank's KV
// cache holds above the admission watermark.
func (c Config) maxModelLen() int {
	capTokens := (c.Engine.NumGPUBlocks - int(c.Engine.Watermark*float64(c.Engine.NumGPUBlocks))) * c.Engine.BlockSize
	if c.MaxModelLen > 0 {
		return min(c.MaxModelLen, capTokens)
	}
	return capTokens
}

// ChatTemplate renders an OpenAI conversation (messages and tools as raw
// JSON, in their key order) into the model's prompt text;
// *chattemplate.Template satisfies it. It must be safe for concurrent use.
type ChatTemplate interface {
	Render(messages, tools json.RawMessage, opts chattemplate.Options) (string, error)
}

var _ ChatTemplate = (*chattemplate.Template)(nil)
