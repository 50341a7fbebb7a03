package chattemplate

import "errors"

// Sentinel errors. Every error returned by this package wraps exactly one of
// them, so callers can map them to responses with errors.Is (the first three
// are the caller's fault and deserve an HTTP 400; ErrNoTemplate and
// ErrBadTemplate are configuration faults).
var (
	// ErrInvalidInput reports messages, tools or kwargs that are not valid
	// JSON of the expected shape, or that exceed the configured limits.
	ErrInvalidInput = errors.New("invalid chat template input")

	// ErrRaised reports that the template itself rejected the conversation
	// by calling raise_exception (for example an unsupported role or an
	// order of roles the model was not trained on).
	ErrRaised = errors.New("chat template raised an exception")

	// ErrRender reports any other failure while executing the template,
	// such as calling a string method on a list-valued content.
	ErrRender = errors.New("rendering chat template")

	// ErrNoTemplate reports a tokenizer_config.json without a usable
	// chat_template (absent, or no template with the requested name).
	ErrNoTemplate = errors.New("no chat template")

	// ErrBadTemplate reports a chat template that does not compile or a
	// tokenizer_config.json that cannot be parsed.
	ErrBadTemplate = errors.New("bad chat template")
)
