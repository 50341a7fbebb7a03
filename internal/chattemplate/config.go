package chattemplate

import (
	"errors"
	"fmt"
)

// Config bounds what Render accepts. The zero value is not valid; start
// from DefaultConfig.
type Config struct {
	// MaxInputBytes is the largest accepted size, in bytes, of each of the
	// messages, tools and kwargs JSON documents. Default 32 MiB.
	MaxInputBytes int

	// MaxDepth is the deepest accepted JSON nesting (objects and arrays)
	// in any input document. Default 64.
	MaxDepth int

	// MaxMessages is the largest accepted number of messages in one
	// conversation. Default 10000.
	MaxMessages int
}

// DefaultConfig returns the limits used when none are given.
func DefaultConfig() Config {
	return Config{
		MaxInputBytes: 32 << 20,
		MaxDepth:      64,
		MaxMessages:   10000,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.MaxInputBytes <= 0 {
		errs = append(errs, fmt.Errorf("MaxInputBytes must be positive, got %d", c.MaxInputBytes))
	}
	if c.MaxDepth <= 0 {
		errs = append(errs, fmt.Errorf("MaxDepth must be positive, got %d", c.MaxDepth))
	}
	if c.MaxMessages <= 0 {
		errs = append(errs, fmt.Errorf("MaxMessages must be positive, got %d", c.MaxMessages))
	}
	return errors.Join(errs...)
}
