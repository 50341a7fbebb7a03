package vllm

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/mpack"
)

// maxDepth bounds msgpack nesting. A batch is at most 5 deep in practice
// (batch, events, event, extra_keys, key tuple, MM pair); anything deeper
// is refused, so recursion never grows with the input.
const maxDepth = 16

// skip returns the offset just past the value at buf[off], checking every
// length against the bytes available and nesting against maxDepth (see
// mpack.Skip). It allocates nothing on success.
func skip(buf []byte, off int) (int, error) {
	end, err := mpack.Skip(buf, off, maxDepth)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return end, nil
}
