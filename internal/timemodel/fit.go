package timemodel

import (
	"math"
	"time"
)

// dims is the number of coefficients of each fit.
const dims = 3

// vec is one observation's features or a fit's coefficients.
type vec [dims]float64

func (v vec) dot(w vec) float64 { return v[0]*w[0] + v[1]*w[1] + v[2]*w[2] }

// normal is the weighted normal equations Σ w·φφᵀ β = Σ w·φ·y.
type normal struct {
	xx [dims][dims]float64
	xy vec
}

func (n *normal) add(phi vec, y, w float64) {
	for i := range dims {
		for j := range dims {
			n.xx[i][j] += w * phi[i] * phi[j]
		}
		n.xy[i] += w * phi[i] * y
	}
}

func (n *normal) scale(f float64) {
	for i := range dims {
		for j := range dims {
			n.xx[i][j] *= f
		}
		n.xy[i] *= f
	}
}

// solve returns the solution of the normal equations by Gaussian
// elimination with partial pivoting, false when the system is singular
// or not finite.
func (n *normal) solve() (vec, bool) {
	var a [dims][dims + 1]float64
	big := 0.0
	for i := range dims {
		for j := range dims {
			a[i][j] = n.xx[i][j]
			big = math.Max(big, math.Abs(a[i][j]))
		}
		a[i][dims] = n.xy[i]
	}
	if !(big > 0) || math.IsInf(big, 0) {
		return vec{}, false
	}
	for col := range dims {
		p := col
		for r := col + 1; r < dims; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		if math.Abs(a[p][col]) <= 1e-13*big {
			return vec{}, false
		}
		a[col], a[p] = a[p], a[col]
		for r := col + 1; r < dims; r++ {
			f := a[r][col] / a[col][col]
			for c := col; c <= dims; c++ {
				a[r][c] -= f * a[col][c]
			}
		}
	}
	var x vec
	for i := dims - 1; i >= 0; i-- {
		s := a[i][dims]
		for j := i + 1; j < dims; j++ {
			s -= a[i][j] * x[j]
		}
		x[i] = s / a[i][i]
	}
	for _, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return vec{}, false
		}
	}
	return x, true
}

// prior is a fit's starting point: pseudo-samples on the prior polynomial
// that never decay, and the prior coefficients themselves as the fallback.
type prior struct {
	eq   normal
	coef vec
}

// newPrior places weight pseudo-samples (relative weighting, like real
// ones) at each feature row of pts, with targets from coef.
func newPrior(coef vec, pts []vec, weight float64) prior {
	p := prior{coef: coef}
	for _, phi := range pts {
		y := coef.dot(phi)
		p.eq.add(phi, y, weight/(y*y))
	}
	return p
}

// fit is one online robust weighted least-squares fit over three features
// with exponentially decayed sufficient statistics. Its size is fixed.
type fit struct {
	data   normal  // decayed Σ w·φφᵀ and Σ w·φ·y of the samples
	absRes float64 // decayed Σ |relative residual| (each clipped at 1)
	count  float64 // decayed number of samples
	last   time.Time
	seen   bool
	coef   vec
	ok     bool // coef is a solution (false: the prior's)
}

// predict returns the current fit at phi.
func (f *fit) predict(p *prior, phi vec) float64 {
	if !f.ok {
		return p.coef.dot(phi)
	}
	return f.coef.dot(phi)
}

// scaleOf returns the robust scale of relative residuals: the decayed
// mean absolute residual, with one pseudo-sample at priorScale.
func (f *fit) scaleOf(cfg *Config) float64 {
	return math.Max((f.absRes+priorScale)/(f.count+1), cfg.MinScale)
}

// priorScale is the relative residual scale assumed before any sample.
const priorScale = 0.1

// observe folds one sample in: decays the statistics to now, weighs the
// sample by the Huber weight of its relative residual against the current
// fit (times 1/ŷ², so that the fit minimises relative error), adds it and
// solves again. It returns the weight used (0 for a rejected sample).
func (f *fit) observe(cfg *Config, p *prior, phi vec, y float64, now time.Time) float64 {
	if !(y > 0) || math.IsInf(y, 0) {
		return 0
	}
	for _, v := range phi {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0
		}
	}
	f.decayTo(cfg, now)
	yhat := math.Max(f.predict(p, phi), minPredictMs)
	r := (y - yhat) / yhat
	k := cfg.HuberK * f.scaleOf(cfg)
	h := 1.0
	if a := math.Abs(r); a > k {
		h = k / a
	}
	w := h / (yhat * yhat)
	f.data.add(phi, y, w)
	f.absRes += math.Min(math.Abs(r), 1)
	f.count++
	f.solve(p)
	return w
}

// minPredictMs floors the prediction a residual is measured against.
const minPredictMs = 0.01

func (f *fit) decayTo(cfg *Config, now time.Time) {
	if !f.seen {
		f.seen, f.last = true, now
		return
	}
	dt := now.Sub(f.last)
	if dt <= 0 {
		return // a clock that steps back does not un-decay
	}
	d := math.Exp2(-dt.Seconds() / cfg.HalfLife.Seconds())
	f.data.scale(d)
	f.absRes *= d
	f.count *= d
	f.last = now
}

// relax decays the statistics to now and solves again, when at least an
// eighth of a half-life has passed since the last update: a fit with no
// new samples drifts back toward the prior.
func (f *fit) relax(cfg *Config, p *prior, now time.Time) {
	if !f.seen || now.Sub(f.last) < cfg.HalfLife/8 {
		return
	}
	f.decayTo(cfg, now)
	f.solve(p)
}

// mean is an exponentially decayed mean of positive values.
type mean struct {
	sum, weight float64
	last        time.Time
	seen        bool
}

func (a *mean) add(cfg *Config, v float64, now time.Time) {
	if a.seen {
		if dt := now.Sub(a.last); dt > 0 {
			d := math.Exp2(-dt.Seconds() / cfg.HalfLife.Seconds())
			a.sum *= d
			a.weight *= d
			a.last = now
		}
	} else {
		a.seen, a.last = true, now
	}
	a.sum += v
	a.weight++
}

func (a *mean) value() (float64, bool) {
	if a.weight <= 0 {
		return 0, false
	}
	return a.sum / a.weight, true
}

// rate is an exponentially decayed event rate: the decayed count of
// events S, read as S·ln2/half-life events per second (the decayed mean
// of the rate; it starts from 0, so it undercounts for about the first
// half-life of a worker's life).
type rate struct {
	count float64
	last  time.Time
	seen  bool
}

func (r *rate) add(cfg *Config, now time.Time) {
	r.count = r.at(cfg, now) + 1
	if !r.seen || now.After(r.last) {
		r.seen, r.last = true, now
	}
}

// at is the decayed count at now (no decay for a now before the last
// event, or the zero time).
func (r *rate) at(cfg *Config, now time.Time) float64 {
	if !r.seen {
		return 0
	}
	if dt := now.Sub(r.last); dt > 0 && !now.IsZero() {
		return r.count * math.Exp2(-dt.Seconds()/cfg.HalfLife.Seconds())
	}
	return r.count
}

func (r *rate) perSecond(cfg *Config, now time.Time) float64 {
	return r.at(cfg, now) * math.Ln2 / cfg.HalfLife.Seconds()
}

func (f *fit) solve(p *prior) {
	eq := f.data
	for i := range dims {
		for j := range dims {
			eq.xx[i][j] += p.eq.xx[i][j]
		}
		eq.xy[i] += p.eq.xy[i]
	}
	f.coef, f.ok = eq.solve()
}
