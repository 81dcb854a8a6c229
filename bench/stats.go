package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records latencies in nanoseconds into log-linear buckets, as
// HdrHistogram does: values below 2*histSub are exact, and above that every
// power of two is split into histSub buckets, so a reported value is within
// 1/histSub (0.8%) of a recorded one. Record never allocates and costs a
// few instructions, which matters when it runs on the messenger's receive
// path two million times a second. A Histogram is not safe for concurrent
// use: each recording goroutine owns one, and they are merged afterwards.
type Histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	min, max int64
	sum      float64
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits
	// Bucket index of the largest int64 is below this.
	histBuckets = (64 - histSubBits) * histSub
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram { return &Histogram{min: math.MaxInt64} }

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{min: math.MaxInt64} }

func histIndex(v uint64) int {
	if v < 2*histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1
	return (shift+1)*histSub + int(v>>shift) - histSub
}

// histRange is the inclusive range of values that fall into bucket i.
func histRange(i int) (lo, hi uint64) {
	if i < 2*histSub {
		return uint64(i), uint64(i)
	}
	shift := i/histSub - 1
	mant := uint64(i%histSub + histSub)
	return mant << shift, (mant+1)<<shift - 1
}

// Record adds one value; negative values (a clock that went backwards)
// count as zero.
func (h *Histogram) Record(ns int64) {
	ns = max(ns, 0)
	h.counts[histIndex(uint64(ns))]++
	h.n++
	h.sum += float64(ns)
	h.min = min(h.min, ns)
	h.max = max(h.max, ns)
}

// RecordDuration adds one duration.
func (h *Histogram) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// Merge adds o's values to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest recorded value, exactly; 0 when empty.
func (h *Histogram) Max() int64 {
	if h.n == 0 {
		return 0
	}
	return h.max
}

// Min is the smallest recorded value, exactly; 0 when empty.
func (h *Histogram) Min() int64 {
	if h.n == 0 {
		return 0
	}
	return h.min
}

// Mean is the average of the recorded values; 0 when empty.
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the nearest-rank q-quantile (0 < q <= 1): the smallest
// recorded value v such that at least q of all values are <= v, up to the
// bucket precision. It reports the middle of the bucket, clamped to the
// exact min and max, so Quantile(1) is the exact maximum. 0 when empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			lo, hi := histRange(i)
			v := int64(lo + (hi-lo)/2)
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}
