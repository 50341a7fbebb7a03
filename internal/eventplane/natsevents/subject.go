package natsevents

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// QueryTopic is the topic worker ranks answer recovery queries on.
const QueryTopic = "kv-query"

// QuerySubject returns the subject worker rank w answers recovery queries
// on: "namespace.{ns}.component.{comp}.kv-query.{worker_id}.{dp_rank}".
func QuerySubject(namespace, component string, w kvevent.WorkerRank) string {
	return fmt.Sprintf("namespace.%s.component.%s.%s.%d.%d", namespace, component, QueryTopic, uint64(w.ID), uint32(w.Rank))
}
