package bench

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestOctaveOf(t *testing.T) {
	for _, c := range []struct {
		ns   int64
		want int
	}{
		{-5, 0}, {0, 0}, {249, 0}, {250, 1}, {499, 1}, {500, 2}, {999, 2},
		{1000, 3}, {1999, 3}, {2000, 4}, {4095, 5}, {1_024_000, 13}, {1_023_999, 12},
	} {
		if got := octaveOf(c.ns); got != c.want {
			t.Errorf("octaveOf(%d) = %d, want %d", c.ns, got, c.want)
		}
	}
	for j, want := range map[int]string{0: "<0.25", 1: "0.25-0.5", 3: "1-2", 6: "8-16", 13: "1024-2048"} {
		if got := octaveLabel(j); got != want {
			t.Errorf("octaveLabel(%d) = %q, want %q", j, got, want)
		}
	}
}

// TestFoldOctavesExactBounds records values on both sides of every octave
// bound from 0.25 µs to 4 ms into the fine histogram and checks that
// folding its buckets puts each in its own octave: a fine bucket that
// straddled a bound would move a value into the wrong one.
func TestFoldOctavesExactBounds(t *testing.T) {
	h := NewHistogram()
	want := map[int]uint64{}
	for j := 1; j <= 15; j++ {
		bound := int64(octaveBaseNs) << j
		h.Record(bound - 1) // the last value of octave j-1
		want[j-1]++
		h.Record(bound) // the first of octave j
		want[j]++
		h.Record(bound + bound/2) // the middle of octave j
		want[j]++
	}
	first, counts := foldOctaves(h.Buckets())
	if first != 0 || len(counts) != 16 {
		t.Fatalf("first octave %d, %d octaves; want 0 and 16", first, len(counts))
	}
	for j, n := range counts {
		if n != want[j] {
			t.Errorf("octave %s holds %d values, want %d", octaveLabel(j), n, want[j])
		}
	}
}

func TestFoldOctavesGapsAndEmpty(t *testing.T) {
	if first, counts := foldOctaves(nil); first != -1 || counts != nil {
		t.Errorf("empty: first %d counts %v", first, counts)
	}
	h := NewHistogram()
	for range 3 {
		h.Record(1500) // 1-2 µs
	}
	h.Record(40_000) // 32-64 µs, with four empty octaves between
	first, counts := foldOctaves(h.Buckets())
	if first != 3 || !slices.Equal(counts, []uint64{3, 0, 0, 0, 0, 1}) {
		t.Errorf("first %d counts %v; want 3 and [3 0 0 0 0 1]", first, counts)
	}
}

// histRow is a row of the given transport whose histogram and percentiles
// are those of vals (ns).
func histRow(transport string, vals ...int64) Row {
	h := NewHistogram()
	for _, v := range vals {
		h.Record(v)
	}
	return Row{Transport: transport, Mode: PingPong, Size: 64, Depth: 1,
		LatencyHist: h.Buckets(),
		P50Us:       float64(h.Quantile(0.5)) / 1e3, P99Us: float64(h.Quantile(0.99)) / 1e3, P999Us: float64(h.Quantile(0.999)) / 1e3}
}

func TestWriteLatencyHistograms(t *testing.T) {
	// The messenger: 98 values at 3 µs and a tail of 2 at 100 µs; raw: 99
	// at 1.5 µs and one at 5 µs. A stream row of the messenger has no
	// baseline in this run and stands alone, with an empty octave (1-2
	// µs) between its two values.
	msgr := histRow("tcp", append(slices.Repeat([]int64{3000}, 98), 100_000, 100_000)...)
	raw := histRow(RawTransport, append(slices.Repeat([]int64{1500}, 99), 5000)...)
	alone := histRow("tcp", 700, 3000)
	alone.Mode = Stream
	var buf bytes.Buffer
	if err := WriteLatencyHistograms(&buf, []Row{msgr, raw, alone}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if n := strings.Count(out, "Latency histogram"); n != 2 {
		t.Fatalf("%d histograms, want 2 (the baseline row gets none of its own):\n%s", n, out)
	}
	lines := map[string][]string{} // octave label -> fields of the pingpong table
	table, stream, _ := strings.Cut(out, "tcp stream")
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = f
		}
	}
	if !strings.Contains(table, "beside raw-tcp") {
		t.Errorf("no baseline beside the messenger:\n%s", out)
	}
	// Octaves 1-2 through 64-128 µs, the empty ones between included.
	for label, want := range map[string]string{
		"1-2":    "1-2 0 0.00 0.00 99 99.00 99.00 p50 p99",
		"2-4":    "2-4 98 98.00 98.00 p50 0 0.00 99.00",
		"4-8":    "4-8 0 0.00 98.00 1 1.00 100.00 p99.9",
		"8-16":   "8-16 0 0.00 98.00 0 0.00 100.00",
		"64-128": "64-128 2 2.00 100.00 p99 p99.9 0 0.00 100.00",
	} {
		if got := strings.Join(lines[label], " "); got != want {
			t.Errorf("octave %s: %q, want %q\n%s", label, got, want, out)
		}
	}
	if _, ok := lines["128-256"]; ok {
		t.Errorf("an octave past both maxima:\n%s", out)
	}
	if strings.Contains(stream, "raw-tcp") {
		t.Errorf("the stream row's histogram should stand alone:\n%s", stream)
	}
	for _, want := range []string{"0.5-1 1 50.00 50.00 p50", "1-2 0 0.00 50.00", "2-4 1 50.00 100.00 p99 p99.9"} {
		if !slices.ContainsFunc(strings.Split(stream, "\n"), func(l string) bool { return strings.Join(strings.Fields(l), " ") == want }) {
			t.Errorf("the stream row's histogram lacks the line %q:\n%s", want, stream)
		}
	}
}
