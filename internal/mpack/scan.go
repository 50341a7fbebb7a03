package mpack

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sentinel errors; every error of this package that is caused by the input
// wraps one of them.
var (
	// ErrTruncated: a value, or a length it declares, runs past the end of
	// the input.
	ErrTruncated = errors.New("truncated msgpack")
	// ErrTooDeep: a value is nested deeper than the limit given.
	ErrTooDeep = errors.New("msgpack nested too deeply")
	// ErrInvalid: a byte that starts no MessagePack value (0xc1).
	ErrInvalid = errors.New("invalid msgpack code")
)

// DefaultMaxDepth is the nesting Reader.Skip and Decoder.Skip accept.
const DefaultMaxDepth = 32

// Kind is the MessagePack type family of a value, read from its first byte.
type Kind uint8

// Kinds, in a fixed order (their numbers appear in some error messages).
const (
	Invalid Kind = iota // not a value (0xc1, or no byte at all)
	Nil
	Bool
	Uint  // positive fixint, uint8..uint64
	Int   // negative fixint, int8..int64
	Float // float32, float64
	Str
	Bin
	Array
	Map
	Ext
)

// Header describes the value starting at buf[off]: its kind, the size of
// its header in bytes, and n, which is the payload byte length (str, bin,
// ext including its type byte, scalars) or the element count (array) or the
// pair count (map). It never reads past buf; n is not checked against the
// bytes that follow (Skip does that).
func Header(buf []byte, off int) (k Kind, hdr int, n int, err error) {
	if off < 0 || off >= len(buf) {
		return Invalid, 0, 0, fmt.Errorf("%w: no value at byte %d", ErrTruncated, off)
	}
	c := buf[off]
	need := func(h int) ([]byte, error) {
		if off+h > len(buf) {
			return nil, fmt.Errorf("%w: header at byte %d", ErrTruncated, off)
		}
		return buf[off+1 : off+h], nil
	}
	switch {
	case c <= 0x7f:
		return Uint, 1, 0, nil
	case c >= 0xe0:
		return Int, 1, 0, nil
	case c >= 0x80 && c <= 0x8f:
		return Map, 1, int(c & 0x0f), nil
	case c >= 0x90 && c <= 0x9f:
		return Array, 1, int(c & 0x0f), nil
	case c >= 0xa0 && c <= 0xbf:
		return Str, 1, int(c & 0x1f), nil
	}
	switch c {
	case 0xc0:
		return Nil, 1, 0, nil
	case 0xc2, 0xc3:
		return Bool, 1, 0, nil
	case 0xcc:
		return Uint, 1, 1, nil
	case 0xcd:
		return Uint, 1, 2, nil
	case 0xce:
		return Uint, 1, 4, nil
	case 0xcf:
		return Uint, 1, 8, nil
	case 0xd0:
		return Int, 1, 1, nil
	case 0xd1:
		return Int, 1, 2, nil
	case 0xd2:
		return Int, 1, 4, nil
	case 0xd3:
		return Int, 1, 8, nil
	case 0xca:
		return Float, 1, 4, nil
	case 0xcb:
		return Float, 1, 8, nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return Ext, 1, 1 + 1<<(c-0xd4), nil
	case 0xc4, 0xd9, 0xc7:
		b, err := need(2)
		if err != nil {
			return Invalid, 0, 0, err
		}
		return lenKind(c), 2, int(b[0]) + extType(c), nil
	case 0xc5, 0xda, 0xc8, 0xdc, 0xde:
		b, err := need(3)
		if err != nil {
			return Invalid, 0, 0, err
		}
		return lenKind(c), 3, int(binary.BigEndian.Uint16(b)) + extType(c), nil
	case 0xc6, 0xdb, 0xc9, 0xdd, 0xdf:
		b, err := need(5)
		if err != nil {
			return Invalid, 0, 0, err
		}
		return lenKind(c), 5, int(binary.BigEndian.Uint32(b)) + extType(c), nil
	}
	return Invalid, 0, 0, fmt.Errorf("%w: 0x%02x at byte %d", ErrInvalid, c, off)
}

func lenKind(c byte) Kind {
	switch c {
	case 0xc4, 0xc5, 0xc6:
		return Bin
	case 0xd9, 0xda, 0xdb:
		return Str
	case 0xc7, 0xc8, 0xc9:
		return Ext
	case 0xdc, 0xdd:
		return Array
	}
	return Map
}

// extType counts the type byte that follows an ext's length.
func extType(c byte) int {
	if c == 0xc7 || c == 0xc8 || c == 0xc9 {
		return 1
	}
	return 0
}

// Skip returns the offset just past the value at buf[off], checking every
// length against the bytes available and refusing values nested more than
// maxDepth levels below this one. It allocates nothing.
func Skip(buf []byte, off, maxDepth int) (int, error) {
	return skip(buf, off, 0, maxDepth)
}

func skip(buf []byte, off, depth, maxDepth int) (int, error) {
	if depth > maxDepth {
		return 0, fmt.Errorf("%w: deeper than %d", ErrTooDeep, maxDepth)
	}
	k, hdr, n, err := Header(buf, off)
	if err != nil {
		return 0, err
	}
	off += hdr
	switch k {
	case Array, Map:
		count := n
		if k == Map {
			count = 2 * n
		}
		if count > len(buf)-off { // every element takes at least one byte
			return 0, fmt.Errorf("%w: %d elements claimed with %d bytes left", ErrTruncated, count, len(buf)-off)
		}
		for range count {
			if off, err = skip(buf, off, depth+1, maxDepth); err != nil {
				return 0, err
			}
		}
		return off, nil
	default:
		if n > len(buf)-off {
			return 0, fmt.Errorf("%w: value of %d bytes with %d left", ErrTruncated, n, len(buf)-off)
		}
		return off + n, nil
	}
}
