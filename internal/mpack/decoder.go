package mpack

import (
	"bytes"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Decoder is vmihailenco/msgpack's Decoder over a byte slice, with the
// guards that library lacks: Skip is depth-limited and checks lengths
// against the bytes present, and MapLen and ArrayLen refuse counts that
// the remaining bytes cannot hold. All other Decode methods are the
// library's own.
type Decoder struct {
	*msgpack.Decoder
	buf []byte
	r   bytes.Reader
}

// NewDecoder returns a Decoder positioned at the start of b.
func NewDecoder(b []byte) *Decoder {
	d := &Decoder{buf: b}
	d.r.Reset(b)
	// bytes.Reader is an io.ByteScanner, so the library reads it directly
	// without buffering: the reader's position is the decoder's.
	d.Decoder = msgpack.NewDecoder(&d.r)
	return d
}

// Remaining returns the number of bytes not read yet.
func (d *Decoder) Remaining() int { return d.r.Len() }

func (d *Decoder) off() int { return len(d.buf) - d.r.Len() }

// IsNil reports whether the next value is nil, consuming it if so.
func (d *Decoder) IsNil() (bool, error) {
	c, err := d.PeekCode()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		return true, d.DecodeNil()
	}
	return false, nil
}

// MapLen reads a map header; nil counts as an empty map. A count the
// remaining bytes cannot hold (every entry needs two) is ErrTruncated.
func (d *Decoder) MapLen() (int, error) {
	n, err := d.DecodeMapLen()
	if err != nil {
		return 0, err
	}
	if n > 0 && 2*n > d.Remaining() {
		return 0, fmt.Errorf("%w: map of %d entries with %d bytes left", ErrTruncated, n, d.Remaining())
	}
	return max(n, 0), nil
}

// ArrayLen reads an array header; nil counts as an empty array. A count
// above limit is an error, and so is one the remaining bytes cannot hold
// (ErrTruncated; every element needs one).
func (d *Decoder) ArrayLen(limit int) (int, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, nil
	}
	if n > limit {
		return 0, fmt.Errorf("%d elements, max %d", n, limit)
	}
	if n > d.Remaining() {
		return 0, fmt.Errorf("%w: array of %d elements with %d bytes left", ErrTruncated, n, d.Remaining())
	}
	return n, nil
}

// Skip skips the next value, nested at most DefaultMaxDepth levels deep,
// checking every length against the bytes present. It replaces the
// library's Skip, which recurses without a limit. On error nothing is
// consumed.
func (d *Decoder) Skip() error {
	end, err := Skip(d.buf, d.off(), DefaultMaxDepth)
	if err != nil {
		return err
	}
	_, err = d.r.Seek(int64(end), io.SeekStart)
	return err
}

// Hash reads a 64-bit hash: an unsigned integer, or a signed one
// reinterpreted as unsigned (two's complement).
func (d *Decoder) Hash() (uint64, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, err
	}
	if msgpcode.IsFixedNum(c) || c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64 {
		v, err := d.DecodeInt64()
		return uint64(v), err
	}
	return d.DecodeUint64()
}
