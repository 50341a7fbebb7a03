package frontend

import (
	"errors"
	"fmt"
	"time"
)

// Config configures the front door. Every field has a documented unit and
// default; DefaultConfig returns them and Validate checks a Config once.
type Config struct {
	// Model is the model name served on /v1/models and accepted in the
	// "model" field of requests; requests naming another model get 404
	// model_not_found. An empty "model" in a request means this one.
	// Default "Qwen/Qwen3-0.6B".
	Model string
	// Aliases are further model names accepted as Model. Default none.
	Aliases []string
	// MaxBodyBytes caps a request body, in bytes; larger bodies get 413
	// before they are read in full. Default 32 MiB.
	MaxBodyBytes int64
	// MaxPromptTokens caps the prompt length in tokens (413 above it); 0
	// means no limit. Default 131072.
	MaxPromptTokens int
	// MaxOutputTokens caps a request's max_tokens and
	// max_completion_tokens: a value below 1 or above it is refused with
	// 400 before the request is routed. In [1, 2^30]. Default 131072.
	MaxOutputTokens int
	// TokenizeConcurrency bounds how many large prompts (of at least
	// 64 KiB of text) are tokenized at once; 0 means GOMAXPROCS at
	// start. Smaller prompts are never queued. Default 0.
	TokenizeConcurrency int
	// TokenizeQueueTimeout bounds a large prompt's wait for a
	// tokenization slot; past it the request gets 503 with Retry-After.
	// Default 5 s.
	TokenizeQueueTimeout time.Duration
	// ForwardTokenIDs sends /v1/completions requests to workers with the
	// router's token ids as "prompt" instead of the original text, so the
	// worker cannot tokenize differently from the router. Default false.
	ForwardTokenIDs bool
	// MaxRetries is how many other workers a request is retried on when
	// the chosen one fails before its first response byte (connection
	// refused, 5xx). Default 2.
	MaxRetries int
	// DialTimeout bounds connecting to a worker. Default 2 s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a worker's response
	// headers; 0 waits as long as the client does (non-streaming
	// responses arrive only when generation ends). Default 0.
	ResponseHeaderTimeout time.Duration
	// StreamIdleTimeout bounds each silence of a worker once the request
	// is sent: from the response headers to the first body byte, between
	// two body chunks and, for streaming requests ("stream": true), the
	// wait for the headers too (a worker sends a stream's headers at
	// once). On expiry the upstream request is cancelled and the booking
	// freed; the client gets 504 worker_timeout when nothing was sent to
	// it yet, else an SSE error event (streams) or an aborted connection
	// (a body cut short). Not retried on another worker. The wait for a
	// non-streaming response's headers (the whole generation) is
	// ResponseHeaderTimeout's. 0 disables. Default 60 s.
	StreamIdleTimeout time.Duration
	// MaxIdleConnsPerWorker is the keep-alive pool size per worker.
	// Default 256.
	MaxIdleConnsPerWorker int
	// RetryAfter is the Retry-After sent with 503 when every worker is
	// overloaded, rounded up to whole seconds. Default 1 s.
	RetryAfter time.Duration
	// APIKeys, when not empty, are the bearer tokens accepted on the
	// OpenAI endpoints (/v1/completions, /v1/chat/completions,
	// /v1/models). Admin keys are accepted there too. Default none (open).
	APIKeys []string
	// AdminKeys, when not empty, are the bearer tokens accepted on the
	// admin endpoints (/v1/route, /v1/query, /v1/workers, /metrics and
	// the status page). Default none (open).
	AdminKeys []string
	// RecentDecisions is how many routing decisions the status page keeps
	// (a ring). Default 50.
	RecentDecisions int
	// StatusRefresh is how often the status page fetches its data.
	// Default 5 s.
	StatusRefresh time.Duration
	// UsageCaptureBytes caps how much of a non-streaming response body is
	// kept to read usage.prompt_tokens_details.cached_tokens from, in
	// bytes; larger bodies pass through without the accuracy signal.
	// Default 1 MiB.
	UsageCaptureBytes int
	// ShutdownTimeout bounds how long Server.Shutdown waits for in-flight
	// requests (streams included) before closing them. Default 30 s.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout bounds reading a client's request headers.
	// Default 10 s.
	ReadHeaderTimeout time.Duration
	// BodyReadTimeout bounds reading a client's request body, so that a
	// client trickling its body cannot hold a handler; 0 is no bound.
	// Default 60 s.
	BodyReadTimeout time.Duration
	// WriteTimeout bounds each write (and flush) to a client: one SSE event
	// or body chunk must reach a client within it, else the client is
	// treated as gone (the upstream request is cancelled and the booking
	// freed), so a slow reader cannot pin a worker; 0 is no bound.
	// Default 30 s.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive client connection idle this long.
	// Default 120 s.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's header size in bytes. Default
	// 1048576 (1 MiB).
	MaxHeaderBytes int
	// PD configures disaggregated prefill/decode serving (pd.go).
	PD PDConfig
	// Queue configures the admission queue (queue.go); off unless its
	// thresholds or a tenant cap are set.
	Queue QueueConfig
	// SessionTTL turns session affinity on (session.go): requests naming
	// a session (X-Session-ID, or X-Dynamo-Session-ID) go to the worker
	// rank the session's last request went to, unless it is saturated or
	// gone, for this long after that request. 0 is off. Default 0.
	SessionTTL time.Duration
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Model:                 "Qwen/Qwen3-0.6B",
		MaxBodyBytes:          32 << 20,
		MaxPromptTokens:       131072,
		MaxOutputTokens:       131072,
		TokenizeQueueTimeout:  5 * time.Second,
		MaxRetries:            2,
		DialTimeout:           2 * time.Second,
		StreamIdleTimeout:     60 * time.Second,
		MaxIdleConnsPerWorker: 256,
		RetryAfter:            time.Second,
		RecentDecisions:       50,
		StatusRefresh:         5 * time.Second,
		UsageCaptureBytes:     1 << 20,
		ShutdownTimeout:       30 * time.Second,
		ReadHeaderTimeout:     10 * time.Second,
		BodyReadTimeout:       60 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           120 * time.Second,
		MaxHeaderBytes:        1 << 20,
		PD:                    DefaultPDConfig(),
		Queue:                 DefaultQueueConfig(),
	}
}

// ErrConfig wraps every configuration error Validate reports.
var ErrConfig = errors.New("invalid frontend config")

// Validate reports the first invalid field.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	switch {
	case c.Model == "":
		return bad("model name is empty")
	case c.MaxBodyBytes <= 0:
		return bad("max body bytes %d must be positive", c.MaxBodyBytes)
	case c.MaxPromptTokens < 0:
		return bad("max prompt tokens %d is negative", c.MaxPromptTokens)
	case c.MaxOutputTokens < 1 || c.MaxOutputTokens > 1<<30:
		return bad("max output tokens %d out of [1, 2^30]", c.MaxOutputTokens)
	case c.TokenizeConcurrency < 0:
		return bad("tokenize concurrency %d is negative", c.TokenizeConcurrency)
	case c.TokenizeQueueTimeout <= 0:
		return bad("tokenize queue timeout %v must be positive", c.TokenizeQueueTimeout)
	case c.MaxRetries < 0 || c.MaxRetries > 16:
		return bad("max retries %d out of [0, 16]", c.MaxRetries)
	case c.DialTimeout <= 0:
		return bad("dial timeout %v must be positive", c.DialTimeout)
	case c.ResponseHeaderTimeout < 0:
		return bad("response header timeout %v is negative", c.ResponseHeaderTimeout)
	case c.StreamIdleTimeout < 0:
		return bad("stream idle timeout %v is negative", c.StreamIdleTimeout)
	case c.MaxIdleConnsPerWorker < 0:
		return bad("max idle conns per worker %d is negative", c.MaxIdleConnsPerWorker)
	case c.RetryAfter <= 0:
		return bad("retry-after %v must be positive", c.RetryAfter)
	case c.RecentDecisions < 0 || c.RecentDecisions > 10000:
		return bad("recent decisions %d out of [0, 10000]", c.RecentDecisions)
	case c.StatusRefresh < time.Second:
		return bad("status refresh %v must be at least 1s", c.StatusRefresh)
	case c.UsageCaptureBytes < 0:
		return bad("usage capture bytes %d is negative", c.UsageCaptureBytes)
	case c.ShutdownTimeout <= 0:
		return bad("shutdown timeout %v must be positive", c.ShutdownTimeout)
	case c.ReadHeaderTimeout <= 0:
		return bad("read header timeout %v must be positive", c.ReadHeaderTimeout)
	case c.BodyReadTimeout < 0:
		return bad("body read timeout %v is negative", c.BodyReadTimeout)
	case c.WriteTimeout < 0:
		return bad("write timeout %v is negative", c.WriteTimeout)
	case c.IdleTimeout <= 0:
		return bad("idle timeout %v must be positive", c.IdleTimeout)
	case c.MaxHeaderBytes < 4096 || c.MaxHeaderBytes > 64<<20:
		return bad("max header bytes %d out of [4096, 67108864]", c.MaxHeaderBytes)
	}
	if err := c.PD.validate(); err != nil {
		return err
	}
	if err := c.Queue.validate(); err != nil {
		return err
	}
	if c.SessionTTL < 0 || c.SessionTTL > 365*24*time.Hour {
		return bad("session ttl %v out of [0, 1 year]", c.SessionTTL)
	}
	for i, a := range c.Aliases {
		if a == "" || a == c.Model {
			return bad("alias %d (%q) is empty or the model name", i, a)
		}
	}
	for i, k := range c.APIKeys {
		if k == "" {
			return bad("api key %d is empty", i)
		}
	}
	for i, k := range c.AdminKeys {
		if k == "" {
			return bad("admin key %d is empty", i)
		}
	}
	return nil
}
