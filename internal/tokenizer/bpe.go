package tokenizer

import "unicode/utf8"

// model is a byte-level BPE model over token ids: words arrive as raw bytes
// and are merged pair by pair, lowest rank first.
type model struct {
	// byteID is the id of the single-byte token of each byte.
	byteID [256]uint32
	// merges maps a pair of ids (left<<32 | right) to rank<<32 | merged id.
	merges *pairTable
	// vocab maps a token's raw bytes to its id (used by ignore_merges).
	vocab *frozenMap
	// ignoreMerges takes a word found whole in vocab as one token.
	ignoreMerges bool
	// charLevel is set for SentencePiece-style BPE (Gemma, Llama 2): a
	// word's first symbols are its characters, not its bytes (see
	// symbolize).
	charLevel bool
	// asciiID and runeID are the ids of the single-character tokens
	// (noID when an ASCII character has none).
	asciiID [128]uint32
	runeID  map[rune]uint32
	// fallback is the id of each byte's <0xXX> token (byte_fallback), noID
	// where the vocabulary has none; byteFallback is byte_fallback.
	fallback     [256]uint32
	byteFallback bool
	// unk is the id of unk_token when hasUnk; fuseUnk merges consecutive
	// unknown characters into one unk.
	unk             uint32
	hasUnk, fuseUnk bool
}

// noID marks a character without a token.
const noID = ^uint32(0)

// heapThreshold is the word length (in bytes) above which merging uses a
// heap (O(n log n)) instead of the simpler O(n²) scan that is faster for the
// short words that make up almost all text.
const heapThreshold = 48

const noRank = ^uint32(0)

// maxWord bounds the word length appendHeap handles in one piece (its
// offsets are int32); longer words, which no real text produces, are cut.
const maxWord = 1 << 30

func (m *model) rank(a, b uint32) (rank uint32, id uint32) {
	v, ok := m.merges.get(uint64(a)<<32 | uint64(b))
	if !ok {
		return noRank, 0
	}
	return uint32(v >> 32), uint32(v)
}

// appendWord appends the ids of one pre-tokenized word (raw bytes, or
// for a charLevel model the normalized text).
func (m *model) appendWord(dst []uint32, word string) []uint32 {
	if len(word) == 0 {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab.get(word); ok {
			return append(dst, id)
		}
	}
	if m.charLevel {
		return m.appendChars(dst, word)
	}
	if len(word) == 1 {
		return append(dst, m.byteID[word[0]])
	}
	if len(word) > heapThreshold {
		for len(word) > maxWord { // never in practice; keeps int32 offsets valid
			dst = m.appendHeap(dst, m.byteSymbols(word[:maxWord]))
			word = word[maxWord:]
		}
		return m.appendHeap(dst, m.byteSymbols(word))
	}
	var symBuf [heapThreshold]uint32
	sym := symBuf[:len(word)]
	for i := 0; i < len(word); i++ {
		sym[i] = m.byteID[word[i]]
	}
	return m.appendScan(dst, sym)
}

func (m *model) byteSymbols(word string) []uint32 {
	sym := make([]uint32, len(word))
	for i := 0; i < len(word); i++ {
		sym[i] = m.byteID[word[i]]
	}
	return sym
}

// appendChars is appendWord for a charLevel model.
func (m *model) appendChars(dst []uint32, word string) []uint32 {
	var symBuf [heapThreshold]uint32
	sym := symBuf[:0]
	if len(word) > heapThreshold {
		sym = make([]uint32, 0, len(word))
	}
	sym = m.symbolize(sym, word)
	switch {
	case len(sym) <= 1:
		return append(dst, sym...)
	case len(sym) <= heapThreshold:
		return m.appendScan(dst, sym)
	}
	for len(sym) > maxWord { // never in practice; keeps int32 offsets valid
		dst = m.appendHeap(dst, sym[:maxWord])
		sym = sym[maxWord:]
	}
	return m.appendHeap(dst, sym)
}

// symbolize appends the first symbols of a charLevel word, as HuggingFace's
// BPE does before merging: each character's own token; failing that, with
// byte_fallback, the <0xXX> tokens of its UTF-8 bytes (all of them or
// none); failing that unk_token, consecutive ones fused into one with
// fuse_unk (a pending unk is emitted only when a known character or the end
// of the word comes, as in HuggingFace); failing that the character is
// dropped. There are at most as many symbols as bytes.
func (m *model) symbolize(dst []uint32, word string) []uint32 {
	pendingUnk := false
	for i := 0; i < len(word); {
		c := word[i]
		id, size := noID, 1
		if c < utf8.RuneSelf {
			id = m.asciiID[c]
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(word[i:])
			if v, ok := m.runeID[r]; ok {
				id = v
			}
		}
		if id != noID {
			if pendingUnk {
				dst = append(dst, m.unk)
				pendingUnk = false
			}
			dst = append(dst, id)
			i += size
			continue
		}
		if m.byteFallback && m.hasFallback(word[i:i+size]) {
			for k := i; k < i+size; k++ {
				dst = append(dst, m.fallback[word[k]])
			}
			i += size
			continue
		}
		if m.hasUnk {
			if pendingUnk && !m.fuseUnk {
				dst = append(dst, m.unk)
			}
			pendingUnk = true
		}
		i += size
	}
	if pendingUnk {
		dst = append(dst, m.unk)
	}
	return dst
}

// fullFallback reports whether every byte has a byte_fallback token, so
// that no character becomes unk_token.
func (m *model) fullFallback() bool {
	if !m.byteFallback {
		return false
	}
	for _, id := range m.fallback {
		if id == noID {
			return false
		}
	}
	return true
}

func (m *model) hasFallback(b string) bool {
	for i := 0; i < len(b); i++ {
		if m.fallback[b[i]] == noID {
			return false
		}
	}
	return true
}

// appendScan is the merge loop for short words (2..heapThreshold symbols,
// merged in place in sym): find the lowest-ranked pair (leftmost on ties),
// merge it, update the two neighbouring pair ranks, repeat.
func (m *model) appendScan(dst []uint32, sym []uint32) []uint32 {
	var rankBuf [heapThreshold]uint32
	var idBuf [heapThreshold]uint32
	n := len(sym)
	// ranks[i] / ids[i] describe the pair (sym[i], sym[i+1]).
	ranks, ids := rankBuf[:n-1], idBuf[:n-1]
	for i := 0; i+1 < n; i++ {
		ranks[i], ids[i] = m.rank(sym[i], sym[i+1])
	}
	for len(sym) > 1 {
		best := 0
		for i := 1; i < len(ranks); i++ {
			if ranks[i] < ranks[best] {
				best = i
			}
		}
		if ranks[best] == noRank {
			break
		}
		sym[best] = ids[best]
		copy(sym[best+1:], sym[best+2:])
		sym = sym[:len(sym)-1]
		copy(ranks[best:], ranks[best+1:])
		copy(ids[best:], ids[best+1:])
		ranks, ids = ranks[:len(ranks)-1], ids[:len(ids)-1]
		if best > 0 {
			ranks[best-1], ids[best-1] = m.rank(sym[best-1], sym[best])
		}
		if best < len(ranks) {
			ranks[best], ids[best] = m.rank(sym[best], sym[best+1])
		}
	}
	return append(dst, sym...)
}

// appendHeap is the merge loop for long words: symbols in a doubly linked
// list, candidate merges in a min-heap ordered by (rank, position). Stale
// candidates (a side already merged away) are skipped when popped, as in
// HuggingFace's implementation.
func (m *model) appendHeap(dst []uint32, sym []uint32) []uint32 {
	n := len(sym)
	syms := make([]heapSym, n)
	for i := 0; i < n; i++ {
		syms[i] = heapSym{id: sym[i], prev: int32(i) - 1, next: int32(i) + 1, alive: true}
	}
	syms[n-1].next = -1
	h := make(mergeHeap, 0, n)
	for i := 0; i+1 < n; i++ {
		if r, id := m.rank(syms[i].id, syms[i+1].id); r != noRank {
			h.push(mergeCand{key: candKey(r, int32(i)), left: syms[i].id, right: syms[i+1].id, id: id})
		}
	}
	for len(h) > 0 {
		c := h.pop()
		pos := c.pos()
		l := &syms[pos]
		if !l.alive || l.id != c.left || l.next < 0 {
			continue
		}
		r := &syms[l.next]
		if r.id != c.right {
			continue
		}
		l.id = c.id
		r.alive = false
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = pos
		}
		if l.prev >= 0 {
			p := &syms[l.prev]
			if rk, id := m.rank(p.id, l.id); rk != noRank {
				h.push(mergeCand{key: candKey(rk, l.prev), left: p.id, right: l.id, id: id})
			}
		}
		if l.next >= 0 {
			nx := &syms[l.next]
			if rk, id := m.rank(l.id, nx.id); rk != noRank {
				h.push(mergeCand{key: candKey(rk, pos), left: l.id, right: nx.id, id: id})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}

type heapSym struct {
	id         uint32
	prev, next int32
	alive      bool
}

// mergeCand is a candidate merge; key packs (rank, position) so that one
// integer comparison orders the heap.
type mergeCand struct {
	key   uint64
	left  uint32
	right uint32
	id    uint32
}

func candKey(rank uint32, pos int32) uint64 { return uint64(rank)<<32 | uint64(uint32(pos)) }

func (c mergeCand) pos() int32 { return int32(uint32(c.key)) }

// mergeHeap is a binary min-heap of merge candidates by (rank, position),
// written out to avoid boxing each candidate in an interface.
type mergeHeap []mergeCand

func (c mergeCand) less(o mergeCand) bool { return c.key < o.key }

func (h *mergeHeap) push(c mergeCand) {
	*h = append(*h, c)
	a := *h
	i := len(a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !a[i].less(a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeCand {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(a) {
			break
		}
		m := l
		if r := l + 1; r < len(a) && a[r].less(a[l]) {
			m = r
		}
		if !a[m].less(a[i]) {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}
