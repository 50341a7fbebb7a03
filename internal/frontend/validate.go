package frontend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// fieldError is a client error about one field of a request body: the
// 400's param names the field and code says what is wrong with it, as in
// OpenAI's own answers (invalid_type, integer_below_min_value,
// integer_above_max_value). It matches ErrBadRequest.
type fieldError struct {
	param, code, msg string
}

func (e *fieldError) Error() string { return e.msg }

// Is makes a fieldError match ErrBadRequest.
func (e *fieldError) Is(target error) bool { return target == ErrBadRequest }

// Field error codes.
const (
	codeInvalidType = "invalid_type"
	codeBelowMin    = "integer_below_min_value"
	codeAboveMax    = "integer_above_max_value"
)

func badType(param, want string) error {
	return &fieldError{param: param, code: codeInvalidType,
		msg: fmt.Sprintf("invalid type for '%s': expected %s", param, want)}
}

// maxChoices bounds n, the number of choices a request asks for (OpenAI's
// own limit): beyond it a request books one worker for an amount of
// generation the router cannot estimate.
const maxChoices = 128

// decodeInt reads an optional JSON integer field: nil for null, a
// fieldError for anything but an integer in int's range.
func decodeInt(param string, val []byte) (*int, error) {
	val = bytes.TrimSpace(val)
	if string(val) == "null" {
		return nil, nil
	}
	v, err := strconv.ParseInt(string(val), 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			if val[0] == '-' {
				return nil, &fieldError{param: param, code: codeBelowMin, msg: fmt.Sprintf("invalid '%s': %s is not a usable integer", param, val)}
			}
			return nil, &fieldError{param: param, code: codeAboveMax, msg: fmt.Sprintf("invalid '%s': %s is not a usable integer", param, val)}
		}
		return nil, badType(param, "an integer")
	}
	n := int(v)
	return &n, nil
}

// checkRange refuses an integer field outside [lo, hi].
func checkRange(param string, v *int, lo, hi int) error {
	switch {
	case v == nil:
		return nil
	case *v < lo:
		return &fieldError{param: param, code: codeBelowMin,
			msg: fmt.Sprintf("invalid '%s': expected a value >= %d, got %d", param, lo, *v)}
	case *v > hi:
		return &fieldError{param: param, code: codeAboveMax,
			msg: fmt.Sprintf("invalid '%s': expected a value <= %d, got %d", param, hi, *v)}
	}
	return nil
}

// checkFields judges what the router can judge of a request's sampling
// fields before it is routed and booked: max_tokens and
// max_completion_tokens in [1, maxOutput], n in [1, maxChoices].
func (p *promptParser) checkFields(f *requestFields) error {
	if err := checkRange("max_tokens", f.MaxTokens, 1, p.maxOutput); err != nil {
		return err
	}
	if err := checkRange("max_completion_tokens", f.MaxCompletionTokens, 1, p.maxOutput); err != nil {
		return err
	}
	if err := checkSalt(f.CacheSalt); err != nil {
		return err
	}
	return checkRange("n", f.N, 1, maxChoices)
}

// maxCacheSalt bounds cache_salt: it is hashed on every request.
const maxCacheSalt = 1024

// checkSalt refuses a cache_salt that is given but empty (vLLM refuses it
// too: "must be a non-empty string if provided") or longer than
// maxCacheSalt bytes.
func checkSalt(s *string) error {
	switch {
	case s == nil:
		return nil
	case *s == "":
		return &fieldError{param: "cache_salt", code: codeInvalidType, msg: "invalid 'cache_salt': must be a non-empty string if provided"}
	case len(*s) > maxCacheSalt:
		return &fieldError{param: "cache_salt", code: codeInvalidType, msg: fmt.Sprintf("invalid 'cache_salt': longer than %d bytes", maxCacheSalt)}
	}
	return nil
}

// salt is a checked cache_salt's value ("" when absent).
func salt(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// clientMessage is err's text for a client: without the sentinel's own
// text, which the wrapping appends (": bad request").
func clientMessage(err, sentinel error) string {
	return strings.TrimSuffix(err.Error(), ": "+sentinel.Error())
}

// jsonTypeError turns encoding/json's type error into a fieldError naming
// the field (not the Go type it was decoded into).
func jsonTypeError(err error) (error, bool) {
	var ute *json.UnmarshalTypeError
	if !errors.As(err, &ute) || ute.Field == "" {
		return nil, false
	}
	want := "a value of another type"
	switch ute.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "an integer"
		if ute.Value == "number" {
			// An integer out of range, or a fraction.
			return &fieldError{param: ute.Field, code: codeInvalidType,
				msg: fmt.Sprintf("invalid '%s': expected an integer in range", ute.Field)}, true
		}
	case reflect.String:
		want = "a string"
	case reflect.Bool:
		want = "a boolean"
	case reflect.Slice:
		want = "an array"
	}
	return &fieldError{param: ute.Field, code: codeInvalidType,
		msg: fmt.Sprintf("invalid type for '%s': expected %s, got %s", ute.Field, want, ute.Value)}, true
}
