package replica

import (
	"math/rand/v2"
	"strconv"
)

// EventsSubject is the NATS subject replicas publish lifecycle events on:
// "namespace.{ns}.component.{comp}.active_sequences_events" (Dynamo's).
func EventsSubject(namespace, component string) string {
	return "namespace." + namespace + ".component." + component + ".active_sequences_events"
}

// SnapshotSubject is the subject on which router id answers snapshot
// requests: "namespace.{ns}.component.{comp}.active_sequences_snapshot.{id}".
func SnapshotSubject(namespace, component string, id uint64) string {
	return "namespace." + namespace + ".component." + component + ".active_sequences_snapshot." + strconv.FormatUint(id, 10)
}

// RecordKey is a replica's key in the replica bucket: its router id in
// decimal.
func RecordKey(id uint64) string { return strconv.FormatUint(id, 10) }

// NewRouterID returns a random non-zero router id, for replicas started
// without an explicit one (ids are never reused across restarts, so a
// restarted replica is a new peer and its predecessor's bookings are freed
// when the old record expires).
func NewRouterID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}
