package lathist

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestLatencyBuckets(t *testing.T) {
	prev := int64(-1)
	for b := range 64 * latSub {
		u := latUpper(b)
		if u <= prev {
			t.Fatalf("bucket %d: upper %d not above %d", b, u, prev)
		}
		if got := latBucket(u); got != b {
			t.Fatalf("bucket %d: its upper %d falls in %d", b, u, got)
		}
		if got := latBucket(prev + 1); b > 0 && got != b {
			t.Fatalf("bucket %d: its lower %d falls in %d", b, prev+1, got)
		}
		prev = u
		if u < 0 || u == 1<<63-1 {
			break
		}
	}
}

func TestLatencyQuantileBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var l Hist
	var xs []int64
	for range 10000 {
		x := int64(r.ExpFloat64() * 1e6)
		xs = append(xs, x)
		l.Add(x)
	}
	slices.Sort(xs)
	for _, q := range []float64{0.5, 0.9, 0.99, 1} {
		exact := xs[min(int(q*float64(len(xs))+0.999999), len(xs))-1]
		got := l.Quantile(q)
		if got < exact || float64(got) > float64(exact)*(1+1.0/latSub)+1 {
			t.Errorf("q %v: %d, exact %d: want within [exact, exact×(1+1/%d)]", q, got, exact, latSub)
		}
	}
}
