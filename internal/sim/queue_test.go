package sim

import (
	"math"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/admission"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/workload"
)

// burst is 256 shared-prefix requests at once: far more prefill than 4
// small workers hold below the thresholds.
func burst() (workload.Source, error) {
	c := workload.DefaultSharedPrefixConfig()
	c.NumGroups, c.PromptsPerGroup, c.SystemPromptLen, c.QuestionLen, c.OutputLen = 32, 8, 512, 1024, 16
	c.RequestRate = math.Inf(1)
	return workload.NewSharedPrefix(c)
}

// TestQueueServesABurstRejectRefuses: a burst that reject-on-busy
// refuses in part is served whole by the queue (nothing times out with
// no timeout), every request counted once, and a second run gives the
// same result.
func TestQueueServesABurstRejectRefuses(t *testing.T) {
	th := scheduler.Thresholds{ActivePrefillTokensThresholdFrac: 1}
	reject := smallConfig()
	reject.Engine.NumGPUBlocks = 4096
	reject.Router.Scheduler.ActivePrefillTokensThresholdFrac = th.ActivePrefillTokensThresholdFrac
	queue := smallConfig()
	queue.Engine.NumGPUBlocks = 4096
	for _, p := range admission.Policies {
		a := admission.DefaultConfig()
		a.Policy = p
		queue.Queue = &QueueConfig{Thresholds: th, Admission: a}
		var runs []Outcome
		for range 2 {
			src, _ := burst()
			o, err := Run(queue, "kv", src, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, o)
		}
		o := runs[0]
		t.Logf("queue %s: %d served, %d failed, queued %d, longest %d, ttft p50 %.0f p99 %.0f ms, goodput %d",
			p, o.Result.Requests, o.Result.Failed, o.Queue.Queued, o.Queue.MaxDepth, o.Result.TTFTP50Ms, o.Result.TTFTP99Ms, o.Goodput(2*time.Second))
		if o.Result.Requests != 256 || o.Result.Failed != 0 || o.Queue.Queued == 0 || o.Queue.MaxDepth == 0 {
			t.Fatalf("queue %s: %+v, queue %+v", p, o.Result, o.Queue)
		}
		if runs[1].Result != o.Result || runs[1].Queue.Queued != o.Queue.Queued {
			t.Fatalf("queue %s: two runs differ", p)
		}
	}
	src, _ := burst()
	r, err := Run(reject, "kv", src, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reject: %d served, %d refused", r.Result.Requests, r.Result.Failed)
	if r.Result.Failed == 0 || r.Result.Requests+r.Result.Failed != 256 {
		t.Fatalf("reject-on-busy refused none of the burst: %+v", r.Result)
	}
}

// TestQueueTimeoutFails: with a timeout shorter than the burst takes,
// some requests time out, and they count as failed, not as served.
func TestQueueTimeoutFails(t *testing.T) {
	cfg := smallConfig()
	cfg.Engine.NumGPUBlocks = 4096
	cfg.Queue = &QueueConfig{Thresholds: scheduler.Thresholds{ActivePrefillTokensThresholdFrac: 1}, Admission: admission.DefaultConfig(),
		Timeout: 200 * time.Millisecond}
	src, _ := burst()
	o, err := Run(cfg, "kv", src, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Queue.TimedOut == 0 || o.Result.Failed != o.Queue.TimedOut || o.Result.Requests+o.Result.Failed != 256 {
		t.Fatalf("result %+v, queue %+v", o.Result, o.Queue)
	}
}
