package vllm

import (
	"encoding/binary"
	"fmt"
)

// kind is the msgpack type family of a value, read from its first byte.
type kind uint8

const (
	kInvalid kind = iota
	kNil
	kBool
	kUint  // positive fixint, uint8..uint64
	kInt   // negative fixint, int8..int64
	kFloat // float32, float64
	kStr
	kBin
	kArray
	kMap
	kExt
)

// maxDepth bounds msgpack nesting. A batch is at most 5 deep in practice
// (batch, events, event, extra_keys, key tuple, MM pair); anything deeper
// is refused, so recursion never grows with the input.
const maxDepth = 16

// header describes the value starting at buf[off]: its kind, the size of
// its header in bytes, and n, which is the payload byte length (str, bin,
// ext incl. type byte, scalars) or the element count (array) or pair count
// (map). It never reads past buf.
func header(buf []byte, off int) (k kind, hdr int, n int, err error) {
	if off >= len(buf) {
		return kInvalid, 0, 0, fmt.Errorf("%w: truncated at byte %d", ErrMalformed, off)
	}
	c := buf[off]
	need := func(h int) ([]byte, error) {
		if off+h > len(buf) {
			return nil, fmt.Errorf("%w: truncated header at byte %d", ErrMalformed, off)
		}
		return buf[off+1 : off+h], nil
	}
	switch {
	case c <= 0x7f:
		return kUint, 1, 0, nil
	case c >= 0xe0:
		return kInt, 1, 0, nil
	case c >= 0x80 && c <= 0x8f:
		return kMap, 1, int(c & 0x0f), nil
	case c >= 0x90 && c <= 0x9f:
		return kArray, 1, int(c & 0x0f), nil
	case c >= 0xa0 && c <= 0xbf:
		return kStr, 1, int(c & 0x1f), nil
	}
	switch c {
	case 0xc0:
		return kNil, 1, 0, nil
	case 0xc2, 0xc3:
		return kBool, 1, 0, nil
	case 0xcc:
		return kUint, 1, 1, nil
	case 0xcd:
		return kUint, 1, 2, nil
	case 0xce:
		return kUint, 1, 4, nil
	case 0xcf:
		return kUint, 1, 8, nil
	case 0xd0:
		return kInt, 1, 1, nil
	case 0xd1:
		return kInt, 1, 2, nil
	case 0xd2:
		return kInt, 1, 4, nil
	case 0xd3:
		return kInt, 1, 8, nil
	case 0xca:
		return kFloat, 1, 4, nil
	case 0xcb:
		return kFloat, 1, 8, nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return kExt, 1, 1 + 1<<(c-0xd4), nil
	case 0xc4, 0xd9, 0xc7:
		b, err := need(2)
		if err != nil {
			return kInvalid, 0, 0, err
		}
		return lenKind(c), 2, int(b[0]) + extType(c), nil
	case 0xc5, 0xda, 0xc8, 0xdc, 0xde:
		b, err := need(3)
		if err != nil {
			return kInvalid, 0, 0, err
		}
		return lenKind(c), 3, int(binary.BigEndian.Uint16(b)) + extType(c), nil
	case 0xc6, 0xdb, 0xc9, 0xdd, 0xdf:
		b, err := need(5)
		if err != nil {
			return kInvalid, 0, 0, err
		}
		return lenKind(c), 5, int(binary.BigEndian.Uint32(b)) + extType(c), nil
	}
	return kInvalid, 0, 0, fmt.Errorf("%w: invalid msgpack code 0x%02x at byte %d", ErrMalformed, c, off)
}

func lenKind(c byte) kind {
	switch c {
	case 0xc4, 0xc5, 0xc6:
		return kBin
	case 0xd9, 0xda, 0xdb:
		return kStr
	case 0xc7, 0xc8, 0xc9:
		return kExt
	case 0xdc, 0xdd:
		return kArray
	}
	return kMap
}

// extType counts the type byte that follows an ext's length.
func extType(c byte) int {
	if c == 0xc7 || c == 0xc8 || c == 0xc9 {
		return 1
	}
	return 0
}

// skip returns the offset just past the value at buf[off], checking every
// length against the bytes available and nesting against maxDepth. It
// allocates nothing.
func skip(buf []byte, off, depth int) (int, error) {
	if depth > maxDepth {
		return 0, fmt.Errorf("%w: nesting deeper than %d", ErrMalformed, maxDepth)
	}
	k, hdr, n, err := header(buf, off)
	if err != nil {
		return 0, err
	}
	off += hdr
	switch k {
	case kArray, kMap:
		count := n
		if k == kMap {
			count = 2 * n
		}
		if count > len(buf)-off { // every element takes at least one byte
			return 0, fmt.Errorf("%w: %d elements claimed with %d bytes left", ErrMalformed, count, len(buf)-off)
		}
		for range count {
			if off, err = skip(buf, off, depth+1); err != nil {
				return 0, err
			}
		}
		return off, nil
	default:
		if n > len(buf)-off {
			return 0, fmt.Errorf("%w: value of %d bytes with %d left", ErrMalformed, n, len(buf)-off)
		}
		return off + n, nil
	}
}
