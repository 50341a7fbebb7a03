// Package admission orders the requests that wait while every eligible
// worker is saturated: a bounded queue with a choice of policy (first come
// first served, shortest predicted prefill first with aging, strict
// priority tiers), weighted fair queueing between tenants, per-tenant
// in-flight caps and per-request deadlines.
//
// Why it exists: when the fleet is over its busy thresholds the front door
// used to answer 503 at once, and a burst from one client was refused
// together with everyone else's steady traffic. Waiting a little is better
// for the client, and the order of release decides who waits: FCFS keeps
// the tail short, shortest-first keeps the mean short, tiers let urgent
// work overtake, and fair queueing keeps one tenant's burst from starving
// another. This package is only the ordering: the waiting (goroutines,
// timers, client disconnects) lives at the edge (the front door, the
// simulator), which asks Pop for the next request whenever capacity frees.
//
// It is pure: no I/O, no goroutines, no clock; every call that needs the
// time takes it. It is not safe for concurrent use: the caller serialises.
//
// One Queue meters one set of workers. A front door serving several
// models keeps one per model pool (each released only while its own
// pool has room) and makes them with NewShared over one Ledger, so that
// TenantInFlight caps a tenant's requests of every model together;
// MergeViews shows them as one.
//
// Order of release, in three levels:
//
//  1. Tier (PolicyPriority only): the lowest Priority value first, as
//     vLLM's priority scheduling has it.
//  2. Tenant: among the tenants with a request waiting in that tier and
//     below their in-flight cap, the one that has received the least
//     service relative to its weight (start-time fair queueing: a request
//     of cost c charges its tenant c / weight when released; a tenant that
//     starts waiting again is brought up to the current virtual time less
//     BurstCredit, so an idle tenant banks at most that much credit: 0
//     by default, none).
//  3. Within the tenant and tier: arrival order (FCFS, PolicyPriority) or
//     shortest predicted prefill first with aging (PolicyWSPT): the key is
//     cost + AgingTokensPerSecond × arrival, so a request that has waited
//     w seconds counts as AgingTokensPerSecond × w tokens shorter, and no
//     request that arrives more than cost / AgingTokensPerSecond seconds
//     after it can overtake it.
//
// Bounds: at most MaxLen requests wait. A request that arrives at a full
// queue is refused with ErrOverShare when its tenant already holds its
// weighted share of the queue, and otherwise pushes out the last request
// of the tenant furthest over its share (returned to the caller, who
// answers it as over share too): a tenant's burst fills the queue only
// while nobody else needs it.
//
// Deadline-aware release (TTFTTarget): a queue absorbs bursts, but when
// arrivals exceed what the fleet serves for longer than a burst it never
// drains, and the request released next has often waited so long that,
// with its prefill on top, it misses its time to first token anyway;
// serving it spends capacity another request could have met its target
// with. So the caller, having routed the request it popped, predicts the
// least its prefill can take on the chosen worker (LeastPrefill: its own
// uncached tokens beside that worker's running decodes, from the
// worker's fitted time model, nothing queued ahead counted) and asks
// Late; a request that cannot make the target even so is refused and the
// next one released. Only certain misses are refused (the queued work
// ahead is left out because counting it refused requests that would
// have made it: docs/benchmarks.md, "Overload"), and bursts are
// untouched: a request that can still make it is served however long it
// waited (within the caller's timeout).
//
// Staggered release (StaggerGap or StaggerAuto, stagger.go): while one tenant crowds
// another, the caller asks Hold before releasing the crowding tenant's
// request, which may hold it briefly so that the workers' prefills end
// spread out in time; a light tenant's request then waits for the next
// of them, not for all. The caller notes each routed request's predicted
// prefill end (Started) and its first token (Finished).
package admission
