package fleet

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkDirectoryFleet applies a registry of N records to a fresh
// directory (what a router does at start, "ready"), then one heartbeat
// of each record (what it does every TTL/3): ns/op is one record's put,
// averaged over both.
func BenchmarkDirectoryFleet(b *testing.B) {
	for _, n := range []int{64, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			recs := make([]Change[WorkerRecord], n)
			for i := range recs {
				r := rec(fmt.Sprint("worker-", i), 16)
				r.ID = DeriveID(r.Name)
				recs[i] = Change[WorkerRecord]{Kind: Put, Key: recordKey(r.ID), Value: r}
			}
			now := time.Unix(1, 0)
			b.ReportAllocs()
			for b.Loop() {
				d, _, err := NewDirectory(Expect{BlockSize: 16, Hash: DefaultHashContract()}, nil, nil, now)
				if err != nil {
					b.Fatal(err)
				}
				for _, c := range recs {
					d.Apply(c, now)
				}
				for _, c := range recs {
					d.Apply(c, now.Add(time.Second))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*2*n), "ns/put")
		})
	}
}
