package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Comparing two saved runs, in the spirit of benchstat: rows are matched
// by what they measured (for the messenger, rowLabel's transport,
// connection mode and zero-copy, then mode, size, depth and connections;
// operation, mix, size and concurrency for the object store),
// and a throughput difference counts only when it stands out of the
// noise. One run of a row gives one number, so the noise is taken from
// within the row: its throughput segments. When the range from the
// slowest to the fastest segment of A overlaps B's, the difference is
// within what either run saw from one second to the next, and is reported
// as "~". With fewer than minSegments segments on either side there is
// no telling, and the delta is marked "?". Latency percentiles come from
// one histogram per row, with no spread to weigh them against: their
// deltas are shown as they are.

// minSegments is the fewest segments a row needs for its range to say
// anything about noise.
const minSegments = 3

// Run is a saved benchmark run: the rows of `osprey bench msgr --json`
// or of `osprey bench obj --json`.
type Run struct {
	Msgr []Row
	Obj  []ObjRow
}

// ReadRun reads the --json output of either benchmark: a JSON array of
// rows (msgr) or one row object after another (obj). Which benchmark it
// is comes from the keys: "mode" for msgr rows, "op" for obj rows.
func ReadRun(r io.Reader) (Run, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Run{}, err
	}
	var raws []json.RawMessage
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		if err := json.Unmarshal(t, &raws); err != nil {
			return Run{}, fmt.Errorf("reading a run: %w", err)
		}
	} else {
		dec := json.NewDecoder(bytes.NewReader(data))
		for {
			var m json.RawMessage
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return Run{}, fmt.Errorf("reading a run: %w", err)
			}
			raws = append(raws, m)
		}
	}
	var run Run
	for i, raw := range raws {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(raw, &keys); err != nil {
			return Run{}, fmt.Errorf("reading a run: row %d: %w", i+1, err)
		}
		_, isMsgr := keys["mode"]
		_, isObj := keys["op"]
		switch {
		case isMsgr && !isObj && run.Obj == nil:
			var row Row
			if err := json.Unmarshal(raw, &row); err != nil {
				return Run{}, fmt.Errorf("reading a run: row %d: %w", i+1, err)
			}
			run.Msgr = append(run.Msgr, row)
		case isObj && !isMsgr && run.Msgr == nil:
			var row ObjRow
			if err := json.Unmarshal(raw, &row); err != nil {
				return Run{}, fmt.Errorf("reading a run: row %d: %w", i+1, err)
			}
			run.Obj = append(run.Obj, row)
		default:
			return Run{}, fmt.Errorf("reading a run: row %d is neither a `bench msgr` nor a `bench obj` row, or the rows are of both", i+1)
		}
	}
	if run.Msgr == nil && run.Obj == nil {
		return Run{}, errors.New("reading a run: no rows")
	}
	return run, nil
}

// cmpRow is what a comparison needs of a row of either benchmark.
type cmpRow struct {
	key        string
	rate       float64 // msgs/s or ops/s
	slow, fast float64 // of the segments
	segs       int
	p50, p99   float64 // µs
	cpuPerGB   float64
}

func msgrCmpRows(rows []Row) []cmpRow {
	out := make([]cmpRow, len(rows))
	for i := range rows {
		r := &rows[i]
		key := fmt.Sprintf("%s %s %s depth %d", rowLabel(r), r.Mode, FormatSize(int64(r.Size)), r.Depth)
		if r.Conns > 1 {
			key += fmt.Sprintf(" conns %d", r.Conns)
		}
		out[i] = cmpRow{key: key,
			rate: r.MsgsPerSec, slow: r.SegSlowestPerSec, fast: r.SegFastestPerSec, segs: len(r.SegmentCounts),
			p50: r.P50Us, p99: r.P99Us, cpuPerGB: r.CPUSecPerGB}
	}
	return out
}

func objCmpRows(rows []ObjRow) []cmpRow {
	out := make([]cmpRow, len(rows))
	for i := range rows {
		r := &rows[i]
		out[i] = cmpRow{key: fmt.Sprintf("%s %s conc %d", objRowLabel(r), FormatSize(int64(r.Size)), r.Concurrency),
			rate: r.OpsPerSec, slow: r.SegSlowestPerSec, fast: r.SegFastestPerSec, segs: len(r.SegmentCounts),
			p50: r.P50Us, p99: r.P99Us, cpuPerGB: r.CPUSecPerGB}
	}
	return out
}

// verdict is how a throughput difference compares with the noise.
type verdict int

const (
	significant  verdict = iota // the segment ranges do not overlap
	noDifference                // they overlap
	unknown                     // a row has fewer than minSegments segments
)

// judge weighs a throughput difference against the segment ranges.
func judge(a, b cmpRow) verdict {
	if a.segs < minSegments || b.segs < minSegments {
		return unknown
	}
	if a.slow <= b.fast && b.slow <= a.fast {
		return noDifference
	}
	return significant
}

// Compare writes the difference between two saved runs of the same
// benchmark, B against A: a throughput table with each row's noise and a
// verdict, the geometric mean of the throughput ratios, then latency and
// CPU deltas. Rows in only one run are listed at the end.
func Compare(w io.Writer, nameA string, a Run, nameB string, b Run) error {
	var ra, rb []cmpRow
	unit := "msgs/s"
	switch {
	case a.Msgr != nil && b.Msgr != nil:
		ra, rb = msgrCmpRows(a.Msgr), msgrCmpRows(b.Msgr)
	case a.Obj != nil && b.Obj != nil:
		ra, rb, unit = objCmpRows(a.Obj), objCmpRows(b.Obj), "ops/s"
	default:
		return errors.New("compare: the runs are of different benchmarks (one msgr, one obj)")
	}
	type pair struct{ a, b cmpRow }
	var pairs []pair
	var onlyA, onlyB []string
	for _, x := range ra {
		found := false
		for _, y := range rb {
			if y.key == x.key {
				pairs, found = append(pairs, pair{x, y}), true
				break
			}
		}
		if !found {
			onlyA = append(onlyA, x.key)
		}
	}
	for _, y := range rb {
		found := false
		for _, x := range ra {
			found = found || x.key == y.key
		}
		if !found {
			onlyB = append(onlyB, y.key)
		}
	}
	if len(pairs) == 0 {
		return errors.New("compare: no row of one run matches a row of the other")
	}

	fmt.Fprintf(w, "A: %s\nB: %s\n\n", nameA, nameB)
	if ca, cb := strings.Join(congestionControls(a.Msgr), ", "), strings.Join(congestionControls(b.Msgr), ", "); ca != "" && cb != "" && ca != cb {
		// It sets loopback's ceiling (docs/benchmarks.md): a delta between
		// such runs says more about the sysctl than about the code.
		fmt.Fprintf(w, "warning: A ran under TCP congestion control %s, B under %s: rows over TCP do not compare\n\n", ca, cb)
	}
	for _, d := range []struct {
		name string
		rows []cmpRow
	}{{"A", ra}, {"B", rb}} {
		if dup := duplicateKey(d.rows); dup != "" {
			// Rows that differ in something the key leaves out: only
			// the first of them is compared.
			fmt.Fprintf(w, "warning: %s has more than one row of %q: only its first is compared\n\n", d.name, dup)
		}
	}
	if da, db := dataCRC(a.Msgr), dataCRC(b.Msgr); da != "" && db != "" && da != db {
		// The CRC pass is a large part of a large message's cost.
		fmt.Fprintf(w, "warning: A's messenger rows ran %s, B's %s: they do not compare\n\n", da, db)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tA\tB\tB vs A\n", unit)
	var logSum float64
	var n int
	var anyUnknown bool
	for _, p := range pairs {
		delta := "n/a"
		if p.a.rate > 0 && p.b.rate > 0 {
			logSum += math.Log(p.b.rate / p.a.rate)
			n++
			switch judge(p.a, p.b) {
			case significant:
				delta = formatDelta(p.a.rate, p.b.rate)
			case noDifference:
				delta = "~ (no significant difference)"
			case unknown:
				delta = formatDelta(p.a.rate, p.b.rate) + " ?"
				anyUnknown = true
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.a.key, formatWithNoise(p.a), formatWithNoise(p.b), delta)
	}
	if n > 0 {
		fmt.Fprintf(tw, "geomean\t\t\t%s\n", formatDelta(1, math.Exp(logSum/float64(n))))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "± is half the range of the rows' segments (slowest to fastest) around the whole row's rate;\n"+
		"~ means the two ranges overlap, so the difference is within the runs' own noise.\n")
	if anyUnknown {
		fmt.Fprintf(w, "?: fewer than %d segments in a row: no noise estimate (run longer, or with a shorter --segment).\n", minSegments)
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "latency, cpu\tp50 µs A\tB\tB vs A\tp99 µs A\tB\tB vs A\tcpu s/GB A\tB\tB vs A")
	for _, p := range pairs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.a.key,
			formatUs(p.a.p50), formatUs(p.b.p50), formatDelta(p.a.p50, p.b.p50),
			formatUs(p.a.p99), formatUs(p.b.p99), formatDelta(p.a.p99, p.b.p99),
			formatCPUPerGB(p.a.cpuPerGB), formatCPUPerGB(p.b.cpuPerGB), formatDelta(p.a.cpuPerGB, p.b.cpuPerGB))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "Latency and CPU have no noise estimate (one histogram per row): read small deltas as noise.")
	if len(onlyA)+len(onlyB) > 0 {
		fmt.Fprintln(w)
	}
	if len(onlyA) > 0 {
		fmt.Fprintf(w, "only in A: %s\n", strings.Join(onlyA, "; "))
	}
	if len(onlyB) > 0 {
		fmt.Fprintf(w, "only in B: %s\n", strings.Join(onlyB, "; "))
	}
	return nil
}

// formatWithNoise is a rate and its segments' spread: "2.14M ±3%".
func formatWithNoise(r cmpRow) string {
	s := FormatCount(r.rate)
	if r.segs >= 2 && r.rate > 0 {
		s += fmt.Sprintf(" ±%.0f%%", 100*(r.fast-r.slow)/2/r.rate)
	}
	return s
}

// formatDelta is b relative to a: "+7.48%", "-12.0%"; "n/a" when a is 0.
func formatDelta(a, b float64) string {
	if a == 0 || b == 0 {
		return "n/a"
	}
	d := math.Round(10000*(b/a-1)) / 100 // so that 9.9999% is 10.0%
	if math.Abs(d) < 10 {
		return fmt.Sprintf("%+.2f%%", d)
	}
	return fmt.Sprintf("%+.1f%%", d)
}

// objRowLabel names an object row for matching: its operation, or its
// mix and operation.
func objRowLabel(r *ObjRow) string {
	if r.Mix == "" {
		return string(r.Op)
	}
	if r.Op == OpMixed {
		return "mix " + r.Mix
	}
	return "mix " + r.Mix + ": " + string(r.Op)
}

// dataCRC says whether a run's messenger rows had the data CRC: "with the
// data CRC", "without the data CRC (--no-data-crc)", "" with no messenger
// row or a mix.
func dataCRC(rows []Row) string {
	var on, off bool
	for i := range rows {
		if base, _ := baselineOf(&rows[i]); base == "" {
			continue // a baseline row: no messenger, no CRC
		}
		if rows[i].NoDataCRC {
			off = true
		} else {
			on = true
		}
	}
	switch {
	case on && !off:
		return "with the data CRC"
	case off && !on:
		return "without the data CRC (--no-data-crc)"
	}
	return ""
}

// duplicateKey is the first key two rows share, or "".
func duplicateKey(rows []cmpRow) string {
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.key] {
			return r.key
		}
		seen[r.key] = true
	}
	return ""
}
