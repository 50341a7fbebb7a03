package workload

import (
	"math"
	"math/rand/v2"
	"time"
)

// newRand returns the generator every source uses: PCG seeded from seed, so
// streams are identical across runs and platforms.
func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x853c49e6748fea9b))
}

// randLen draws a length the way SGLang does: uniform on
// [max(1, int(l·ratio)), l], inclusive.
func randLen(r *rand.Rand, l int, ratio float64) int {
	lo := max(1, int(float64(l)*ratio))
	if lo >= l {
		return max(l, 1)
	}
	return lo + r.IntN(l-lo+1)
}

// normalCeil draws ceil(x), x ~ Normal(mean, sd), redrawing until x >= 0
// (AIPerf's synthetic input length). It gives up after 1000 draws and
// returns 0, which only happens for absurd mean/sd ratios.
func normalCeil(r *rand.Rand, mean, sd float64) int {
	for range 1000 {
		x := r.NormFloat64()*sd + mean
		if x >= 0 {
			return int(math.Ceil(x))
		}
	}
	return 0
}

// MinRate is the lowest arrival rate, per second, a generator accepts; it
// keeps virtual times far from overflowing.
const MinRate = 1e-6

// maxGap caps one inter-arrival gap (a draw in the far tail at MinRate).
const maxGap = 1000 * 24 * time.Hour

// poissonGap draws an exponential inter-arrival time for rate per second;
// an infinite rate gives 0.
func poissonGap(r *rand.Rand, rate float64) time.Duration {
	if math.IsInf(rate, 1) {
		return 0
	}
	return time.Duration(min(r.ExpFloat64()/rate*float64(time.Second), float64(maxGap)))
}
