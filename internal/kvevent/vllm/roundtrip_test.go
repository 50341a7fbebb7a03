package vllm

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"
)

func genHash(t *rapid.T, label string) Hash {
	switch rapid.IntRange(0, 2).Draw(t, label+"form") {
	case 0:
		return UintHash(rapid.Uint64().Draw(t, label))
	case 1:
		return IntHash(rapid.Int64Range(-1<<63, -1).Draw(t, label))
	}
	return BytesHash(rapid.SliceOfN(rapid.Byte(), 1, 40).Draw(t, label))
}

func optInt(t *rapid.T, label string) *int64 {
	if rapid.Bool().Draw(t, label+"?") {
		return nil
	}
	return Int(rapid.Int64().Draw(t, label))
}

func optStr(t *rapid.T, label string) *string {
	if rapid.Bool().Draw(t, label+"?") {
		return nil
	}
	return Str(rapid.StringN(0, 40, -1).Draw(t, label))
}

func genItem(t *rapid.T) any {
	switch rapid.IntRange(0, 3).Draw(t, "item") {
	case 0:
		return rapid.String().Draw(t, "s")
	case 1:
		return rapid.SliceOfN(rapid.Byte(), 1, 32).Draw(t, "b")
	case 2:
		return MMItem{Identifier: rapid.String().Draw(t, "id"), Offset: rapid.Int64Range(0, 1<<40).Draw(t, "off")}
	}
	return rapid.Int64Range(-1<<63, -1).Draw(t, "neg")
}

func genEvent(t *rapid.T) RawEvent {
	switch rapid.IntRange(0, 2).Draw(t, "kind") {
	case 0:
		n := rapid.IntRange(0, 6).Draw(t, "blocks")
		s := BlockStored{
			BlockHashes: make([]Hash, n),
			TokenIDs:    rapid.SliceOfN(rapid.Uint32(), 0, 64).Draw(t, "tokens"),
			BlockSize:   rapid.Int64Range(-5, 1<<20).Draw(t, "bs"),
			LoRAID:      optInt(t, "lora_id"), Medium: optStr(t, "medium"), LoRAName: optStr(t, "lora"),
			GroupIdx: optInt(t, "group"), KVCacheSpecKind: optStr(t, "kind"),
			KVCacheSpecSlidingWindow: optInt(t, "window"), CacheSalt: optStr(t, "salt"),
		}
		s.Bigrams = len(s.TokenIDs) >= 2 && rapid.Bool().Draw(t, "bigrams")
		for i := range s.BlockHashes {
			s.BlockHashes[i] = genHash(t, "h")
		}
		if rapid.Bool().Draw(t, "parent?") {
			s.ParentBlockHash = genHash(t, "parent")
		}
		if rapid.Bool().Draw(t, "extra?") {
			s.ExtraKeys = make([]ExtraKey, rapid.IntRange(0, 4).Draw(t, "nkeys"))
			for i := range s.ExtraKeys {
				if rapid.Bool().Draw(t, "key?") {
					k := ExtraKey{}
					for range rapid.IntRange(1, 3).Draw(t, "nitems") {
						k = append(k, genItem(t))
					}
					s.ExtraKeys[i] = k
				}
			}
		}
		return s
	case 1:
		r := BlockRemoved{Medium: optStr(t, "medium"), GroupIdx: optInt(t, "group")}
		for range rapid.IntRange(0, 5).Draw(t, "n") {
			r.BlockHashes = append(r.BlockHashes, genHash(t, "h"))
		}
		if r.BlockHashes == nil {
			r.BlockHashes = []Hash{}
		}
		return r
	}
	return AllBlocksCleared{}
}

// project drops what a format cannot carry: the expected result of an
// encode/parse round trip.
func project(b RawBatch, f Format) RawBatch {
	if f.Encoding == EncodingMap {
		return b
	}
	s := f.schema()
	out := RawBatch{TS: b.TS, DPRank: b.DPRank}
	if s == SchemaV09 {
		out.DPRank = nil
	}
	for _, ev := range b.Events {
		switch e := ev.(type) {
		case BlockStored:
			n := storedFields(s)
			e.CacheSalt = nil
			if n < 6 {
				e.Medium = nil
			}
			if n < 7 {
				e.LoRAName = nil
			}
			if n < 8 {
				e.ExtraKeys = nil
			}
			if n < 9 {
				e.GroupIdx = nil
			}
			if n < 11 {
				e.KVCacheSpecKind, e.KVCacheSpecSlidingWindow = nil, nil
			}
			ev = e
		case BlockRemoved:
			n := removedFields(s)
			if n < 2 {
				e.Medium = nil
			}
			if n < 3 {
				e.GroupIdx = nil
			}
			ev = e
		}
		out.Events = append(out.Events, ev)
	}
	return out
}

// TestRoundTrip checks ParseBatch(Encode(b, f)) equals b minus what the
// format cannot carry, for random batches in every format.
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := RawBatch{TS: rapid.Float64().Draw(t, "ts"), DPRank: optInt(t, "rank")}
		for range rapid.IntRange(0, 5).Draw(t, "events") {
			b.Events = append(b.Events, genEvent(t))
		}
		f := Format{Encoding: Encoding(rapid.IntRange(0, 1).Draw(t, "enc")),
			Schema: Schema(rapid.IntRange(0, int(SchemaSpecKind)).Draw(t, "schema"))}
		payload, err := Encode(b, f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseBatch(payload, DefaultLimits())
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		want := project(b, f)
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.EquateNaNs()); diff != "" {
			t.Fatalf("format %+v: (-want +got)\n%s", f, diff)
		}
	})
}
