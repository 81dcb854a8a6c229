package bench

import (
	"slices"
	"time"
)

// Throughput over time, as warp reports it: the measured interval is cut
// into segments of equal width (1 s by default), completions are counted
// per segment, and a row reports its slowest, median and fastest segment.
// One average hides a run that stalled for a second or sped up once the
// page cache was warm; the spread of the segments shows it, and it is the
// noise `osprey bench compare` weighs a difference against.

// DefaultSegment is the width of a throughput segment.
const DefaultSegment = time.Second

// Segments is a row's throughput per time segment. Only whole segments
// count (a partial last one would look slow); a row shorter than one
// segment has a single segment as wide as the row, so the fields are
// never empty.
type Segments struct {
	// SegmentSeconds is the width of a segment.
	SegmentSeconds float64 `json:"segment_s"`
	// SegmentCounts are the completions (messages, round trips or
	// operations) in each segment, in time order.
	SegmentCounts []uint64 `json:"segment_counts"`
	// Completions per second of the slowest, median and fastest segment.
	SegSlowestPerSec float64 `json:"seg_slowest_per_sec"`
	SegMedianPerSec  float64 `json:"seg_median_per_sec"`
	SegFastestPerSec float64 `json:"seg_fastest_per_sec"`
	// The same in payload bytes per second.
	SegSlowestBytesPerSec float64 `json:"seg_slowest_bytes_per_sec"`
	SegMedianBytesPerSec  float64 `json:"seg_median_bytes_per_sec"`
	SegFastestBytesPerSec float64 `json:"seg_fastest_bytes_per_sec"`
}

// Spread is half the range of the segment rates relative to the median:
// the "± x%" a table shows. 0 without segments.
func (s *Segments) Spread() float64 {
	if s.SegMedianPerSec == 0 {
		return 0
	}
	return (s.SegFastestPerSec - s.SegSlowestPerSec) / 2 / s.SegMedianPerSec
}

// segmentStats summarises per-segment completions and payload bytes over
// segments of width seconds.
func segmentStats(width float64, counts []uint64, bytes []float64) Segments {
	s := Segments{SegmentSeconds: width, SegmentCounts: counts}
	if len(counts) == 0 || width <= 0 {
		s.SegmentCounts = []uint64{} // "[]" in JSON, not null
		return s
	}
	rates := make([]float64, len(counts))
	for i, c := range counts {
		rates[i] = float64(c) / width
	}
	brates := make([]float64, len(bytes))
	for i, b := range bytes {
		brates[i] = b / width
	}
	s.SegSlowestPerSec, s.SegMedianPerSec, s.SegFastestPerSec = spread(rates)
	s.SegSlowestBytesPerSec, s.SegMedianBytesPerSec, s.SegFastestBytesPerSec = spread(brates)
	return s
}

// spread returns the minimum, median and maximum of vs (the median of an
// even count is the mean of the middle two); zeros when empty.
func spread(vs []float64) (lo, med, hi float64) {
	if len(vs) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return s[0], med, s[n-1]
}

// wholeSegments returns the counts of the whole segments of a measured
// interval of elapsed nanoseconds, and their width in seconds: all of
// them when the interval holds at least one, else the interval as one
// segment.
func wholeSegments(counts []uint64, width, elapsed int64) ([]uint64, float64) {
	if elapsed <= 0 || width <= 0 {
		return nil, 0
	}
	k := int(elapsed / width)
	if k == 0 {
		var n uint64
		for _, c := range counts {
			n += c
		}
		return []uint64{n}, float64(elapsed) / 1e9
	}
	out := make([]uint64, k)
	copy(out, counts) // counts past the end stay 0 if none were seen
	return out, float64(width) / 1e9
}

// tally is what one recording goroutine owns: a latency histogram and the
// completions per segment. Like the Histogram, it is written by one
// goroutine and merged after the row; its record does not allocate (the
// segment slots are sized for the row up front), since it runs on the
// messenger's receive path.
//
// The progress line needs a live count that other goroutines may read.
// An atomic add per message would cost a locked instruction on the hot
// path, so a tally publishes its count into the run's shared counter at
// most every livePublish instead: one comparison per message.
type tally struct {
	run   *run
	hist  *Histogram
	segs  []uint64
	n     uint64 // completions recorded
	pubN  uint64 // of n, already added to run.live
	pubAt int64  // run clock of the last publication
}

// livePublish is how often, at most, a tally adds to the live count.
const livePublish = int64(50 * time.Millisecond)

// newTally returns an empty tally for r; call it before r measures.
func (r *run) newTally() *tally {
	return &tally{run: r, hist: NewHistogram(), segs: make([]uint64, r.nseg)}
}

// record counts one completion at now (run clock) with latency lat, both
// in nanoseconds. The caller checked that the run is measuring, which
// also makes r.t0 visible to it.
func (t *tally) record(now, lat int64) {
	t.hist.Record(lat)
	i := max(now-t.run.t0, 0) / t.run.seg
	// Completions just past the end (the phase flips after t1 was read)
	// land in the last slot, which wholeSegments never reports.
	t.segs[min(i, int64(len(t.segs)-1))]++
	t.n++
	// The first one at once: the run waits for one (atLeastOne).
	if now-t.pubAt >= livePublish || t.pubN == 0 {
		t.run.live.Add(t.n - t.pubN)
		t.pubN, t.pubAt = t.n, now
	}
}

// merged combines tallies into one histogram and one segment count.
func merged(ts []*tally) (*Histogram, []uint64) {
	h := NewHistogram()
	var segs []uint64
	for _, t := range ts {
		h.Merge(t.hist)
		if segs == nil {
			segs = make([]uint64, len(t.segs))
		}
		for i, c := range t.segs {
			segs[i] += c
		}
	}
	return h, segs
}

// HistBucket is one non-empty bucket of a latency histogram: Count values
// between LoNs and HiNs nanoseconds, both inclusive.
type HistBucket struct {
	LoNs  int64  `json:"lo_ns"`
	HiNs  int64  `json:"hi_ns"`
	Count uint64 `json:"count"`
}

// Buckets returns h's non-empty buckets in ascending order: the whole
// histogram, for JSON output and plots.
func (h *Histogram) Buckets() []HistBucket {
	out := []HistBucket{}
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		lo, hi := histRange(i)
		out = append(out, HistBucket{LoNs: int64(lo), HiNs: int64(hi), Count: c})
	}
	if len(out) > 0 {
		// The exact extremes are known: narrow the outer buckets to them.
		out[0].LoNs = max(out[0].LoNs, h.min)
		out[len(out)-1].HiNs = min(out[len(out)-1].HiNs, h.max)
	}
	return out
}

// CDF returns the cumulative distribution of a saved histogram: for each
// bucket its upper bound in nanoseconds and the fraction of values at or
// below it. Nil when empty.
func CDF(buckets []HistBucket) (ns, frac []float64) {
	var total uint64
	for _, b := range buckets {
		total += b.Count
	}
	if total == 0 {
		return nil, nil
	}
	var cum uint64
	for _, b := range buckets {
		cum += b.Count
		ns = append(ns, float64(b.HiNs))
		frac = append(frac, float64(cum)/float64(total))
	}
	return ns, frac
}
