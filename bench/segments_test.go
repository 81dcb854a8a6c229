package bench

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/msgrtest"
)

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		in          []float64
		lo, med, hi float64
	}{
		{nil, 0, 0, 0},
		{[]float64{5}, 5, 5, 5},
		{[]float64{3, 1, 2}, 1, 2, 3},
		{[]float64{4, 1, 3, 2}, 1, 2.5, 4}, // even count: mean of the middle two
		{[]float64{7, 7, 7, 7, 100}, 7, 7, 100},
	} {
		orig := slices.Clone(c.in)
		lo, med, hi := spread(c.in)
		if lo != c.lo || med != c.med || hi != c.hi {
			t.Errorf("spread(%v) = %v, %v, %v; want %v, %v, %v", c.in, lo, med, hi, c.lo, c.med, c.hi)
		}
		if !slices.Equal(orig, c.in) {
			t.Errorf("spread sorted its argument in place: %v", c.in)
		}
	}
}

func TestWholeSegments(t *testing.T) {
	sec := int64(time.Second)
	for _, c := range []struct {
		counts         []uint64
		width, elapsed int64
		want           []uint64
		wantWidth      float64
	}{
		// 3.2 s measured: three whole segments; the partial fourth and the
		// straggler slot are left out.
		{[]uint64{10, 20, 30, 4, 1}, sec, 3200 * int64(time.Millisecond), []uint64{10, 20, 30}, 1},
		// Exactly 2 s.
		{[]uint64{10, 20, 0, 0}, sec, 2 * sec, []uint64{10, 20}, 1},
		// Shorter than a segment: the whole interval is one segment.
		{[]uint64{7, 0, 0}, sec, 500 * int64(time.Millisecond), []uint64{7}, 0.5},
		// More whole segments than slots were seen (no completions late).
		{[]uint64{1}, sec, 2 * sec, []uint64{1, 0}, 1},
		{[]uint64{1}, sec, 0, nil, 0},
	} {
		got, w := wholeSegments(c.counts, c.width, c.elapsed)
		if !slices.Equal(got, c.want) || w != c.wantWidth {
			t.Errorf("wholeSegments(%v, %d, %d) = %v, %v; want %v, %v", c.counts, c.width, c.elapsed, got, w, c.want, c.wantWidth)
		}
	}
}

func TestSegmentStats(t *testing.T) {
	// Four half-second segments of a 64-byte row.
	counts := []uint64{100, 400, 200, 300}
	bytes := []float64{6400, 25600, 12800, 19200}
	s := segmentStats(0.5, counts, bytes)
	if s.SegSlowestPerSec != 200 || s.SegMedianPerSec != 500 || s.SegFastestPerSec != 800 {
		t.Errorf("per sec slowest/median/fastest = %v/%v/%v, want 200/500/800", s.SegSlowestPerSec, s.SegMedianPerSec, s.SegFastestPerSec)
	}
	if s.SegSlowestBytesPerSec != 12800 || s.SegMedianBytesPerSec != 32000 || s.SegFastestBytesPerSec != 51200 {
		t.Errorf("bytes slowest/median/fastest = %v/%v/%v", s.SegSlowestBytesPerSec, s.SegMedianBytesPerSec, s.SegFastestBytesPerSec)
	}
	if got := s.Spread(); got != 0.6 {
		t.Errorf("Spread = %v, want (800-200)/2/500 = 0.6", got)
	}
	if s.SegmentSeconds != 0.5 || !slices.Equal(s.SegmentCounts, counts) {
		t.Errorf("%+v", s)
	}
	if e := segmentStats(1, nil, nil); e.SegmentCounts == nil || e.Spread() != 0 {
		t.Errorf("empty segments: %+v (SegmentCounts must be [] for JSON)", e)
	}
}

// TestTallySegments records into a run whose clock the test sets, and
// checks each completion lands in its segment.
func TestTallySegments(t *testing.T) {
	ms := int64(time.Millisecond)
	r := &run{seg: 100 * ms, nseg: 5, t0: 1000 * ms}
	ta := r.newTally()
	for _, at := range []int64{1000, 1050, 1099, 1100, 1250, 1399, 1400, 1500, 9000} {
		ta.record(at*ms, 5)
	}
	// [1000,1100): 3; [1100,1200): 1; [1200,1300): 1; [1300,1400): 1;
	// the last slot takes 1400 and everything past the end.
	if want := []uint64{3, 1, 1, 1, 3}; !slices.Equal(ta.segs, want) {
		t.Errorf("segments %v, want %v", ta.segs, want)
	}
	if ta.hist.Count() != 9 || r.live.Load() == 0 {
		t.Errorf("count %d, live %d", ta.hist.Count(), r.live.Load())
	}
	other := r.newTally()
	other.record(1010*ms, 7)
	h, segs := merged([]*tally{ta, other})
	if h.Count() != 10 || segs[0] != 4 || h.Max() != 7 {
		t.Errorf("merged: count %d, segs %v, max %d", h.Count(), segs, h.Max())
	}
	if n := testing.AllocsPerRun(1000, func() { ta.record(1200*ms, 9) }); n != 0 {
		t.Errorf("record allocates %v times", n)
	}
}

func TestHistogramBucketsAndCDF(t *testing.T) {
	h := NewHistogram()
	for v := int64(1); v <= 100; v++ {
		h.Record(v)
	}
	h.Record(1000) // a bucket [1000, 1007]
	bs := h.Buckets()
	if len(bs) != 101 {
		t.Fatalf("%d buckets, want 101", len(bs))
	}
	var n uint64
	for _, b := range bs {
		n += b.Count
		if b.LoNs > b.HiNs {
			t.Errorf("bucket %+v", b)
		}
	}
	if n != 101 || bs[0] != (HistBucket{1, 1, 1}) {
		t.Errorf("count %d, first %+v", n, bs[0])
	}
	// The last bucket is cut to the exact maximum.
	if last := bs[len(bs)-1]; last.LoNs != 1000 || last.HiNs != 1000 {
		t.Errorf("last bucket %+v, want [1000, 1000]", last)
	}
	ns, frac := CDF(bs)
	if len(ns) != 101 || frac[49] != 50.0/101 || frac[len(frac)-1] != 1 || ns[99] != 100 {
		t.Errorf("CDF: %v ... %v", ns[:3], frac[len(frac)-3:])
	}
	if ns, frac := CDF(NewHistogram().Buckets()); ns != nil || frac != nil {
		t.Errorf("CDF of nothing = %v, %v", ns, frac)
	}
	// A histogram rebuilt from its buckets has the same percentiles, up
	// to the bucket precision: what a plot or a later tool reads.
	re := NewHistogram()
	for _, b := range bs {
		for range b.Count {
			re.Record(b.HiNs)
		}
	}
	for _, q := range []float64{0.5, 0.99, 1} {
		if a, b := h.Quantile(q), re.Quantile(q); math.Abs(float64(a-b)) > float64(a)/histSub {
			t.Errorf("Quantile(%v) = %d, from buckets %d", q, a, b)
		}
	}
}

// TestRunProgress checks the progress callback sees the warm-up, the
// measurement with a live count, and the end, in that order.
func TestRunProgress(t *testing.T) {
	var (
		mu     sync.Mutex
		phases []Phase
		counts []uint64
	)
	r := startRun(t.Context(), runOptions{warmup: 260 * time.Millisecond, duration: 300 * time.Millisecond,
		segment: 100 * time.Millisecond, label: "test row", size: 10, progress: func(p Progress) {
			mu.Lock()
			defer mu.Unlock()
			if p.Row != "test row" {
				t.Errorf("row %q", p.Row)
			}
			if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
				phases = append(phases, p.Phase)
			}
			if p.Phase == PhaseMeasure {
				counts = append(counts, p.Count)
				if p.Count > 0 && p.BytesPerSec != 10*p.PerSec {
					t.Errorf("bytes/s %v for %v/s of 10-byte messages", p.BytesPerSec, p.PerSec)
				}
			}
		}})
	ta := r.newTally()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !r.stopping() {
		select {
		case <-tick.C:
		case <-r.stopped:
		}
		if r.measuring() {
			now := r.clk.now()
			ta.record(now, 1000)
		}
	}
	<-r.stopped
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(phases, []Phase{PhaseWarmup, PhaseMeasure, PhaseDone}) {
		t.Errorf("phases %v", phases)
	}
	if len(counts) == 0 || counts[len(counts)-1] == 0 {
		t.Errorf("live counts while measuring: %v", counts)
	}
	row := r.row("x", Stream, 10, 1, ta)
	if len(row.SegmentCounts) != 3 || row.Msgs != ta.hist.Count() || len(row.LatencyHist) != 1 {
		t.Errorf("row: %d segments, %d msgs, hist %v", len(row.SegmentCounts), row.Msgs, row.LatencyHist)
	}
}

// TestRunMeasuresAtLeastOne: a row whose first message completes after
// its duration keeps measuring until it does, and reports it over the
// interval actually measured, instead of a row of zeros (the raw
// libfabric baseline, which counts in batches, on a starved machine).
func TestRunMeasuresAtLeastOne(t *testing.T) {
	const duration = 5 * time.Millisecond
	r := startRun(t.Context(), runOptions{duration: duration})
	<-r.started
	// Well past the duration, by the run's own clock.
	msgrtest.Eventually(t, 10*time.Second, "the run clock to pass the duration", func() bool { return r.clk.now()-r.t0 > int64(duration+100*time.Millisecond) })
	if !r.measuring() {
		t.Fatal("the run stopped measuring with no message counted")
	}
	ta := r.newTally()
	ta.record(r.clk.now(), 1000)
	<-r.stopped
	row := r.row("x", Stream, 10, 1, ta)
	if row.Msgs != 1 || row.Seconds < (duration+100*time.Millisecond).Seconds() || row.MsgsPerSec <= 0 || row.MsgsPerSec > 10 {
		t.Errorf("row: %d msgs over %vs, %v/s", row.Msgs, row.Seconds, row.MsgsPerSec)
	}
}
