package fleet

import "fmt"

// ChangeKind says what happened to a registered record's key. It is the
// vocabulary between a registry (which watches records come and go) and
// the Directory (which turns the changes into notifications).
type ChangeKind uint8

// Change kinds.
const (
	// Put: the key was created or updated (Value is set).
	Put ChangeKind = iota + 1
	// Deleted: the owner deleted the key (or it left the bucket before its
	// TTL ran out while the watch was interrupted).
	Deleted
	// Expired: the key's heartbeats stopped for longer than the TTL.
	Expired
	// Synced: every value present when the watch started has been
	// delivered; later changes are live. Sent once.
	Synced
	// Invalid: a value could not be decoded (Err says why); the key is
	// otherwise ignored.
	Invalid
)

var changeNames = [...]string{"", "put", "deleted", "expired", "synced", "invalid"}

// String names the kind.
func (k ChangeKind) String() string {
	if int(k) < len(changeNames) && k != 0 {
		return changeNames[k]
	}
	return fmt.Sprintf("ChangeKind(%d)", uint8(k))
}

// Change is one change of a registry of records of type T, as a registry
// watcher reports it and Directory.Apply takes it.
type Change[T any] struct {
	// Kind says what happened.
	Kind ChangeKind
	// Key is the record's key (empty for Synced).
	Key string
	// Value is the record (Put only).
	Value T
	// Initial is true for values present when the watch started.
	Initial bool
	// Err is the decoding error (Invalid only).
	Err error
	// Lapsed (Put only) says the key expired and was put again while the
	// watcher could not hear it, during this router's own NATS outage:
	// nobody's heartbeats got through, so the lapse may be the outage's
	// and not the owner's. The directory keeps a worker whose record came
	// back from the same instance, and replaces (Removed, Added) one that
	// came back from another. (A lapse the watcher could have heard is
	// reported as Expired, then Put.)
	Lapsed bool
}
