package frontend

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// apiError is the OpenAI error body: {"error":{"message","type","param","code"}}.
type apiError struct {
	Error apiErrorInfo `json:"error"`
}

type apiErrorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Error types and codes used in error bodies.
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuth           = "authentication_error"
	typePermission     = "permission_error"
	typeNotFound       = "not_found_error"
	typeOverloaded     = "overloaded_error"
	typeUpstream       = "upstream_error"
	typeServer         = "server_error"

	codeModelNotFound = "model_not_found"
	codeTooLarge      = "request_too_large"
	codeContextLength = "context_length_exceeded"
	codeInvalidJSON   = "invalid_json"
	codeInvalidAPIKey = "invalid_api_key"
	codeOverloaded    = "all_workers_overloaded"
	codeNoWorker      = "no_worker_available"
	codePinnedBusy    = "pinned_worker_overloaded"
	codeWorkerFailed  = "worker_failed"
	codeWorkerTimeout = "worker_timeout"
	codeBodyTimeout   = "request_timeout"
	codeTokenizerBusy = "tokenizer_busy"
)

// writeError writes an OpenAI-style error body with status code.
func writeError(rw http.ResponseWriter, status int, typ, code, param, msg string) {
	e := apiError{Error: apiErrorInfo{Message: msg, Type: typ}}
	if code != "" {
		e.Error.Code = &code
	}
	if param != "" {
		e.Error.Param = &param
	}
	writeJSON(rw, status, e)
}

// writeRetryAfter sets Retry-After to d rounded up to whole seconds.
func writeRetryAfter(rw http.ResponseWriter, d time.Duration) {
	s := int((d + time.Second - 1) / time.Second)
	rw.Header().Set("Retry-After", strconv.Itoa(max(s, 1)))
}

// marshal encodes v as JSON without encoding/json's HTML escapes: an error
// message's "<key>" reads as written, not as "\u003ckey\u003e".
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// writeJSON writes v as a JSON body with status code.
func writeJSON(rw http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding response","type":"server_error","param":null,"code":null}}`)
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_, _ = rw.Write(append(b, '\n'))
}
