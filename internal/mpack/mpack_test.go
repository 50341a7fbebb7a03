package mpack

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"pgregory.net/rapid"
)

// genValue draws a random value of bounded nesting from every non-ext kind
// (ext is covered by the fuzz seeds).
func genValue(depth int) *rapid.Generator[any] {
	scalars := []*rapid.Generator[any]{
		rapid.Just[any](nil),
		rapid.Map(rapid.Bool(), func(v bool) any { return v }),
		rapid.Map(rapid.Uint64(), func(v uint64) any { return v }),
		rapid.Map(rapid.Int64(), func(v int64) any { return v }),
		rapid.Map(rapid.Float64(), func(v float64) any { return v }),
		rapid.Map(rapid.Float32(), func(v float32) any { return v }),
		rapid.Map(rapid.StringN(0, 300, -1), func(v string) any { return v }),
		rapid.Map(rapid.SliceOfN(rapid.Byte(), 0, 300), func(v []byte) any { return v }),
	}
	if depth <= 0 {
		return rapid.OneOf(scalars...)
	}
	inner := genValue(depth - 1)
	return rapid.OneOf(append(scalars,
		rapid.Map(rapid.SliceOfN(inner, 0, 20), func(v []any) any { return v }),
		rapid.Map(rapid.MapOfN(rapid.StringN(0, 8, -1), inner, 0, 20), func(v map[string]any) any { return v }),
	)...)
}

// TestSkipMatchesEncoder checks that every skipper steps over exactly the
// bytes the library's encoder wrote for one value, whatever follows it.
func TestSkipMatchesEncoder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := genValue(3).Draw(t, "value")
		enc, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		tail := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "tail")
		buf := append(append([]byte(nil), enc...), tail...)

		end, err := Skip(buf, 0, DefaultMaxDepth)
		if err != nil || end != len(enc) {
			t.Fatalf("Skip = %d, %v; want %d", end, err, len(enc))
		}
		r := NewReader(buf)
		if err := r.Skip(); err != nil || r.Remaining() != len(tail) {
			t.Fatalf("Reader.Skip left %d, %v; want %d", r.Remaining(), err, len(tail))
		}
		d := NewDecoder(buf)
		if err := d.Skip(); err != nil || d.Remaining() != len(tail) {
			t.Fatalf("Decoder.Skip left %d, %v; want %d", d.Remaining(), err, len(tail))
		}
		// Every strict prefix is truncated (the first header fixes the
		// value's length), and nothing is consumed on error.
		cut := rapid.IntRange(0, len(enc)-1).Draw(t, "cut")
		if _, err := Skip(enc[:cut], 0, DefaultMaxDepth); !errors.Is(err, ErrTruncated) {
			t.Fatalf("prefix of %d/%d: %v, want ErrTruncated", cut, len(enc), err)
		}
		r = NewReader(enc[:cut])
		if err := r.Skip(); err == nil || r.Remaining() != cut {
			t.Fatalf("Reader.Skip on prefix: %v, left %d of %d", err, r.Remaining(), cut)
		}
	})
}

func nested(levels int) []byte {
	b := bytes.Repeat([]byte{0x91}, levels)
	return append(b, 0x01)
}

func TestSkipDepth(t *testing.T) {
	// DefaultMaxDepth arrays around a scalar put the scalar one level
	// deeper than the limit.
	ok := nested(DefaultMaxDepth)
	if end, err := Skip(ok, 0, DefaultMaxDepth); err != nil || end != len(ok) {
		t.Fatalf("depth %d: %d, %v", DefaultMaxDepth, end, err)
	}
	deep := nested(DefaultMaxDepth + 1)
	if _, err := Skip(deep, 0, DefaultMaxDepth); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("depth %d: %v, want ErrTooDeep", DefaultMaxDepth+1, err)
	}
	if err := NewReader(deep).Skip(); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("Reader: %v", err)
	}
	// The library's own Skip would recurse here without a limit.
	if err := NewDecoder(nested(100000)).Skip(); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("Decoder: %v", err)
	}
	if _, err := Skip([]byte{0xc1}, 0, 1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("0xc1: %v", err)
	}
}

// TestLengthGuards: declared counts larger than the bytes present are
// refused before any element is read.
func TestLengthGuards(t *testing.T) {
	arr := []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02}
	mp := []byte{0xdf, 0x00, 0x00, 0x00, 0x02, 0x01, 0x02, 0x03}
	if _, err := NewReader(arr).ArrayLen(); !errors.Is(err, ErrTruncated) {
		t.Errorf("Reader.ArrayLen: %v", err)
	}
	if _, err := NewDecoder(arr).ArrayLen(math.MaxInt); !errors.Is(err, ErrTruncated) {
		t.Errorf("Decoder.ArrayLen: %v", err)
	}
	if _, err := NewDecoder([]byte{0x93, 1, 2, 3}).ArrayLen(2); err == nil {
		t.Error("Decoder.ArrayLen over its limit accepted")
	}
	if _, err := NewReader(mp).MapLen(); !errors.Is(err, ErrTruncated) {
		t.Errorf("Reader.MapLen: %v", err)
	}
	if _, err := NewDecoder(mp).MapLen(); !errors.Is(err, ErrTruncated) {
		t.Errorf("Decoder.MapLen: %v", err)
	}
	if n, err := NewDecoder([]byte{0xc0}).ArrayLen(1); n != 0 || err != nil {
		t.Errorf("nil array: %d, %v", n, err)
	}
	if n, err := NewDecoder([]byte{0xc0}).MapLen(); n != 0 || err != nil {
		t.Errorf("nil map: %d, %v", n, err)
	}
	if _, err := NewReader([]byte{0xda, 0x01, 0x00, 'a'}).StrBytes(); !errors.Is(err, ErrTruncated) {
		t.Errorf("StrBytes: %v", err)
	}
	// Exactly enough bytes is fine.
	if n, err := NewReader([]byte{0x82, 1, 2, 3, 4}).MapLen(); n != 2 || err != nil {
		t.Errorf("MapLen: %d, %v", n, err)
	}
}

// TestHash: any integer encoding reads back as its two's-complement bits.
func TestHash(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var buf bytes.Buffer
		e := msgpack.NewEncoder(&buf)
		var want uint64
		if rapid.Bool().Draw(t, "signed") {
			v := rapid.Int64().Draw(t, "v")
			want = uint64(v)
			if rapid.Bool().Draw(t, "compact") {
				_ = e.EncodeInt(v)
			} else {
				_ = e.EncodeInt64(v)
			}
		} else {
			v := rapid.Uint64().Draw(t, "v")
			want = v
			if rapid.Bool().Draw(t, "compact") {
				_ = e.EncodeUint(v)
			} else {
				_ = e.EncodeUint64(v)
			}
		}
		b := buf.Bytes()
		if got, err := NewReader(b).Hash(); err != nil || got != want {
			t.Fatalf("Reader.Hash(% x) = %d, %v; want %d", b, got, err, want)
		}
		if got, err := NewDecoder(b).Hash(); err != nil || got != want {
			t.Fatalf("Decoder.Hash(% x) = %d, %v; want %d", b, got, err, want)
		}
	})
}

func TestUint(t *testing.T) {
	if v, err := NewReader([]byte{0xcd, 0x01, 0x00}).Uint(256); v != 256 || err != nil {
		t.Errorf("256: %d, %v", v, err)
	}
	if _, err := NewReader([]byte{0xcd, 0x01, 0x01}).Uint(256); err == nil {
		t.Error("257 accepted with max 256")
	}
	if _, err := NewReader([]byte{0xff}).Uint(256); err == nil {
		t.Error("-1 accepted")
	}
	r := NewReader([]byte{0xa1, 'x'})
	if _, _, err := r.Integer(); err == nil || r.Remaining() != 2 {
		t.Errorf("string read as integer: %v, consumed %d", err, 2-r.Remaining())
	}
}

// FuzzSkip: on any input Skip never panics, and whenever it accepts a
// value the library's own decoder steps over exactly as many bytes.
func FuzzSkip(f *testing.F) {
	for _, v := range []any{nil, 1, -1, "abc", []any{1, "x", []byte{1, 2}}, map[string]any{"a": []any{1.5, true}}} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte{0xd4, 0x01, 0x02, 0xc7, 0x01, 0x05, 0x00})
	f.Add(nested(40))
	f.Fuzz(func(t *testing.T, b []byte) {
		end, err := Skip(b, 0, DefaultMaxDepth)
		if err != nil {
			return
		}
		if end <= 0 || end > len(b) {
			t.Fatalf("end %d of %d", end, len(b))
		}
		r := bytes.NewReader(b)
		if err := msgpack.NewDecoder(r).Skip(); err != nil {
			t.Fatalf("Skip accepted %d bytes the library refuses: %v", end, err)
		}
		if got := len(b) - r.Len(); got != end {
			t.Fatalf("Skip ended at %d, the library at %d", end, got)
		}
		rd := NewReader(b)
		if err := rd.Skip(); err != nil || len(b)-rd.Remaining() != end {
			t.Fatalf("Reader.Skip: %v at %d, want %d", err, len(b)-rd.Remaining(), end)
		}
	})
}

// After Decoder.Skip the library's own decoding goes on at the next value.
func TestDecoderSkipThenDecode(t *testing.T) {
	b, err := msgpack.Marshal(map[string]any{"skip": []any{1, "x", map[string]any{"y": 2.5}}})
	if err != nil {
		t.Fatal(err)
	}
	b = append(b[1:], 0xa2, 'o', 'k') // the map's value pair minus its header, then "ok"
	d := NewDecoder(b)
	if k, err := d.DecodeString(); err != nil || k != "skip" {
		t.Fatalf("key %q, %v", k, err)
	}
	if err := d.Skip(); err != nil {
		t.Fatal(err)
	}
	if s, err := d.DecodeString(); err != nil || s != "ok" || d.Remaining() != 0 {
		t.Fatalf("after skip: %q, %v, %d left", s, err, d.Remaining())
	}
}
