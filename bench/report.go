package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes rows as a JSON array, one object per row.
func WriteJSON(w io.Writer, rows []Row) error {
	if rows == nil {
		rows = []Row{} // "[]", not "null"
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rows)
}

// WriteTable writes rows as an aligned table ("seg" is the slowest, median
// and fastest 1 s segment's msgs/s), then, for messenger rows
// that have a baseline (raw TCP, or raw libfabric for rdma+ rows), one
// ratio line each: bytes/s for stream (higher is better), p50 and p99 for
// pingpong (lower is better).
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// Depth is per connection; with several, the column says "16x4".
	multi := slices.ContainsFunc(rows, func(r Row) bool { return r.Conns > 1 })
	depthHead := "depth"
	if multi {
		depthHead = "depth x conns"
	}
	// Faults and reconnects get columns when any row injected or had some.
	faults := slices.ContainsFunc(rows, func(r Row) bool { return r.InjectSocketFailures > 0 || r.Faults > 0 })
	faultHead := ""
	if faults {
		faultHead = "faults\treconnects\t"
	}
	// The handshake gets a column when rows authenticated (--auth,
	// --secure): that is when it costs a TLS handshake.
	modes := slices.ContainsFunc(rows, func(r Row) bool { return r.ConnMode != "" })
	if modes {
		faultHead += "handshake µs first\thandshake µs p50/p99/max\thandshake cpu µs\t"
	}
	fmt.Fprintln(tw, "transport\tmode\tsize\t"+depthHead+"\tmsgs/s\tbytes/s\tseg msgs/s slow/med/fast\tp50 µs\tp99 µs\tp99.9 µs\tmax µs\tcpu s\tcpu µs/msg\tcpu s/GB\tallocs/msg\t"+faultHead)
	for i := range rows {
		r := &rows[i]
		transport := r.Transport
		if r.Transport == FabricTransport && r.Provider != "" {
			transport += "(" + r.Provider + ")"
		}
		if r.ConnMode != "" {
			transport += "/" + r.ConnMode
		}
		depth := strconv.Itoa(r.Depth)
		if multi {
			depth += "x" + strconv.Itoa(max(r.Conns, 1))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s/%s/%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%s\t%.2f\t",
			transport, r.Mode, FormatSize(int64(r.Size)), depth,
			FormatCount(r.MsgsPerSec), FormatRate(r.BytesPerSec),
			FormatCount(r.SegSlowestPerSec), FormatCount(r.SegMedianPerSec), FormatCount(r.SegFastestPerSec),
			formatUs(r.P50Us), formatTail(r.P99Us, r.Msgs, 100, formatUs), formatTail(r.P999Us, r.Msgs, 1000, formatUs), formatUs(r.MaxUs),
			r.CPUSeconds, r.CPUUsPerMsg, formatCPUPerGB(r.CPUSecPerGB), r.AllocsPerMsg)
		if faults {
			fmt.Fprintf(tw, "%d\t%d\t", r.Faults, r.Reconnects)
		}
		if modes {
			fmt.Fprintf(tw, "%s\t%s/%s/%s\t%s\t", formatUs(r.HandshakeUs),
				formatUs(r.HandshakeP50Us), formatUs(r.HandshakeP99Us), formatUs(r.HandshakeMaxUs), formatUs(r.HandshakeCPUUs))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if slices.ContainsFunc(rows, func(r Row) bool { return r.Msgs < 1000 }) {
		fmt.Fprintln(w, "\n-: a row with fewer than 100 messages has no p99, and one with fewer than 1,000 no p99.9 (either would be its max)")
	}
	if ccs := congestionControls(rows); len(ccs) > 0 {
		fmt.Fprintf(w, "\nTCP congestion control: %s (it sets the ceiling of rows over loopback TCP; bbr paces them)\n", strings.Join(ccs, ", "))
	}
	if err := writeSecureRatios(w, rows); err != nil {
		return err
	}
	for _, sec := range []struct{ base, title string }{
		{RawTransport, "messenger / raw TCP, same run:"},
		{FabricTransport, "messenger / raw libfabric on the same provider, same run:"},
	} {
		var lines []string
		for i := range rows {
			r := &rows[i]
			if base, _ := baselineOf(r); base != sec.base || r.VsRawP50 == 0 && r.VsRawBytesPerSec == 0 {
				continue
			}
			what := fmt.Sprintf("%s%s %s size %s depth %d:", r.Transport, connModeSuffix(r), r.Mode, FormatSize(int64(r.Size)), r.Depth)
			better := "(higher is better)"
			if r.Mode != Stream {
				better = "(lower is better)"
			}
			if r.Starved {
				better = "(the raw row was starved of CPU: not a ratio to trust)"
			}
			if r.Mode == Stream {
				lines = append(lines, fmt.Sprintf("%s\tbytes/s %.2fx raw\t%s", what, r.VsRawBytesPerSec, better))
			} else {
				lines = append(lines, fmt.Sprintf("%s\tp50 %.2fx raw, p99 %.2fx raw\t%s", what, r.VsRawP50, r.VsRawP99, better))
			}
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintln(w, "\n"+sec.title)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, l := range lines {
			fmt.Fprintln(tw, "  "+l)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// congestionControls lists the distinct TCPCongestion values of rows.
func congestionControls(rows []Row) []string {
	var ccs []string
	for i := range rows {
		if cc := rows[i].TCPCongestion; cc != "" && !slices.Contains(ccs, cc) {
			ccs = append(ccs, cc)
		}
	}
	return ccs
}

// FormatCount writes a rate with a k/M/G suffix: 950, 612.3k, 2.13M.
func FormatCount(v float64) string {
	switch {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 2, 64) + "G"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 2, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// FormatRate writes bytes per second in decimal units, as network rates
// (and TARGETS.md) are quoted: 812.3 MB/s, 4.12 GB/s.
func FormatRate(v float64) string {
	switch {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 2, 64) + " GB/s"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + " MB/s"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + " kB/s"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + " B/s"
}

// formatTail is a tail quantile's cell: "-" for a row of fewer than
// perQuantile messages or ops (100 for p99, 1,000 for p99.9), whose
// quantile is its slowest one, not a tail.
func formatTail(v float64, msgs uint64, perQuantile uint64, format func(float64) string) string {
	if msgs < perQuantile {
		return "-"
	}
	return format(v)
}

func formatUs(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// writeSecureRatios writes, for each secure row with a crc row of the same
// transport, mode, size and depth in the run, what sealing costs: bytes/s
// for stream, p50 and p99 for pingpong, and the handshake.
func writeSecureRatios(w io.Writer, rows []Row) error {
	var lines []string
	for i := range rows {
		s := &rows[i]
		if s.ConnMode != "secure" {
			continue
		}
		j := slices.IndexFunc(rows, func(c Row) bool {
			return c.ConnMode == "crc" && c.Transport == s.Transport && c.Provider == s.Provider &&
				c.Mode == s.Mode && c.Size == s.Size && c.Depth == s.Depth && c.Conns == s.Conns
		})
		if j < 0 {
			continue
		}
		c := &rows[j]
		what := fmt.Sprintf("%s %s size %s depth %d:", s.Transport, s.Mode, FormatSize(int64(s.Size)), s.Depth)
		hs := fmt.Sprintf("handshake p50 %s µs (crc %s)", formatUs(s.HandshakeP50Us), formatUs(c.HandshakeP50Us))
		if s.Mode == Stream {
			lines = append(lines, fmt.Sprintf("%s\tbytes/s %.2fx crc\t%s", what, ratio(s.BytesPerSec, c.BytesPerSec), hs))
		} else {
			lines = append(lines, fmt.Sprintf("%s\tp50 %.2fx crc, p99 %.2fx crc\t%s", what, ratio(s.P50Us, c.P50Us), ratio(s.P99Us, c.P99Us), hs))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nsecure / crc, same run:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, l := range lines {
		fmt.Fprintln(tw, "  "+l)
	}
	return tw.Flush()
}
