package mpack

import (
	"encoding/binary"
	"fmt"
)

// Reader reads MessagePack values one after another from a byte slice. Every
// declared length is checked against the bytes that remain, so a hostile
// length cannot make a caller allocate for it. Strings are returned without
// copying: they alias the input.
type Reader struct {
	b   []byte
	off int
}

// NewReader returns a Reader positioned at the start of b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Remaining returns the number of bytes not read yet.
func (r *Reader) Remaining() int { return len(r.b) - r.off }

// Peek returns the first byte of the next value without consuming it.
func (r *Reader) Peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, ErrTruncated
	}
	return r.b[r.off], nil
}

func (r *Reader) take(n int) ([]byte, error) {
	if n < 0 || n > r.Remaining() {
		return nil, ErrTruncated
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

func (r *Reader) byte1() (byte, error) {
	s, err := r.take(1)
	if err != nil {
		return 0, err
	}
	return s[0], nil
}

func (r *Reader) uintN(n int) (uint64, error) {
	s, err := r.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(s[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), nil
	}
	return binary.BigEndian.Uint64(s), nil
}

// IsNil reports whether the next value is nil, consuming it if so.
func (r *Reader) IsNil() (bool, error) {
	c, err := r.Peek()
	if err != nil {
		return false, err
	}
	if c == 0xc0 {
		r.off++
		return true, nil
	}
	return false, nil
}

// Integer reads any MessagePack integer. neg is true when the value was
// encoded as a negative signed integer; v then holds its two's-complement
// bits. A value that is not an integer is not consumed.
func (r *Reader) Integer() (v uint64, neg bool, err error) {
	c, err := r.byte1()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		return uint64(c), false, nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), true, nil
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		v, err = r.uintN(1 << (c - 0xcc))
		return v, false, err
	case 0xd0:
		v, err = r.uintN(1)
		return uint64(int64(int8(v))), int8(v) < 0, err
	case 0xd1:
		v, err = r.uintN(2)
		return uint64(int64(int16(v))), int16(v) < 0, err
	case 0xd2:
		v, err = r.uintN(4)
		return uint64(int64(int32(v))), int32(v) < 0, err
	case 0xd3:
		v, err = r.uintN(8)
		return v, int64(v) < 0, err
	}
	r.off--
	return 0, false, fmt.Errorf("expected an integer, got code 0x%02x", c)
}

// Hash reads a 64-bit hash: an unsigned integer, or a signed one
// reinterpreted as unsigned (two's complement).
func (r *Reader) Hash() (uint64, error) {
	v, _, err := r.Integer()
	return v, err
}

// Uint reads a non-negative integer no larger than max.
func (r *Reader) Uint(max uint64) (uint64, error) {
	v, neg, err := r.Integer()
	if err != nil {
		return 0, err
	}
	if neg {
		return 0, fmt.Errorf("negative value %d", int64(v))
	}
	if v > max {
		return 0, fmt.Errorf("value %d out of range (max %d)", v, max)
	}
	return v, nil
}

// StrBytes reads a str (or, leniently, a bin) and returns its bytes without
// copying.
func (r *Reader) StrBytes() ([]byte, error) {
	c, err := r.byte1()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		n, err = r.uintN(1)
	case c == 0xda || c == 0xc5:
		n, err = r.uintN(2)
	case c == 0xdb || c == 0xc6:
		n, err = r.uintN(4)
	default:
		r.off--
		return nil, fmt.Errorf("expected a string, got code 0x%02x", c)
	}
	if err != nil {
		return nil, err
	}
	return r.take(int(n))
}

// MapLen reads a map header. The count is checked against the remaining
// bytes (every entry needs at least two).
func (r *Reader) MapLen() (int, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= 0x80 && c <= 0x8f:
		n = uint64(c & 0x0f)
	case c == 0xde:
		n, err = r.uintN(2)
	case c == 0xdf:
		n, err = r.uintN(4)
	default:
		r.off--
		return 0, fmt.Errorf("expected a map, got code 0x%02x", c)
	}
	if err != nil {
		return 0, err
	}
	if n*2 > uint64(r.Remaining()) {
		return 0, ErrTruncated
	}
	return int(n), nil
}

// ArrayLen reads an array header, checked against the remaining bytes
// (every element needs at least one).
func (r *Reader) ArrayLen() (int, error) {
	c, err := r.byte1()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= 0x90 && c <= 0x9f:
		n = uint64(c & 0x0f)
	case c == 0xdc:
		n, err = r.uintN(2)
	case c == 0xdd:
		n, err = r.uintN(4)
	default:
		r.off--
		return 0, fmt.Errorf("expected an array, got code 0x%02x", c)
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.Remaining()) {
		return 0, ErrTruncated
	}
	return int(n), nil
}

// Skip consumes one value of any type, nested at most DefaultMaxDepth
// levels deep. On error nothing is consumed.
func (r *Reader) Skip() error {
	end, err := Skip(r.b, r.off, DefaultMaxDepth)
	if err != nil {
		return err
	}
	r.off = end
	return nil
}
