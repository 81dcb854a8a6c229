package bench

import (
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"
	"text/tabwriter"
)

// A text latency histogram, for `bench msgr --histogram`: a row's whole
// histogram folded into octaves of microseconds (..., 2-4, 4-8, 8-16 µs,
// ...) so the tail can be read in a terminal or pasted into a doc, with
// the row's baseline in the same run beside it. A p99 says how far the
// tail reaches; the octaves say whether it is a hump (a second cause, such
// as a goroutine that had to be woken) or a thin smear (preemption by the
// rest of the machine).

// octaveBaseNs scales the octaves: octave j >= 1 holds the values in
// [octaveBaseNs<<j, octaveBaseNs<<(j+1)) ns, and octave 0 everything below
// 2*octaveBaseNs. The bounds (0.25, 0.5, 1, 2, ... µs) are also bounds of
// the fine Histogram's buckets (125<<j is a multiple of the fine bucket
// width there), so folding a fine bucket by its low bound puts every value
// in its true octave.
const octaveBaseNs = 125

// octaveOf is the octave of a value of ns nanoseconds: j such that ns is
// in [125<<j, 125<<(j+1)), and 0 for anything below 250 ns.
func octaveOf(ns int64) int {
	return max(bits.Len64(uint64(max(ns, 0))/octaveBaseNs)-1, 0)
}

// octaveLabel names octave j by its bounds in µs: "<0.25", "0.25-0.5",
// "1-2", "1024-2048".
func octaveLabel(j int) string {
	us := func(j int) string {
		return strconv.FormatFloat(float64(int64(octaveBaseNs)<<j)/1e3, 'f', -1, 64)
	}
	if j == 0 {
		return "<" + us(1)
	}
	return us(j) + "-" + us(j+1)
}

// foldOctaves folds a saved histogram into octaves: counts[j-first] is
// the number of values in octave j. It returns first = -1 and no counts
// for an empty histogram.
func foldOctaves(buckets []HistBucket) (first int, counts []uint64) {
	first = -1
	for _, b := range buckets {
		if b.Count == 0 {
			continue
		}
		j := octaveOf(b.LoNs)
		if first < 0 {
			first = j
		}
		for first+len(counts) <= j {
			counts = append(counts, 0)
		}
		counts[j-first] += b.Count
	}
	return first, counts
}

// histColumn is one row's histogram as a column set of the text report.
type histColumn struct {
	row    *Row
	first  int
	counts []uint64
	total  uint64
}

func newHistColumn(r *Row) histColumn {
	c := histColumn{row: r}
	c.first, c.counts = foldOctaves(r.LatencyHist)
	for _, n := range c.counts {
		c.total += n
	}
	return c
}

// count is the number of values of octave j.
func (c *histColumn) count(j int) uint64 {
	if c.first < 0 || j < c.first || j >= c.first+len(c.counts) {
		return 0
	}
	return c.counts[j-c.first]
}

// marks names the row's percentiles that fall in octave j: "p50 p99".
func (c *histColumn) marks(j int) string {
	var m []string
	for _, p := range []struct {
		name string
		us   float64
	}{{"p50", c.row.P50Us}, {"p99", c.row.P99Us}, {"p99.9", c.row.P999Us}} {
		if c.total > 0 && octaveOf(int64(p.us*1e3)) == j {
			m = append(m, p.name)
		}
	}
	return strings.Join(m, " ")
}

// WriteLatencyHistograms writes, for every messenger row, its latency
// histogram in octaves of µs: count, percent and cumulative percent per
// octave and the octaves of its p50, p99 and p99.9, with its baseline row
// (the one CompareToRaw weighs it against) in columns beside it when the
// run has one. Baseline rows get no histogram of their own.
func WriteLatencyHistograms(w io.Writer, rows []Row) error {
	for i := range rows {
		r := &rows[i]
		base, prov := baselineOf(r)
		if base == "" {
			continue
		}
		cols := []histColumn{newHistColumn(r)}
		title := fmt.Sprintf("%s %s size %s depth %d", r.Transport, r.Mode, FormatSize(int64(r.Size)), r.Depth)
		if b := findBaseline(rows, r, base, prov); b != nil {
			cols = append(cols, newHistColumn(b))
			title += ", beside " + b.Transport + " in the same run"
		}
		if err := writeOctaves(w, title, cols); err != nil {
			return err
		}
	}
	return nil
}

// writeOctaves writes one histogram table: a line per octave from the
// lowest to the highest of any column, empty ones included, so the gap
// between the body and the tail shows.
func writeOctaves(w io.Writer, title string, cols []histColumn) error {
	lo, hi := -1, -1
	for _, c := range cols {
		if c.first < 0 {
			continue
		}
		if lo < 0 || c.first < lo {
			lo = c.first
		}
		hi = max(hi, c.first+len(c.counts)-1)
	}
	fmt.Fprintf(w, "\nLatency histogram, %s:\n", title)
	if lo < 0 {
		_, err := fmt.Fprintln(w, "  (no values)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "  µs\t"
	for _, c := range cols {
		head += c.row.Transport + "\t%\tcum %\t\t"
	}
	fmt.Fprintln(tw, head)
	cum := make([]uint64, len(cols))
	for j := lo; j <= hi; j++ {
		line := "  " + octaveLabel(j) + "\t"
		for k := range cols {
			c := &cols[k]
			n := c.count(j)
			cum[k] += n
			line += fmt.Sprintf("%d\t%s\t%s\t%s\t", n, percent(n, c.total), percent(cum[k], c.total), c.marks(j))
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// percent writes n/total as a percentage with enough digits to tell a
// p99.9 octave (0.1%) from an empty one.
func percent(n, total uint64) string {
	if total == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(n)/float64(total), 'f', 2, 64)
}
