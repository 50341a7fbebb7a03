package index

import "slices"

// node is one block of the prefix tree. Nodes live in fixed-size pages and
// are named by uint32 ids (0 is the root), so a node costs 32 bytes and no
// pointers for the garbage collector to scan.
type node struct {
	local  uint64 // local hash: the edge key under parent
	parent uint32
	first  uint32 // first child (0 = none)
	next   uint32 // next sibling, or next free node when on the free list
	prev   uint32 // previous sibling
	h      uint32 // n == 1: the holder entry; n >= 2: index into extra
	n      uint16 // number of holders
	lower  uint16 // holders whose tier mask is not device-only; top bit: inKids
}

// maxKeptList is the capacity up to which a holder list whose node is
// back to one holder keeps its storage for reuse.
const maxKeptList = 8

const (
	pageBits = 12
	pageSize = 1 << pageBits
	nodeSize = 32
)

// holder entries pack a holder id and a tier bit mask: id<<4 | mask.
func entry(id uint32, mask uint8) uint32 { return id<<4 | uint32(mask) }
func entryID(e uint32) uint32            { return e >> 4 }
func entryMask(e uint32) uint8           { return uint8(e & 0xf) }

const deviceMask = 1 << 0

// inKids marks (in node.lower) a node present in the child table. Only
// children of nodes with several children need to be there: a sole child
// is found through its parent's first pointer.
const inKids = 1 << 15

func (n *node) lowerCount() uint16 { return n.lower &^ inKids }

type nodes struct {
	pages []*[pageSize]node // fixed arrays: at() is one bounds check and two loads
	top   int               // ids used in the last page
	free  uint32            // head of the free list (0 = empty)
	live  int
	extra [][]uint32 // sorted holder lists of nodes with >= 2 holders
	xfree []uint32   // free indices into extra
	xlen  int        // total entries in extra lists (for the byte estimate)
}

func newNodes() *nodes {
	ns := &nodes{}
	ns.pages = []*[pageSize]node{new([pageSize]node)}
	ns.top = 1                 // id 0: the root
	ns.extra = [][]uint32{nil} // index 0 unused
	return ns
}

func (ns *nodes) at(id uint32) *node { return &ns.pages[id>>pageBits][id&(pageSize-1)] }

// allocated reports the number of node ids handed out so far (live, free
// or the root): ids are below it.
func (ns *nodes) allocated() int { return (len(ns.pages)-1)<<pageBits + ns.top }

func (ns *nodes) alloc(parent uint32, local uint64) (uint32, *node) {
	var id uint32
	if ns.free != 0 {
		id = ns.free
		ns.free = ns.at(id).next
	} else {
		if ns.top == pageSize {
			ns.pages = append(ns.pages, new([pageSize]node))
			ns.top = 0
		}
		id = uint32((len(ns.pages)-1)<<pageBits | ns.top)
		ns.top++
	}
	n := ns.at(id)
	pn := ns.at(parent)
	// Linked as the first child of parent.
	*n = node{local: local, parent: parent, next: pn.first}
	ns.live++
	if pn.first != 0 {
		ns.at(pn.first).prev = id
	}
	pn.first = id
	return id, n
}

// release unlinks a holder-less, childless node and puts it on the free list.
func (ns *nodes) release(id uint32) {
	n := ns.at(id)
	if n.prev != 0 {
		ns.at(n.prev).next = n.next
	} else {
		ns.at(n.parent).first = n.next
	}
	if n.next != 0 {
		ns.at(n.next).prev = n.prev
	}
	*n = node{next: ns.free}
	ns.free = id
	ns.live--
}

// holders returns the node's holder entries, sorted by id. The slice
// aliases internal storage for n >= 2; single is scratch for n == 1.
func (ns *nodes) holders(n *node, single *[1]uint32) []uint32 {
	switch n.n {
	case 0:
		return nil
	case 1:
		single[0] = n.h
		return single[:]
	}
	return ns.extra[n.h]
}

// find returns the index of holder id in the node's list and its entry.
func (ns *nodes) find(n *node, id uint32) (int, uint32, bool) {
	switch n.n {
	case 0:
		return 0, 0, false
	case 1:
		if entryID(n.h) == id {
			return 0, n.h, true
		}
		return 0, 0, false
	}
	l := ns.extra[n.h]
	i, ok := slices.BinarySearchFunc(l, id, func(e, id uint32) int {
		return int(entryID(e)) - int(id)
	})
	if ok {
		return i, l[i], true
	}
	return i, 0, false
}

// setMask sets holder id's tier mask on the node (mask 0 removes it).
// It returns the previous mask.
func (ns *nodes) setMask(n *node, id uint32, mask uint8) uint8 {
	i, old, ok := ns.find(n, id)
	oldMask := entryMask(old)
	if !ok {
		oldMask = 0
	}
	if oldMask == mask {
		return oldMask
	}
	if oldMask != 0 && oldMask != deviceMask {
		n.lower--
	}
	if mask != 0 && mask != deviceMask {
		n.lower++
	}
	e := entry(id, mask)
	switch {
	case ok && mask != 0: // update in place
		if n.n == 1 {
			n.h = e
		} else {
			ns.extra[n.h][i] = e
		}
	case ok: // remove
		if n.n == 1 {
			n.h = 0
			n.n = 0
			return oldMask
		}
		x := n.h
		l := slices.Delete(ns.extra[x], i, i+1)
		ns.xlen--
		n.n--
		if n.n == 1 {
			n.h = l[0]
			// Keep a short list's storage for the next node that gets a
			// second holder (predict-on-route entries come and go on
			// nodes an exact worker holds).
			if cap(l) > maxKeptList {
				l = nil
			}
			ns.extra[x] = l[:0]
			ns.xlen--
			ns.xfree = append(ns.xfree, x)
		} else {
			ns.extra[x] = l
		}
	default: // insert
		if n.n == 0 {
			n.h = e
			n.n = 1
			return 0
		}
		if n.n == 1 {
			var x uint32
			var l []uint32
			if k := len(ns.xfree); k > 0 {
				x = ns.xfree[k-1]
				ns.xfree = ns.xfree[:k-1]
				l = ns.extra[x][:0]
			} else {
				x = uint32(len(ns.extra))
				ns.extra = append(ns.extra, nil)
			}
			if l == nil {
				l = make([]uint32, 0, 2)
			}
			if entryID(n.h) < id {
				l = append(l, n.h, e)
			} else {
				l = append(l, e, n.h)
			}
			ns.extra[x] = l
			n.h = x
			n.n = 2
			ns.xlen += 2
			return 0
		}
		ns.extra[n.h] = slices.Insert(ns.extra[n.h], i, e)
		ns.xlen++
		n.n++
	}
	return oldMask
}
