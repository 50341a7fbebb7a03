package index

// counters are the index's running tallies.
type counters struct {
	events, blockOps, duplicateStores                 uint64
	invalid, unknownParent, unknownRemoval, conflicts uint64
	evicted, expired, pruned                          uint64
}

// Stats is a snapshot of the index's counters and sizes, for metrics.
type Stats struct {
	// Events counts events given to Apply (applied or refused).
	Events uint64
	// BlockOps counts blocks stored or removed by applied events.
	BlockOps uint64
	// Invalid counts events refused as malformed (ErrInvalid).
	Invalid uint64
	// UnknownParent counts stored events refused for an unknown parent.
	UnknownParent uint64
	// UnknownRemoval counts removed hashes the worker did not hold.
	UnknownRemoval uint64
	// Conflicts counts stored events cut short by an engine-hash conflict.
	Conflicts uint64
	// DuplicateStores counts blocks stored again for a worker rank and
	// tier that already held them (same engine hash, same parent and local
	// hash): each adds a reference, so the block stays until removed as
	// many times as it was stored.
	DuplicateStores uint64
	// Evicted counts (worker, block) entries evicted by the byte budget.
	Evicted uint64
	// Expired counts approximate/predicted entries dropped by their TTL.
	Expired uint64
	// Pruned counts approximate entries dropped by the size cap.
	Pruned uint64
	// Nodes is the number of tree nodes (distinct prefixes) indexed.
	Nodes int
	// Entries is the number of (worker rank, block) pairs indexed.
	Entries int
	// Workers is the number of worker ranks (and predict shadows) tracked.
	Workers int
	// Bytes is the estimated memory of the index's structures.
	Bytes int64
}

// Stats returns the current counters.
func (x *Index) Stats() Stats {
	s := Stats{
		Events: x.stats.events, BlockOps: x.stats.blockOps, Invalid: x.stats.invalid,
		UnknownParent: x.stats.unknownParent, UnknownRemoval: x.stats.unknownRemoval,
		Conflicts: x.stats.conflicts, DuplicateStores: x.stats.duplicateStores, Evicted: x.stats.evicted, Expired: x.stats.expired,
		Pruned: x.stats.pruned, Nodes: x.ns.live, Bytes: x.liveBytes(),
	}
	for i := range x.holders {
		if x.holders[i].live {
			s.Workers++
			s.Entries += x.holders[i].blocks
		}
	}
	return s
}
