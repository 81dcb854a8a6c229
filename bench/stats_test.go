package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// within reports whether got is within rel of want.
func within(got, want int64, rel float64) bool {
	return math.Abs(float64(got-want)) <= rel*math.Abs(float64(want))
}

func TestHistogramSmallValuesExact(t *testing.T) {
	h := NewHistogram()
	for v := int64(1); v <= 100; v++ {
		h.Record(v)
	}
	for _, c := range []struct {
		q    float64
		want int64
	}{{0.01, 1}, {0.5, 50}, {0.9, 90}, {0.99, 99}, {0.999, 100}, {1, 100}} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) of 1..100 = %d, want %d", c.q, got, c.want)
		}
	}
	if h.Count() != 100 || h.Min() != 1 || h.Max() != 100 || h.Mean() != 50.5 {
		t.Errorf("count %d min %d max %d mean %v", h.Count(), h.Min(), h.Max(), h.Mean())
	}
}

func TestHistogramOneToThousand(t *testing.T) {
	h := NewHistogram()
	// Shuffled: the order of recording must not matter.
	vals := make([]int64, 1000)
	for i := range vals {
		vals[i] = int64(i + 1)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(vals), func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
	for _, v := range vals {
		h.Record(v)
	}
	for _, c := range []struct {
		q    float64
		want int64
	}{{0.5, 500}, {0.9, 900}, {0.99, 990}, {0.999, 999}, {1, 1000}} {
		if got := h.Quantile(c.q); !within(got, c.want, 1.0/histSub) {
			t.Errorf("Quantile(%v) of 1..1000 = %d, want %d within %.2f%%", c.q, got, c.want, 100.0/histSub)
		}
	}
	if h.Max() != 1000 || h.Quantile(1) != 1000 {
		t.Errorf("max %d, Quantile(1) %d, want exactly 1000", h.Max(), h.Quantile(1))
	}
}

// TestHistogramAgainstSort checks quantiles of a wide random distribution
// against the exact nearest-rank values of the sorted samples.
func TestHistogramAgainstSort(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	h := NewHistogram()
	vals := make([]int64, 100000)
	for i := range vals {
		// Log-uniform from 1 ns to about 1 s, as latencies spread.
		vals[i] = int64(math.Exp(r.Float64() * math.Log(1e9)))
		h.Record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999} {
		want := vals[int(math.Ceil(q*float64(len(vals))))-1]
		if got := h.Quantile(q); !within(got, want, 1.0/histSub) {
			t.Errorf("Quantile(%v) = %d, want %d", q, got, want)
		}
	}
	if h.Min() != vals[0] || h.Max() != vals[len(vals)-1] {
		t.Errorf("min/max %d/%d, want %d/%d", h.Min(), h.Max(), vals[0], vals[len(vals)-1])
	}
}

func TestHistogramBuckets(t *testing.T) {
	// Every bucket's range maps back to it, and the ranges tile the
	// values without gaps.
	var next uint64
	for i := range histBuckets {
		lo, hi := histRange(i)
		if lo != next {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, next)
		}
		if histIndex(lo) != i || histIndex(hi) != i {
			t.Fatalf("bucket %d [%d,%d] maps to %d,%d", i, lo, hi, histIndex(lo), histIndex(hi))
		}
		if i >= 2*histSub && float64(hi-lo) > float64(lo)/histSub {
			t.Fatalf("bucket %d [%d,%d] wider than 1/%d", i, lo, hi, histSub)
		}
		next = hi + 1
	}
	if next != 1<<63 {
		t.Fatalf("buckets end at %d, want the whole int64 range", next)
	}
	h := NewHistogram()
	h.Record(math.MaxInt64)
	h.Record(-5)
	if h.Max() != math.MaxInt64 || h.Min() != 0 || h.Quantile(0.5) != 0 {
		t.Errorf("extremes: max %d min %d p50 %d", h.Max(), h.Min(), h.Quantile(0.5))
	}
}

func TestHistogramEmptyAndMerge(t *testing.T) {
	h := NewHistogram()
	if h.Quantile(0.5) != 0 || h.Max() != 0 || h.Min() != 0 || h.Mean() != 0 {
		t.Errorf("empty histogram reports nonzero values")
	}
	a, b := NewHistogram(), NewHistogram()
	for v := int64(1); v <= 50; v++ {
		a.RecordDuration(time.Duration(v))
	}
	for v := int64(51); v <= 100; v++ {
		b.Record(v)
	}
	a.Merge(b)
	a.Merge(NewHistogram())
	if a.Count() != 100 || a.Quantile(0.5) != 50 || a.Min() != 1 || a.Max() != 100 {
		t.Errorf("merged: count %d p50 %d min %d max %d", a.Count(), a.Quantile(0.5), a.Min(), a.Max())
	}
	a.Reset()
	if a.Count() != 0 || a.Max() != 0 {
		t.Errorf("Reset left count %d max %d", a.Count(), a.Max())
	}
}

func TestHistogramRecordDoesNotAllocate(t *testing.T) {
	h := NewHistogram()
	v := int64(0)
	if n := testing.AllocsPerRun(1000, func() { v += 977; h.Record(v) }); n != 0 {
		t.Errorf("Record allocates %v times", n)
	}
}
