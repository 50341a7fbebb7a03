package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/admission"
	"github.com/kvrouter/kvrouter/internal/report"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/workload"
)

// tenantRequests draws n shared-prefix requests at rate for tenant.
func tenantRequests(t *testing.T, tenant string, n int, rate float64, seed uint64, qlen int) []workload.Request {
	t.Helper()
	c := workload.DefaultSharedPrefixConfig()
	c.NumGroups, c.PromptsPerGroup = n/8, 8
	c.SystemPromptLen, c.QuestionLen, c.OutputLen = 1024, qlen, 32
	c.RequestRate, c.Seed = rate, seed
	src, err := workload.NewSharedPrefix(c)
	if err != nil {
		t.Fatal(err)
	}
	reqs := workload.Collect(src, 0)
	for i := range reqs {
		reqs[i].Tenant = tenant
	}
	return reqs
}

// merged interleaves request lists by arrival.
func merged(lists ...[]workload.Request) []workload.Request {
	var all []workload.Request
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.SortStableFunc(all, func(a, b workload.Request) int { return int(a.Arrival - b.Arrival) })
	return all
}

func fairnessFleet(q *QueueConfig) Config {
	cfg := DefaultConfig()
	cfg.Workers = 4
	cfg.Queue = q
	return cfg
}

// TestFairQueueingProtectsTheSmallTenant is the fairness scenario: on
// 4 workers, tenant a sends 80 requests/s (1,024-token shared system
// prompts, 4,096-token questions), 10× tenant b's rate and far more than
// the fleet serves. The admission queue (saturated above a quarter of
// max batched tokens pending, 5 s timeout) with fair queueing between
// tenants keeps b's TTFT near b's alone on the same fleet; without the
// queue b waits behind a's backlog in the engines.
//
// Measured (docs/benchmarks.md): b alone p50 86 ms, p99 116 ms; fair
// queue p50 117 ms (1.36×), p99 221 ms (1.9×); no queue p50/p99 in the
// tens of seconds. Under the flood b's time in the engine (TTFT less its
// queue wait) is no longer than alone: the whole excess is its wait in
// the router for the first of the workers' running steps to end. With
// the plain fair queue the p99 misses the 1.5× (staggered
// release below meets it): b's tail grows as soon as it shares the
// engines at all. With a at only 2× b's rate (16 requests/s, under the fleet's
// capacity, almost nothing queued) b's p99 is already 237 ms (2.0×):
// b's prefills share engine steps with a's prefill chunks and decodes,
// which a router cannot preempt. Under the 10× flood fair queueing keeps
// b at least as well off as beside that light co-tenant, which is what
// fairness can promise. The test asserts what holds: p50 within 1.5×,
// p99 within 2.5× of alone and within 1.1× of beside the light
// co-tenant, and at least 10× better than without the queue.
//
// The engines' long-prefill threshold (vLLM's
// long_prefill_token_threshold; 512, 1,024 and 2,048 tried, b alone
// measured on the same capped engines) does not reach 1.5× either: b's
// p99 ratio falls to 1.6× at 2,048 only because b alone gets slower
// (its own prompts are chunked), while b's p99 under the flood rises from
// 221 to 298 ms and a is served 20 % fewer requests; smaller caps are
// worse on both. The router still counts a's prompt pending until its
// first token, so b still waits for one of a's (now longer) prefills to
// end, not for a step. Figures in docs/benchmarks.md.
//
// What meets 1.5× (2026-12-06, second session): staggered release
// (admission.Config.StaggerGap 22 ms: a's releases are held a little so
// that the workers' prefills end spread out, and b waits for the next of
// them rather than for all four ending together) with a burst credit of
// 10,240 tokens (b's occasional burst of two or three requests goes
// ahead of a instead of alternating with it). Neither alone reaches it
// (1.6–2.0× and 1.6–1.8× over five workload seeds); together b's p99 is
// 1.37–1.45× its p99 alone on every seed, and a is served 6–9 % fewer
// requests (the time a hold leaves a worker idle). The automatic gap
// (admission.Config.StaggerAuto: each held request's predicted prefill ÷
// the prefills running + 1, no time constant) with a credit of 16,384
// tokens gives 1.31–1.48×, a served 10–13 % fewer. The test asserts, for
// both settings on each of the five seeds, b's p99 within 1.5× of b
// alone on the same seed, and a served at least 75 % of what it is under
// the plain fair queue.
func TestFairQueueingProtectsTheSmallTenant(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of simulation")
	}
	a := tenantRequests(t, "a", 2400, 80, 11, 4096)
	b := tenantRequests(t, "b", 240, 8, 12, 4096)
	queue := func() *QueueConfig {
		c := admission.DefaultConfig()
		c.MaxLen = 512
		return &QueueConfig{Thresholds: scheduler.Thresholds{ActivePrefillTokensThresholdFrac: 0.25}, Admission: c, Timeout: 5 * time.Second}
	}
	type tenantB struct{ ttft, wait, engine report.Summary }
	run := func(name, policy string, cfg Config, reqs []workload.Request) tenantB {
		o, err := Run(cfg, policy, workload.NewSlice(reqs, 0), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		ttfts, waits := o.Queue.TenantTTFTs["b"], o.Queue.TenantWaits["b"]
		engine := make([]float64, len(ttfts))
		for i := range ttfts {
			engine[i] = ttfts[i] - waits[i]
		}
		r, bs := o.Result, tenantB{report.Summarize(ttfts), report.Summarize(waits), report.Summarize(engine)}
		t.Logf("%s (%s): %d done, %d refused, ttft p50 %.0f ms p99 %.0f ms; b: %d served, p50 %.0f ms, p99 %.0f ms (queue wait p50 %.0f p99 %.0f, engine p50 %.0f p99 %.0f); a served %d; queued %d, timed out %d, full %d",
			name, policy, r.Requests, r.Failed, r.TTFTP50Ms, r.TTFTP99Ms, len(ttfts), bs.ttft.P50, bs.ttft.P99, bs.wait.P50, bs.wait.P99,
			bs.engine.P50, bs.engine.P99, len(o.Queue.TenantTTFTs["a"]), o.Queue.Queued, o.Queue.TimedOut, o.Queue.Refused)
		if len(ttfts) != len(b) {
			t.Fatalf("%s: b had %d of %d requests served", name, len(ttfts), len(b))
		}
		if !strings.HasSuffix(name, "b alone") && r.Failed == 0 && o.Queue.Queued == 0 && r.TTFTP99Ms < 5000 {
			t.Fatalf("%s: a's flood neither queued, failed nor slowed: the scenario does not overload the fleet", name)
		}
		return bs
	}
	aloneB := run("b alone", "kv", fairnessFleet(nil), b)
	alone := aloneB.ttft
	fairB := run("a+b, fair queue", "kv", fairnessFleet(queue()), merged(a, b))
	fair := fairB.ttft
	none := run("a+b, no queue", "kv", fairnessFleet(nil), merged(a, b)).ttft
	light := run("a at 2× b, fair queue", "kv", fairnessFleet(queue()), merged(tenantRequests(t, "a", 480, 16, 11, 4096), b)).ttft
	// The kv-time policy (it predicts each worker's drain) for both runs:
	// recorded in docs/benchmarks.md, not asserted.
	run("b alone", "kv-time", fairnessFleet(nil), b)
	run("a+b, fair queue", "kv-time", fairnessFleet(queue()), merged(a, b))
	// The engines' long-prefill threshold (vLLM's
	// long_prefill_token_threshold), b alone and the flood on the same
	// capped engines: recorded in docs/benchmarks.md, not asserted but
	// for one check that the cap reaches the engines (b's own prompts are
	// prefilled in chunks, so alone it is slower).
	for _, th := range []int{512, 1024, 2048} {
		capped := func(q *QueueConfig) Config {
			c := fairnessFleet(q)
			c.Engine.LongPrefillTokenThreshold = th
			return c
		}
		name := fmt.Sprintf("long-prefill-token-threshold %d: ", th)
		cappedAlone := run(name+"b alone", "kv", capped(nil), b).ttft
		run(name+"a+b, fair queue", "kv", capped(queue()), merged(a, b))
		if cappedAlone.P50 <= alone.P50 {
			t.Fatalf("%sb alone p50 %.0f ms, uncapped %.0f ms: the engines do not chunk b's 4,096-token prefills", name, cappedAlone.P50, alone.P50)
		}
	}
	// b's time in the engine is what it is alone: the flood's whole cost
	// to b is its wait in the router for a worker's running step to end.
	if fairB.engine.P99 > 1.2*aloneB.engine.P99 {
		t.Fatalf("b's engine time under the flood p99 %.0f ms, alone %.0f ms: the flood slows b inside the engines", fairB.engine.P99, aloneB.engine.P99)
	}
	if fair.P50 > 1.5*alone.P50 || fair.P99 > 2.5*alone.P99 {
		t.Fatalf("b with fair queueing p50 %.0f p99 %.0f ms, alone %.0f / %.0f ms: over 1.5× (p50) or 2.5× (p99)", fair.P50, fair.P99, alone.P50, alone.P99)
	}
	if fair.P99 > 1.1*light.P99 {
		t.Fatalf("b under a's 10× flood p99 %.0f ms, beside a at 2× %.0f ms: the flood should cost b no more than a light co-tenant", fair.P99, light.P99)
	}
	if none.P99 < 10*fair.P99 {
		t.Fatalf("b without the queue p99 %.0f ms, with it %.0f ms: the queue should help b at least 10×", none.P99, fair.P99)
	}
	staggeredMeetsTheBar(t)
}

// staggeredMeetsTheBar runs the flood with staggered release and a burst
// credit (and each alone, logged for docs/benchmarks.md) on five
// workload seeds: b's p99 within 1.5× of b alone on the same seed, a
// served at least 75 % of its count under the plain fair queue.
func staggeredMeetsTheBar(t *testing.T) {
	const auto = -1 // the automatic gap
	queue := func(credit float64, gap time.Duration) *QueueConfig {
		c := admission.DefaultConfig()
		c.MaxLen, c.BurstCredit, c.StaggerGap = 512, credit, gap
		if gap == auto {
			c.StaggerGap, c.StaggerAuto = 0, true
		}
		return &QueueConfig{Thresholds: scheduler.Thresholds{ActivePrefillTokensThresholdFrac: 0.25}, Admission: c, Timeout: 5 * time.Second}
	}
	type row struct {
		b, wait report.Summary
		a       int
	}
	run := func(q *QueueConfig, reqs []workload.Request) row {
		o, err := Run(fairnessFleet(q), "kv", workload.NewSlice(reqs, 0), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		return row{report.Summarize(o.Queue.TenantTTFTs["b"]), report.Summarize(o.Queue.TenantWaits["b"]), len(o.Queue.TenantTTFTs["a"])}
	}
	for _, seed := range []uint64{11, 21, 31, 41, 51} {
		a := tenantRequests(t, "a", 2400, 80, seed, 4096)
		b := tenantRequests(t, "b", 240, 8, seed+1, 4096)
		alone := run(nil, b).b
		plain := run(queue(0, 0), merged(a, b))
		credit := run(queue(10240, 0), merged(a, b))
		stagger := run(queue(0, 22*time.Millisecond), merged(a, b))
		both := run(queue(10240, 22*time.Millisecond), merged(a, b))
		autoBoth := run(queue(16384, auto), merged(a, b))
		line := func(r row) string {
			return fmt.Sprintf("b p50 %.0f p99 %.0f ms (%.2f×, wait p99 %.0f ms), a served %d", r.b.P50, r.b.P99, r.b.P99/alone.P99, r.wait.P99, r.a)
		}
		t.Logf("seed %d: b alone p50 %.0f p99 %.0f ms; fair queue: %s; + burst credit 10240: %s; + stagger 22 ms: %s; both: %s; auto gap + credit 16384: %s",
			seed, alone.P50, alone.P99, line(plain), line(credit), line(stagger), line(both), line(autoBoth))
		for _, c := range []struct {
			name string
			r    row
		}{{"staggered release (22 ms) and burst credit 10240", both}, {"the automatic gap and burst credit 16384", autoBoth}} {
			if c.r.b.P99 > 1.5*alone.P99 {
				t.Errorf("seed %d: b's p99 with %s %.0f ms, alone %.0f ms: over 1.5×", seed, c.name, c.r.b.P99, alone.P99)
			}
			if float64(c.r.a) < 0.75*float64(plain.a) {
				t.Errorf("seed %d: a served %d with %s, %d without: more than a quarter lost", seed, c.r.a, c.name, plain.a)
			}
		}
	}
}
