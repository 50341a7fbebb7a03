package dynamo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// This file is a minimal MessagePack reader and writer: just what the
// RouterEvent shapes need. The reader works on a byte slice, checks every
// declared length against the bytes that remain (so a hostile length cannot
// make it allocate) and limits nesting when skipping unknown values.

// maxSkipDepth bounds nesting of skipped (unknown) values.
const maxSkipDepth = 32

var errShort = errors.New("truncated input")

// reader reads MessagePack values from a byte slice.
type reader struct {
	b   []byte
	off int
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errShort
	}
	return r.b[r.off], nil
}

func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || n > r.remaining() {
		return nil, errShort
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, nil
}

func (r *reader) byte1() (byte, error) {
	s, err := r.take(1)
	if err != nil {
		return 0, err
	}
	return s[0], nil
}

func (r *reader) uintN(n int) (uint64, error) {
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

// isNil reports whether the next value is nil, consuming it if so.
func (r *reader) isNil() (bool, error) {
	c, err := r.peek()
	if err != nil {
		return false, err
	}
	if c == 0xc0 {
		r.off++
		return true, nil
	}
	return false, nil
}

// integer reads any MessagePack integer. neg is true when the value was
// encoded as a negative signed integer; v then holds its two's complement
// bits (Dynamo reinterprets signed hashes as unsigned the same way).
func (r *reader) integer() (v uint64, neg bool, err error) {
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

// hash reads a 64-bit hash: unsigned, or signed reinterpreted as unsigned.
func (r *reader) hash() (uint64, error) {
	v, _, err := r.integer()
	return v, err
}

// uint reads a non-negative integer no larger than max.
func (r *reader) uint(max uint64) (uint64, error) {
	v, neg, err := r.integer()
	if err != nil {
		return 0, err
	}
	if neg || v > max {
		if neg {
			return 0, fmt.Errorf("negative value %d", int64(v))
		}
		return 0, fmt.Errorf("value %d out of range (max %d)", v, max)
	}
	return v, nil
}

// strBytes reads a str (or, leniently, a bin) and returns its bytes without
// copying.
func (r *reader) strBytes() ([]byte, error) {
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

// binOrStr reads a bin, a str, or an array of byte-sized integers (what a
// serde Vec<u8> may look like) and returns a copy of the bytes.
func (r *reader) binOrStr() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	if (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd {
		n, err := r.arrayLen()
		if err != nil {
			return nil, err
		}
		out := make([]byte, 0, min(n, r.remaining()))
		for range n {
			v, err := r.uint(math.MaxUint8)
			if err != nil {
				return nil, err
			}
			out = append(out, byte(v))
		}
		return out, nil
	}
	s, err := r.strBytes()
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), s...), nil
}

// mapLen reads a map header. The count is checked against the remaining
// bytes (every entry needs at least two).
func (r *reader) mapLen() (int, error) {
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
	if n*2 > uint64(r.remaining()) {
		return 0, errShort
	}
	return int(n), nil
}

// arrayLen reads an array header, checked against the remaining bytes.
func (r *reader) arrayLen() (int, error) {
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
	if n > uint64(r.remaining()) {
		return 0, errShort
	}
	return int(n), nil
}

// skip consumes one value of any type.
func (r *reader) skip(depth int) error {
	if depth > maxSkipDepth {
		return errors.New("value nested too deeply")
	}
	c, err := r.peek()
	if err != nil {
		return err
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		r.off++
		return nil
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		for range 2 * n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c >= 0x90 && c <= 0x9f, c == 0xdc, c == 0xdd:
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		for range n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c >= 0xa0 && c <= 0xbf, c == 0xd9, c == 0xda, c == 0xdb, c == 0xc4, c == 0xc5, c == 0xc6:
		_, err := r.strBytes()
		return err
	}
	r.off++
	var n int
	switch c {
	case 0xcc, 0xd0, 0xd4:
		n = 1
	case 0xcd, 0xd1:
		n = 2
	case 0xce, 0xd2, 0xca:
		n = 4
	case 0xcf, 0xd3, 0xcb:
		n = 8
	case 0xd5:
		n = 1 + 2
	case 0xd6:
		n = 1 + 4
	case 0xd7:
		n = 1 + 8
	case 0xd8:
		n = 1 + 16
	case 0xc7, 0xc8, 0xc9:
		l, err := r.uintN(1 << (c - 0xc7))
		if err != nil {
			return err
		}
		if l > uint64(r.remaining()) {
			return errShort
		}
		n = 1 + int(l)
	default:
		return fmt.Errorf("invalid code 0x%02x", c)
	}
	_, err = r.take(n)
	return err
}

// Writer helpers: append MessagePack values to a byte slice, choosing the
// most compact form as rmp_serde does.

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func appendBin(b []byte, p []byte) []byte {
	n := len(p)
	switch {
	case n <= math.MaxUint8:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, p...)
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func appendNil(b []byte) []byte { return append(b, 0xc0) }
