package recovery

import (
	"crypto/rand"
	"encoding/binary"
)

// NewPublisherID returns a fresh random publisher id for a process that
// publishes events: 53 bits, so it survives JSON (Dynamo masks its ids the
// same way), and never 0, which means "unknown" in a Reply.
func NewPublisherID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return max(binary.LittleEndian.Uint64(b[:])&(1<<53-1), 1)
}
