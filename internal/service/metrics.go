package service

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// collector reads the worker states and the directory's counts, the
// index's sizes and counters and the router's counters at scrape time, so
// they cost nothing between scrapes and can never disagree with
// /v1/workers.
type collector struct{ s *Service }

var _ prometheus.Collector = (*collector)(nil)

var (
	workerStateDesc = prometheus.NewDesc("kvrouter_worker_state",
		"1 for each worker's current state (EXACT, DEGRADED, APPROX, DOWN, REFUSED), 0 for the others.", []string{"worker", "state"}, nil)
	workerRoleDesc = prometheus.NewDesc("kvrouter_worker_role",
		"1 for each worker's role in a disaggregated fleet (prefill, decode, both).", []string{"worker", "role"}, nil)
	indexNodesDesc = prometheus.NewDesc("kvrouter_index_nodes",
		"Distinct prefixes (tree nodes) in the prefix index.", nil, nil)
	indexEntriesDesc = prometheus.NewDesc("kvrouter_index_entries",
		"(worker rank, block) pairs in the prefix index.", nil, nil)
	indexBytesDesc = prometheus.NewDesc("kvrouter_index_bytes",
		"Estimated memory of the prefix index's structures, in bytes.", nil, nil)
	indexWorkersDesc = prometheus.NewDesc("kvrouter_index_worker_ranks",
		"Worker ranks (and predict shadows) the prefix index tracks.", nil, nil)
	indexEventsDesc = prometheus.NewDesc("kvrouter_index_events_total",
		"KV events given to the prefix index (applied or refused).", nil, nil)
	ingestedDesc = prometheus.NewDesc("kvrouter_kv_events_ingested_total",
		"KV events handed to the index through the router, by the transport that carried them (engine: an engine's vLLM ZMQ stream; nats, durable, zmq: RouterEvents on the event plane), recovery replays and restored snapshots included.", []string{"transport"}, nil)
	indexBlockOpsDesc = prometheus.NewDesc("kvrouter_index_block_ops_total",
		"Blocks stored or removed by applied events.", nil, nil)
	indexDuplicatesDesc = prometheus.NewDesc("kvrouter_index_duplicate_stores_total",
		"Blocks stored again for a worker rank and tier that already held them; each adds a reference, so the block stays until removed as often as it was stored.", nil, nil)
	indexRefusedDesc = prometheus.NewDesc("kvrouter_index_events_refused_total",
		"Events or removals the index refused, by reason (invalid, unknown_parent, unknown_removal, conflict).", []string{"reason"}, nil)
	indexDroppedDesc = prometheus.NewDesc("kvrouter_index_entries_dropped_total",
		"Index entries dropped, by cause (evicted by the byte budget, expired TTL, pruned by the size cap).", []string{"cause"}, nil)
	routerRoutedDesc = prometheus.NewDesc("kvrouter_router_routed_total",
		"Requests booked by the router.", nil, nil)
	routerRejectedDesc = prometheus.NewDesc("kvrouter_router_rejected_total",
		"Routing decisions that failed (no candidates, all busy, bad request).", nil, nil)
	routerExpiredDesc = prometheus.NewDesc("kvrouter_router_bookings_expired_total",
		"Bookings freed by the ledger's expiry (--router-request-expiry) because their Free never came.", nil, nil)
	dirRefusedDesc = prometheus.NewDesc("kvrouter_discovery_workers_refused_total",
		"Workers refused because they break the router's contract, by reason (block_size, hash_contract).", []string{"reason"}, nil)
	dirConflictsDesc = prometheus.NewDesc("kvrouter_discovery_conflicts_total",
		"Registry records ignored because a static worker or another record has the same id or name.", nil, nil)
	dirConflictingDesc = prometheus.NewDesc("kvrouter_discovery_conflicting_records",
		"Registry records ignored now because a static worker or another record has the same id or name.", nil, nil)
	dirURLChangesDesc = prometheus.NewDesc("kvrouter_discovery_url_changes_total",
		"Changes of a known worker's URL (each logged at WARN with the old and new URL).", nil, nil)
	dirTakeoversDesc = prometheus.NewDesc("kvrouter_discovery_takeovers_total",
		"Registry keys written by a second live process (another instance id while the first still heartbeats); its records are ignored.", nil, nil)
	dirInvalidDesc = prometheus.NewDesc("kvrouter_discovery_invalid_records_total",
		"Registry records that could not be decoded or failed validation.", nil, nil)
	dirWorkersDesc = prometheus.NewDesc("kvrouter_discovery_workers",
		"Known workers by state.", []string{"state"}, nil)
)

var allStates = []fleet.State{fleet.StateExact, fleet.StateDegraded, fleet.StateApprox, fleet.StateDown, fleet.StateRefused}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{workerStateDesc, workerRoleDesc, indexNodesDesc, indexEntriesDesc, indexBytesDesc, indexWorkersDesc,
		indexEventsDesc, ingestedDesc, indexBlockOpsDesc, indexDuplicatesDesc, indexRefusedDesc, indexDroppedDesc, routerRoutedDesc, routerRejectedDesc, routerExpiredDesc,
		dirRefusedDesc, dirConflictsDesc, dirConflictingDesc, dirURLChangesDesc, dirTakeoversDesc, dirInvalidDesc, dirWorkersDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, w := range c.s.dir.Workers() {
		for _, st := range allStates {
			v := 0.0
			if w.Status.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(workerStateDesc, prometheus.GaugeValue, v, w.Record.Name, st.String())
		}
		ch <- prometheus.MustNewConstMetric(workerRoleDesc, prometheus.GaugeValue, 1, w.Record.Name, string(w.Record.Role.Normal()))
	}
	is := c.s.idx.Stats()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge(indexNodesDesc, float64(is.Nodes))
	gauge(indexEntriesDesc, float64(is.Entries))
	gauge(indexBytesDesc, float64(is.Bytes))
	gauge(indexWorkersDesc, float64(is.Workers))
	counter(indexEventsDesc, is.Events)
	for t := range numTransports {
		counter(ingestedDesc, c.s.workers.ingested[t].Load(), t.String())
	}
	counter(indexBlockOpsDesc, is.BlockOps)
	counter(indexDuplicatesDesc, is.DuplicateStores)
	counter(indexRefusedDesc, is.Invalid, "invalid")
	counter(indexRefusedDesc, is.UnknownParent, "unknown_parent")
	counter(indexRefusedDesc, is.UnknownRemoval, "unknown_removal")
	counter(indexRefusedDesc, is.Conflicts, "conflict")
	counter(indexDroppedDesc, is.Evicted, "evicted")
	counter(indexDroppedDesc, is.Expired, "expired")
	counter(indexDroppedDesc, is.Pruned, "pruned")
	rs := c.s.pools.Stats()
	counter(routerRoutedDesc, rs.Routed)
	counter(routerRejectedDesc, rs.Rejected)
	counter(routerExpiredDesc, rs.Sequences.Expired)
	ds := c.s.dir.Stats()
	for reason, n := range ds.Refused {
		counter(dirRefusedDesc, n, reason)
	}
	counter(dirConflictsDesc, ds.Conflicts)
	gauge(dirConflictingDesc, float64(ds.Conflicting))
	counter(dirURLChangesDesc, ds.URLChanges)
	counter(dirTakeoversDesc, ds.Takeovers)
	counter(dirInvalidDesc, ds.Invalid)
	for st, n := range ds.Workers {
		gauge(dirWorkersDesc, float64(n), fleet.State(st).String())
	}
}

// registerRuntime adds the Go runtime (go_*) and process (process_*, where
// the platform supports it) collectors to reg, as a Prometheus client's
// default registry would have them; a registry that has them already is
// left as it is.
func registerRuntime(reg *prometheus.Registry) error {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return fmt.Errorf("registering runtime metrics: %w", err)
			}
		}
	}
	return nil
}
