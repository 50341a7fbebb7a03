package vllmzmq

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/vllm"
)

// counter is a Handler that counts events and closes done at a target.
type counter struct {
	n      atomic.Int64
	target int64
	done   chan struct{}
}

func (c *counter) Apply(_ uint64, evs []kvevent.Event) {
	if c.n.Add(int64(len(evs))) == c.target {
		close(c.done)
	}
}

func (*counter) StateChanged(StateChange) {}

// BenchmarkIngest measures one subscriber ingesting from one publisher
// over loopback TCP: batches of 8 four-block stores and 4 removals (12
// events, 36 blocks), encoded as current vLLM does.
func BenchmarkIngest(b *testing.B) {
	raw := vllm.RawBatch{TS: 1.7e9}
	h := uint64(1 << 40)
	for r := range 8 {
		s := vllm.BlockStored{ParentBlockHash: vllm.UintHash(h), BlockSize: 16, Medium: vllm.Str("GPU"),
			GroupIdx: vllm.Int(0), KVCacheSpecKind: vllm.Str("full_attention"), ExtraKeys: make([]vllm.ExtraKey, 4)}
		for i := range 4 {
			h++
			s.BlockHashes = append(s.BlockHashes, vllm.UintHash(h))
			for j := range 16 {
				s.TokenIDs = append(s.TokenIDs, uint32(100*r+16*i+j))
			}
		}
		raw.Events = append(raw.Events, s)
	}
	for i := range 4 {
		raw.Events = append(raw.Events, vllm.BlockRemoved{BlockHashes: []vllm.Hash{vllm.UintHash(uint64(i))}, Medium: vllm.Str("GPU")})
	}
	payload, err := vllm.Encode(raw, vllm.Format{})
	if err != nil {
		b.Fatal(err)
	}
	pc := DefaultPublisherConfig()
	pc.HWM, pc.BufferSteps, pc.ReplayEndpoint = 0, b.N+16, "tcp://127.0.0.1:0"
	p, err := NewPublisher(pc)
	if err != nil {
		b.Fatal(err)
	}
	c := &counter{target: int64(b.N * len(raw.Events)), done: make(chan struct{})}
	sc := DefaultSubscriberConfig()
	sc.Worker, sc.Endpoint, sc.ReplayEndpoint, sc.Logger = kvevent.WorkerRank{ID: 1}, p.Endpoint(), p.ReplayEndpoint(), quiet
	sub, err := NewSubscriber(sc, c)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	for sub.Status().State != StateExact || !slices.Contains(p.pub.(zmq4.Topics).Topics(), "") {
		time.Sleep(time.Millisecond)
	}
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	for range b.N {
		if _, err := p.PublishPayload(payload, FaultNone); err != nil {
			b.Fatal(err)
		}
	}
	<-c.done
	b.StopTimer()
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(c.target)/sec, "events/s")
	b.ReportMetric(float64(b.N*36)/sec, "blocks/s")
	cancel()
	<-done
	_ = p.Close()
}
