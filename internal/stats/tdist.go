package stats

import "math"

// TQuantile returns the p-quantile of Student's t distribution with df degrees of freedom
// (df need not be an integer). It returns NaN when df <= 0 or p is outside (0, 1).
//
// For df < 1000 the quantile is found by bisection on the exact tail probability
// ½·I_{df/(df+t²)}(df/2, ½) (regularized incomplete beta function); for larger df the
// Cornish-Fisher expansion around the normal quantile is used, whose error there is far
// below 1e-9.
func TQuantile(p, df float64) float64 {
	switch {
	case math.IsNaN(p) || math.IsNaN(df) || df <= 0 || p <= 0 || p >= 1:
		return math.NaN()
	case p == 0.5:
		return 0
	case p < 0.5:
		return -TQuantile(1-p, df)
	}
	if df >= 1000 {
		return tCornishFisher(p, df)
	}
	q := 1 - p // upper tail probability, in (0, 0.5)
	lo, hi := 0.0, 1.0
	for tTail(hi, df) > q {
		lo, hi = hi, hi*2
		if math.IsInf(hi, 0) {
			return math.Inf(1)
		}
	}
	for range 200 {
		mid := lo + (hi-lo)/2
		if mid <= lo || mid >= hi {
			break
		}
		if tTail(mid, df) > q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + (hi-lo)/2
}

// tTail is P(T > t) for t >= 0.
func tTail(t, df float64) float64 {
	return 0.5 * betaInc(df/2, 0.5, df/(df+t*t))
}

// tCornishFisher is the Cornish-Fisher expansion of the t quantile in powers of 1/df
// (Abramowitz & Stegun 26.7.5).
func tCornishFisher(p, df float64) float64 {
	z := math.Sqrt2 * math.Erfinv(2*p-1)
	z2 := z * z
	g1 := z * (z2 + 1) / 4
	g2 := z * ((5*z2+16)*z2 + 3) / 96
	g3 := z * (((3*z2+19)*z2+17)*z2 - 15) / 384
	g4 := z * ((((79*z2+776)*z2+1482)*z2-1920)*z2 - 945) / 92160
	return z + g1/df + g2/(df*df) + g3/(df*df*df) + g4/(df*df*df*df)
}

// betaInc is the regularized incomplete beta function I_x(a, b).
func betaInc(a, b, x float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(lab - la - lb + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

// betaCF evaluates the continued fraction of the incomplete beta function by the modified
// Lentz method.
func betaCF(a, b, x float64) float64 {
	const (
		maxIter = 10000
		eps     = 1e-15
		tiny    = 1e-300
	)
	clamp := func(v float64) float64 {
		if math.Abs(v) < tiny {
			return tiny
		}
		return v
	}
	qab, qap, qam := a+b, a+1, a-1
	c := 1.0
	d := 1 / clamp(1-qab*x/qap)
	h := d
	for m := 1; m <= maxIter; m++ {
		fm := float64(m)
		m2 := 2 * fm
		aa := fm * (b - fm) * x / ((qam + m2) * (a + m2))
		d = 1 / clamp(1+aa*d)
		c = clamp(1 + aa/c)
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2))
		d = 1 / clamp(1+aa*d)
		c = clamp(1 + aa/c)
		del := d * c
		h *= del
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
}
