package loadgen

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// API names accepted by Config.API.
const (
	// APICompletions posts to /v1/completions.
	APICompletions = "completions"
	// APIChat posts to /v1/chat/completions (prompts sent as text).
	APIChat = "chat"
)

// Config configures a Run.
type Config struct {
	// URL is the server's base URL, such as "http://127.0.0.1:8000".
	// Required.
	URL string
	// Model is the model name sent with every request. Default
	// "Qwen/Qwen3-0.6B".
	Model string
	// API is APICompletions or APIChat. Default APICompletions.
	API string
	// Text renders token ids as the prompt text; nil sends token ids
	// (completions only). Required for APIChat.
	Text func(ids []uint32) string
	// Concurrency, when positive, runs closed loop with this many requests
	// in flight, ignoring arrival times; 0 uses the workload's own arrival
	// times and concurrency. Default 0.
	Concurrency int
	// Duration bounds the run in wall time: no request is issued after it
	// and requests still in flight are cancelled (counted as Cancelled, not
	// failed); 0 means no limit. Default 0.
	Duration time.Duration
	// MaxRequests bounds the number of requests issued; 0 means the whole
	// workload. Default 0.
	MaxRequests int
	// MaxConns bounds the connections to the server (the client's pool).
	// Default 1024.
	MaxConns int
	// RequestTimeout bounds one request from issue to its last byte; 0
	// means none. Default 10 min.
	RequestTimeout time.Duration
	// LoadSampleEvery is the interval of the per-worker load samples.
	// Default 1 s.
	LoadSampleEvery time.Duration
	// APIKey, when set, is sent as a bearer token. Default none.
	APIKey string
}

// DefaultConfig returns the documented defaults; URL is still to be set.
func DefaultConfig() Config {
	return Config{Model: "Qwen/Qwen3-0.6B", API: APICompletions, MaxConns: 1024,
		RequestTimeout: 10 * time.Minute, LoadSampleEvery: time.Second}
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("invalid loadgen config")

// Validate reports the first invalid field.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return bad("url %q must be an http(s) base URL", c.URL)
	case c.Model == "":
		return bad("model must be set")
	case c.API != APICompletions && c.API != APIChat:
		return bad("api %q must be %s or %s", c.API, APICompletions, APIChat)
	case c.API == APIChat && c.Text == nil:
		return bad("the chat API needs text prompts")
	case c.Concurrency < 0 || c.Concurrency > 1<<20:
		return bad("concurrency %d out of range [0, 1048576]", c.Concurrency)
	case c.Duration < 0:
		return bad("duration %v must not be negative", c.Duration)
	case c.MaxRequests < 0:
		return bad("max requests %d must not be negative", c.MaxRequests)
	case c.MaxConns < 1:
		return bad("max conns %d must be at least 1", c.MaxConns)
	case c.RequestTimeout < 0:
		return bad("request timeout %v must not be negative", c.RequestTimeout)
	case c.LoadSampleEvery <= 0:
		return bad("load sample interval %v must be positive", c.LoadSampleEvery)
	}
	return nil
}
