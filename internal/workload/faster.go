package workload

import (
	"fmt"
	"math"
	"time"
)

// Faster replays src k times faster: every arrival time is divided by k,
// and a closed-loop source's concurrency is multiplied by k (rounded, at
// least 1), so that k scales the offered load of either kind. k = 1 returns
// src itself.
func Faster(src Source, k float64) (Source, error) {
	if !(k >= 1e-3 && k <= 1e6) {
		return nil, fmt.Errorf("%w: replay speed %v must be in [0.001, 1e6]", ErrConfig, k)
	}
	if k == 1 {
		return src, nil
	}
	return &faster{src: src, k: k}, nil
}

type faster struct {
	src Source
	k   float64
}

var _ Source = (*faster)(nil)

func (f *faster) Next() (Request, bool) {
	r, ok := f.src.Next()
	if ok {
		r.Arrival = time.Duration(float64(r.Arrival) / f.k)
	}
	return r, ok
}

func (f *faster) Len() int { return f.src.Len() }

func (f *faster) Concurrency() int {
	c := f.src.Concurrency()
	if c == 0 {
		return 0
	}
	return max(1, int(math.Round(float64(c)*f.k)))
}
