package timeline

import (
	"math"
	"time"
)

// Latency histogram: logarithmic buckets, latencyPerOctave per doubling,
// from latencyMin up; a quantile is reported as its bucket's geometric
// middle, within ±latencyRelErr of the true value for values in range.
const (
	latencyMin       = 10 * time.Microsecond
	latencyPerOctave = 16
	latencyOctaves   = 28 // 10 µs × 2^28 ≈ 45 min
	latencyBuckets   = latencyPerOctave*latencyOctaves + 2
)

// latencyRelErr bounds a quantile's relative error (half a bucket).
var latencyRelErr = math.Pow(2, 0.5/latencyPerOctave) - 1

// Latency counts durations in fixed logarithmic buckets (fixed memory,
// whatever the count), for quantiles. The zero value is empty.
type Latency struct {
	counts [latencyBuckets]uint32
	n      uint64
}

func latencyBucket(d time.Duration) int {
	if d < latencyMin {
		return 0 // below range (and negative)
	}
	b := 1 + int(math.Floor(latencyPerOctave*math.Log2(float64(d)/float64(latencyMin))))
	return min(b, latencyBuckets-1)
}

// bucketMid is a bucket's representative value: the geometric middle of
// its range (the range's bounds for the two open-ended buckets).
func bucketMid(b int) time.Duration {
	switch {
	case b <= 0:
		return latencyMin
	case b >= latencyBuckets-1:
		return time.Duration(float64(latencyMin) * math.Pow(2, latencyOctaves))
	}
	return time.Duration(float64(latencyMin) * math.Pow(2, (float64(b-1)+0.5)/latencyPerOctave))
}

// Observe counts d.
func (l *Latency) Observe(d time.Duration) {
	b := latencyBucket(d)
	if l.counts[b] < math.MaxUint32 {
		l.counts[b]++
		l.n++
	}
}

// Count is how many durations were observed.
func (l *Latency) Count() uint64 { return l.n }

// Quantile returns the q-quantile (0 ≤ q ≤ 1): the value of the
// observation of rank ⌈q·n⌉ (the smallest for q = 0), to within the
// bucket resolution; 0 when empty.
func (l *Latency) Quantile(q float64) time.Duration {
	if l.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(min(max(q, 0), 1) * float64(l.n)))
	rank = max(rank, 1)
	var seen uint64
	for b, c := range l.counts {
		seen += uint64(c)
		if seen >= rank {
			return bucketMid(b)
		}
	}
	return bucketMid(latencyBuckets - 1)
}
