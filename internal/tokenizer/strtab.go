package tokenizer

import (
	"errors"
	"hash/maphash"
	"math"
	"strings"
)

// The tokenizer keeps about 150,000 token strings three ways (by id, by
// decoded bytes, and a lookup from token to id). Held as Go strings and
// maps, that is half a million small heap objects which every garbage
// collection marks again: ~11 ms of marking per cycle in a front door that
// collects every few hundred requests, and the latency tail that comes
// with it. The two types here hold the same data in a few flat,
// pointer-free arrays, which the collector marks in no time.

// errTableTooLarge reports strings whose total length does not fit the
// 32-bit offsets (over 4 GiB: no tokenizer.json comes near).
var errTableTooLarge = errors.New("string table over 4 GiB")

// stringTable is a read-only list of strings stored end to end: string i
// is data[off[i]:off[i+1]].
type stringTable struct {
	data string
	off  []uint32
}

func newStringTable(strs []string) (stringTable, error) {
	total := 0
	for _, s := range strs {
		total += len(s)
	}
	if total > math.MaxUint32 {
		return stringTable{}, errTableTooLarge
	}
	var b strings.Builder
	b.Grow(total)
	off := make([]uint32, len(strs)+1)
	for i, s := range strs {
		b.WriteString(s)
		off[i+1] = uint32(b.Len())
	}
	return stringTable{data: b.String(), off: off}, nil
}

func (t *stringTable) len() int { return len(t.off) - 1 }

// at returns string i (0 <= i < len()).
func (t *stringTable) at(i int) string { return t.data[t.off[i]:t.off[i+1]] }

// frozenMap is a read-only map from string to uint32: the keys in a
// stringTable, their values alongside, and an open-addressing index of key
// numbers probed linearly.
type frozenMap struct {
	keys  stringTable
	vals  []uint32
	slots []uint32 // key number + 1; 0 is an empty slot
	mask  uint64
	seed  maphash.Seed
}

func newFrozenMap(m map[string]uint32) (*frozenMap, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	tab, err := newStringTable(keys)
	if err != nil {
		return nil, err
	}
	size := 16
	for size < 2*len(keys) {
		size <<= 1
	}
	f := &frozenMap{keys: tab, vals: make([]uint32, len(keys)), slots: make([]uint32, size),
		mask: uint64(size - 1), seed: maphash.MakeSeed()}
	for i, k := range keys {
		f.vals[i] = m[k]
		j := maphash.String(f.seed, k) & f.mask
		for f.slots[j] != 0 {
			j = (j + 1) & f.mask
		}
		f.slots[j] = uint32(i + 1)
	}
	return f, nil
}

// get returns key's value.
func (f *frozenMap) get(key string) (uint32, bool) {
	if f == nil {
		return 0, false
	}
	for j := maphash.String(f.seed, key) & f.mask; ; j = (j + 1) & f.mask {
		k := f.slots[j]
		if k == 0 {
			return 0, false
		}
		if f.keys.at(int(k-1)) == key {
			return f.vals[k-1], true
		}
	}
}

// len returns the number of keys.
func (f *frozenMap) len() int {
	if f == nil {
		return 0
	}
	return len(f.vals)
}

// all calls fn with every key and value, in no particular order.
func (f *frozenMap) all(fn func(key string, val uint32)) {
	if f == nil {
		return
	}
	for i, v := range f.vals {
		fn(f.keys.at(i), v)
	}
}
