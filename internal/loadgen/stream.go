package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// HeaderWorker is the response header kvrouter names the serving worker
// in; responses without it are attributed to one worker named "server".
const HeaderWorker = "X-Kvrouter-Worker"

// maxLine bounds one SSE line; longer lines fail the request.
const maxLine = 1 << 20

// chunk is the part of a streamed completion or chat chunk the bench
// reads. Unknown fields are ignored; missing ones stay zero.
type chunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// tokens returns how many choices carry generated text in the chunk.
func (c *chunk) tokens() int {
	n := 0
	for _, ch := range c.Choices {
		if ch.Text != "" || ch.Delta.Content != "" || ch.Delta.ReasoningContent != "" {
			n++
		}
	}
	return n
}

// parseChunk decodes one SSE data payload. done reports the "[DONE]"
// terminator.
func parseChunk(data []byte) (c chunk, done bool, err error) {
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return c, true, nil
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, false, fmt.Errorf("decoding stream chunk: %w", err)
	}
	return c, false, nil
}

// result is what one request measured.
type result struct {
	worker    string
	ttft, e2e time.Duration
	prompt    int
	cached    int
	out       int
	err       error
	cancelled bool
}

// body builds the JSON request body.
func (g *gen) body(prompt []uint32, maxTokens int) ([]byte, error) {
	req := map[string]any{
		"model": g.cfg.Model, "max_tokens": maxTokens, "stream": true, "ignore_eos": true,
		"stream_options": map[string]bool{"include_usage": true},
	}
	switch {
	case g.cfg.API == APIChat:
		req["messages"] = []map[string]string{{"role": "user", "content": g.cfg.Text(prompt)}}
	case g.cfg.Text != nil:
		req["prompt"] = g.cfg.Text(prompt)
	default:
		req["prompt"] = prompt
	}
	return json.Marshal(req)
}

// do sends one streaming request and reads it to the end.
func (g *gen) do(ctx context.Context, prompt []uint32, maxTokens int) result {
	res := result{prompt: len(prompt)}
	b, err := g.body(prompt, maxTokens)
	if err != nil {
		res.err = err
		return res
	}
	if g.cfg.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.cfg.RequestTimeout)
		defer cancel()
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, g.endpoint, bytes.NewReader(b))
	if err != nil {
		res.err = err
		return res
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	if g.cfg.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+g.cfg.APIKey)
	}
	start := time.Now()
	resp, err := g.client.Do(hr)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	res.worker = resp.Header.Get(HeaderWorker)
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		res.err = &StatusError{Code: resp.StatusCode, Body: strings.TrimSpace(string(msg))}
		return res
	}
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	chunks, usageOut, done := 0, -1, false
	for !done {
		line, err := readLine(r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			res.err = err
			return res
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // blank separators, comments, event: lines
		}
		c, end, err := parseChunk(data)
		if err != nil {
			res.err = err
			return res
		}
		if end {
			done = true
			break
		}
		if c.Error != nil {
			res.err = fmt.Errorf("%w: %s", ErrStream, c.Error.Message)
			return res
		}
		if n := c.tokens(); n > 0 {
			if chunks == 0 {
				res.ttft = time.Since(start)
			}
			chunks += n
		}
		if u := c.Usage; u != nil {
			usageOut = u.CompletionTokens
			if u.PromptTokens > 0 {
				res.prompt = u.PromptTokens
			}
			if u.PromptTokensDetails != nil {
				res.cached = u.PromptTokensDetails.CachedTokens
			}
		}
	}
	res.e2e = time.Since(start)
	res.out = chunks
	if usageOut >= 0 {
		res.out = usageOut
	}
	if chunks == 0 {
		res.err = fmt.Errorf("%w: stream ended without a token", ErrStream)
	}
	return res
}

// readLine reads one line without its end of line, bounded by maxLine.
func readLine(r *bufio.Reader) ([]byte, error) {
	var long []byte
	for {
		frag, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long, frag...)
			if len(long) > maxLine {
				return nil, fmt.Errorf("%w: line longer than %d bytes", ErrStream, maxLine)
			}
			continue
		}
		if long != nil {
			frag = append(long, frag...)
		}
		if err != nil && (len(frag) == 0 || !errors.Is(err, io.EOF)) {
			return nil, err
		}
		return bytes.TrimRight(frag, "\r\n"), nil
	}
}

// ErrStream marks a malformed or failed response stream.
var ErrStream = errors.New("bad response stream")

// StatusError is a non-200 answer.
type StatusError struct {
	// Code is the HTTP status code.
	Code int
	// Body is the start of the response body.
	Body string
}

// Error implements error.
func (e *StatusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Code, e.Body) }
