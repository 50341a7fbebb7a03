package tokenizer

import (
	"container/list"
	"strings"
	"sync"
)

// segmentCache remembers the ids of long stretches of text between added
// tokens. A chat prompt is "<|im_start|>role\n…content…<|im_end|>\n" per
// message, so each message's text is one such stretch, and a multi-turn
// conversation re-sends all earlier messages with every request: with this
// cache only the new message is tokenized.
//
// Caching at these boundaries is exact, not an approximation: HuggingFace
// splits added tokens out before anything else, and every later step
// (normalizer, pre-tokenizer, BPE) sees one stretch at a time, so a
// stretch's ids never depend on its neighbours.
//
// Eviction is least-recently-used under a byte budget counting the text and
// its ids.
type segmentCache struct {
	mu     sync.Mutex
	budget int
	used   int
	lru    *list.List // front = most recent; values are *segEntry
	byText map[string]*list.Element
}

type segEntry struct {
	text string
	ids  []uint32
}

// minSegment is the shortest stretch (bytes) worth caching: shorter ones
// encode in a few microseconds anyway.
const minSegment = 256

func newSegmentCache(budget int) *segmentCache {
	if budget <= 0 {
		return nil
	}
	return &segmentCache{budget: budget, lru: list.New(), byText: make(map[string]*list.Element)}
}

func entryCost(text string, ids []uint32) int { return len(text) + 4*len(ids) + 96 }

func (c *segmentCache) get(text string) ([]uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byText[text]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*segEntry).ids, true
}

// put stores a copy of text with ids (which the cache then owns).
func (c *segmentCache) put(text string, ids []uint32) {
	cost := entryCost(text, ids)
	if cost > c.budget/4 { // one entry may not flush most of the cache
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byText[text]; ok {
		return
	}
	text = strings.Clone(text)
	c.byText[text] = c.lru.PushFront(&segEntry{text: text, ids: ids})
	c.used += cost
	for c.used > c.budget {
		el := c.lru.Back()
		e := el.Value.(*segEntry)
		c.lru.Remove(el)
		delete(c.byText, e.text)
		c.used -= entryCost(e.text, e.ids)
	}
}
