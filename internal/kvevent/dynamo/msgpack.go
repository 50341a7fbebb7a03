package dynamo

import (
	"encoding/binary"
	"math"

	"github.com/kvrouter/kvrouter/internal/mpack"
)

// This file holds the MessagePack writer the RouterEvent shapes need and the
// one reading rule that is Dynamo's own; bounded reading itself (lengths
// checked against the bytes present, depth-limited skip) is mpack.Reader's.

// binOrStr reads a bin, a str, or an array of byte-sized integers (what a
// serde Vec<u8> may look like) and returns a copy of the bytes.
func binOrStr(r *mpack.Reader) ([]byte, error) {
	c, err := r.Peek()
	if err != nil {
		return nil, err
	}
	if (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd {
		n, err := r.ArrayLen()
		if err != nil {
			return nil, err
		}
		out := make([]byte, 0, min(n, r.Remaining()))
		for range n {
			v, err := r.Uint(math.MaxUint8)
			if err != nil {
				return nil, err
			}
			out = append(out, byte(v))
		}
		return out, nil
	}
	s, err := r.StrBytes()
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), s...), nil
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
