package timeline

import "time"

// Ring holds at most one value per time slot of a fixed step, for the
// last Len slots. Slots are numbered from the Unix epoch (slot n starts at
// n*step), so rings with the same step agree on slot boundaries. The
// memory is fixed at construction. Not safe for concurrent use.
type Ring[T any] struct {
	step  time.Duration
	slots []entry[T]
	// newest is the highest slot number stored; -1 before the first Put.
	newest int64
}

type entry[T any] struct {
	slot int64
	ok   bool
	v    T
}

// Stored is one stored value and the start of its slot.
type Stored[T any] struct {
	// Slot is the slot number (Start = Slot × step since the epoch).
	Slot int64
	// Start is when the slot began.
	Start time.Time
	// V is the value stored in the slot.
	V T
}

// NewRing returns a ring of n slots of step each (n ≥ 1, step > 0; smaller
// values are raised to those).
func NewRing[T any](step time.Duration, n int) *Ring[T] {
	return &Ring[T]{step: max(step, 1), slots: make([]entry[T], max(n, 1)), newest: -1}
}

// Len is the number of slots.
func (r *Ring[T]) Len() int { return len(r.slots) }

// Step is the slot width.
func (r *Ring[T]) Step() time.Duration { return r.step }

// SlotOf returns the number of the slot holding instant t (slots before
// the epoch are clamped to 0).
func (r *Ring[T]) SlotOf(t time.Time) int64 {
	ns := t.UnixNano()
	if ns < 0 {
		return 0
	}
	return ns / int64(r.step)
}

// SlotStart returns when slot s begins.
func (r *Ring[T]) SlotStart(s int64) time.Time { return time.Unix(0, s*int64(r.step)) }

// Put stores v as slot s's value, replacing an earlier one. A slot older
// than the newest stored one minus Len is dropped (it would overwrite a
// newer one); it reports whether v was stored.
func (r *Ring[T]) Put(s int64, v T) bool {
	if s < 0 || (r.newest >= 0 && s <= r.newest-int64(len(r.slots))) {
		return false
	}
	r.slots[s%int64(len(r.slots))] = entry[T]{slot: s, ok: true, v: v}
	r.newest = max(r.newest, s)
	return true
}

// Get returns slot s's value, if it is still held: stored, and not older
// than the newest stored slot minus Len.
func (r *Ring[T]) Get(s int64) (T, bool) {
	var zero T
	if s < 0 || s <= r.newest-int64(len(r.slots)) {
		return zero, false
	}
	e := r.slots[s%int64(len(r.slots))]
	if !e.ok || e.slot != s {
		return zero, false
	}
	return e.v, true
}

// Window returns the values of the Len slots ending with slot last
// (last-Len+1 … last), oldest first, skipping slots never stored.
func (r *Ring[T]) Window(last int64) []Stored[T] {
	n := int64(len(r.slots))
	out := make([]Stored[T], 0, n)
	for s := max(last-n+1, 0); s <= last; s++ {
		if v, ok := r.Get(s); ok {
			out = append(out, Stored[T]{Slot: s, Start: r.SlotStart(s), V: v})
		}
	}
	return out
}
