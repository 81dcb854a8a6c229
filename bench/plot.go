package bench

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ospreystore/osprey/msgr"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Plots of a run, drawn with gonum.org/v1/plot so no tool beyond the
// binary is needed. Every plot is one file in the directory given, named
// after what it shows, as SVG (scales, diffs well, opens in a browser) or
// PNG (for tools that show no SVG).

// PlotFormats are the file formats the plots can be written in.
var PlotFormats = []string{"svg", "png"}

const (
	plotWidth  = 7 * vg.Inch
	plotHeight = 4.5 * vg.Inch
)

// PlotMsgr writes the plots of a messenger run into dir (created if
// missing) and returns their paths:
//
//   - msgr-throughput-MODE-dDEPTH: payload bytes/s against message size,
//     a line per transport, both axes logarithmic, with bars from the
//     slowest to the fastest segment;
//   - msgr-latency-MODE-SIZE-dDEPTH: the latency CDF of each transport's
//     row of that combination, from the whole histogram.
func PlotMsgr(dir, format string, rows []Row) ([]string, error) {
	if err := checkPlotFormat(format); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	type group struct {
		mode  Mode
		depth int
	}
	var groups []group
	for _, r := range rows {
		if g := (group{r.Mode, r.Depth}); !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		p := plot.New()
		// NB: an axis label longer than the axis makes gonum shrink the
		// data area to fit it; the bars are explained in the title.
		p.Title.Text = fmt.Sprintf("messenger %s, depth %d: throughput by message size\n(bars: slowest to fastest segment)", g.mode, g.depth)
		p.X.Label.Text = "message size (payload)"
		p.Y.Label.Text = "payload bytes/s"
		setLogAxis(&p.X, 4, FormatSizeFloat)
		setLogAxis(&p.Y, 10, formatRateTick)
		// A point per row, with its slowest and fastest segment.
		type point struct{ x, y, slow, fast float64 }
		lines := map[string][]point{}
		var xs, ys []float64
		for _, r := range rows {
			if r.Mode != g.mode || r.Depth != g.depth || r.Size <= 0 || r.BytesPerSec <= 0 {
				continue
			}
			tr := rowLabel(&r)
			lines[tr] = append(lines[tr], point{float64(r.Size), r.BytesPerSec, r.SegSlowestBytesPerSec, r.SegFastestBytesPerSec})
			xs = append(xs, float64(r.Size))
			ys = append(ys, r.BytesPerSec, r.SegSlowestBytesPerSec, r.SegFastestBytesPerSec) // fitLog skips zeros
		}
		if len(xs) == 0 {
			continue
		}
		fitLog(&p.X, xs...)
		fitLog(&p.Y, ys...)
		for i, tr := range transportsOf(rows) {
			ps := lines[tr]
			if len(ps) == 0 {
				continue
			}
			slices.SortFunc(ps, func(a, b point) int { return cmp.Compare(a.x, b.x) })
			pts := make(plotter.XYs, len(ps))
			errs := make(plotter.YErrors, len(ps))
			for k, pt := range ps {
				pts[k] = plotter.XY{X: pt.x, Y: pt.y}
				if pt.slow > 0 || pt.fast > 0 {
					// A bar ends at the axis: a log axis has no 0 for a
					// segment that saw nothing.
					errs[k].Low = pt.y - min(pt.y, max(pt.slow, p.Y.Min))
					errs[k].High = max(pt.fast, pt.y) - pt.y
				}
			}
			l, s, err := plotter.NewLinePoints(pts)
			if err != nil {
				return files, err
			}
			styleLine(l, s, i)
			eb, err := plotter.NewYErrorBars(struct {
				plotter.XYs
				plotter.YErrors
			}{pts, errs})
			if err != nil {
				return files, err
			}
			eb.Color = plotutil.Color(i)
			p.Add(l, s, eb)
			p.Legend.Add(tr, l, s)
		}
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		f := filepath.Join(dir, fmt.Sprintf("msgr-throughput-%s-d%d.%s", g.mode, g.depth, format))
		if err := p.Save(plotWidth, plotHeight, f); err != nil {
			return files, err
		}
		files = append(files, f)
	}

	type combo struct {
		mode        Mode
		size, depth int
	}
	var combos []combo
	for _, r := range rows {
		if c := (combo{r.Mode, r.Size, r.Depth}); !slices.Contains(combos, c) {
			combos = append(combos, c)
		}
	}
	for _, c := range combos {
		var series []cdfSeries
		remote := false
		for _, r := range rows {
			if r.Mode == c.mode && r.Size == c.size && r.Depth == c.depth {
				series = append(series, cdfSeries{rowLabel(&r), r.LatencyHist})
				remote = remote || r.Remote != ""
			}
		}
		what := "one-way latency"
		switch {
		case c.mode == PingPong:
			what = "round-trip latency"
		case remote:
			// A --serve server acknowledges each message (MsgrOptions.Remote).
			what = "latency to the acknowledgement"
		}
		title := fmt.Sprintf("messenger %s %s, depth %d: %s CDF", c.mode, FormatSize(int64(c.size)), c.depth, what)
		f := filepath.Join(dir, fmt.Sprintf("msgr-latency-%s-%s-d%d.%s", c.mode, FormatSize(int64(c.size)), c.depth, format))
		ok, err := plotCDF(f, title, series)
		if err != nil {
			return files, err
		}
		if ok {
			files = append(files, f)
		}
	}
	return files, nil
}

// PlotObj writes the plots of an object run into dir and returns their
// paths:
//
//   - obj-throughput: a panel per object size, ops/s on the left and MB/s
//     on the right, a bar per operation (each panel on its own scale, as
//     4 KiB gets and 4 MiB puts differ a thousandfold);
//   - obj-latency-SIZE: the latency CDF of each operation at that size.
func PlotObj(dir, format string, rows []ObjRow) ([]string, error) {
	if err := checkPlotFormat(format); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var sizes []int
	for _, r := range rows {
		if !slices.Contains(sizes, r.Size) {
			sizes = append(sizes, r.Size)
		}
	}
	mixes := mixNames(rows)
	note := ""
	for i, m := range mixes {
		note += fmt.Sprintf("\nmix%d: %s", i+1, m)
	}
	grid := make([][]*plot.Plot, len(sizes))
	for i, size := range sizes {
		var names, mbNames []string
		var ops, mbs plotter.Values
		tr := ""
		for _, r := range rows {
			if r.Size != size {
				continue
			}
			tr = fmt.Sprintf(", %d replica(s), %s, %d in flight", r.Replicas, r.Transport, r.Concurrency)
			names = append(names, objRowShortLabel(&r, mixes))
			ops = append(ops, r.OpsPerSec)
			if r.BytesPerSec > 0 {
				mbNames = append(mbNames, objRowShortLabel(&r, mixes))
				mbs = append(mbs, r.BytesPerSec/1e6)
			}
		}
		left, err := barPlot(fmt.Sprintf("%s objects%s: ops/s%s", FormatSize(int64(size)), tr, note), "ops/s", names, ops, "%.0f")
		if err != nil {
			return nil, err
		}
		grid[i] = []*plot.Plot{left, nil}
		if len(mbs) > 0 {
			right, err := barPlot(fmt.Sprintf("%s objects: MB/s of payload (puts and gets)", FormatSize(int64(size))), "MB/s", mbNames, mbs, "%.1f")
			if err != nil {
				return nil, err
			}
			grid[i][1] = right
		}
	}
	var files []string
	f := filepath.Join(dir, "obj-throughput."+format)
	if err := saveGrid(f, grid, 2*plotWidth, vg.Length(len(sizes))*plotHeight*0.85); err != nil {
		return nil, err
	}
	files = append(files, f)
	// A CDF per size for the single operations, and one per size and mix,
	// so that no plot has more lines than can be told apart.
	for _, size := range sizes {
		for _, mix := range append([]string{""}, mixes...) {
			var series []cdfSeries
			for _, r := range rows {
				if r.Size == size && r.Mix == mix {
					series = append(series, cdfSeries{objRowShortLabel(&r, mixes), r.LatencyHist})
				}
			}
			name, title := FormatSize(int64(size)), fmt.Sprintf("object store, %s objects: latency CDF", FormatSize(int64(size)))
			if mix != "" {
				i := slices.Index(mixes, mix) + 1
				name = fmt.Sprintf("mix%d-%s", i, name)
				title = fmt.Sprintf("object store, %s objects, mix%d (%s): latency CDF", FormatSize(int64(size)), i, mix)
			}
			f := filepath.Join(dir, fmt.Sprintf("obj-latency-%s.%s", name, format))
			ok, err := plotCDF(f, title, series)
			if err != nil {
				return files, err
			}
			if ok {
				files = append(files, f)
			}
		}
	}
	return files, nil
}

// mixNames lists the rows' mixes in order of appearance.
func mixNames(rows []ObjRow) []string {
	var ms []string
	for _, r := range rows {
		if r.Mix != "" && !slices.Contains(ms, r.Mix) {
			ms = append(ms, r.Mix)
		}
	}
	return ms
}

// objRowShortLabel names a row as the table does: "get", "mix1:get",
// "mix1" for a mix's total.
func objRowShortLabel(r *ObjRow, mixes []string) string {
	if r.Mix == "" {
		return string(r.Op)
	}
	i := slices.Index(mixes, r.Mix) + 1
	if r.Op == OpMixed {
		return fmt.Sprintf("mix%d", i)
	}
	return fmt.Sprintf("mix%d:%s", i, r.Op)
}

func checkPlotFormat(format string) error {
	if !slices.Contains(PlotFormats, format) {
		return fmt.Errorf("plot format %q: want %s", format, strings.Join(PlotFormats, " or "))
	}
	return nil
}

// rowLabel names a msgr row's line: its transport, the provider of a raw
// libfabric row, a connection mode other than crc ("tcp/secure"), and
// zero-copy. It tells apart the rows of one run that differ in anything
// but mode, size and depth, so compare keys on it too. A row without
// conn_mode (no --auth or --secure, or a file from before the field) runs
// in crc mode as much as one that says crc: both are labelled alike, so
// such runs keep their labels and compare with each other.
func rowLabel(r *Row) string {
	s := r.Transport
	if r.Transport == FabricTransport && r.Provider != "" {
		s += "(" + r.Provider + ")"
	}
	s += connModeSuffix(r)
	if r.ZeroCopy {
		s += " zero-copy"
	}
	return s
}

// connModeSuffix is "/MODE" for a row in a connection mode other than crc
// ("/secure"), else "".
func connModeSuffix(r *Row) string {
	if r.ConnMode == "" || r.ConnMode == string(msgr.ModeCRC) {
		return ""
	}
	return "/" + r.ConnMode
}

// transportsOf lists the rows' line labels in order of appearance.
func transportsOf(rows []Row) []string {
	var ts []string
	for i := range rows {
		if l := rowLabel(&rows[i]); !slices.Contains(ts, l) {
			ts = append(ts, l)
		}
	}
	return ts
}

func styleLine(l *plotter.Line, s *plotter.Scatter, i int) {
	l.Color = plotutil.Color(i)
	l.Width = vg.Points(1.5)
	l.Dashes = plotutil.Dashes(i)
	s.Color = plotutil.Color(i)
	s.Shape = plotutil.Shape(i)
}

// setLogAxis makes a a logarithmic axis with a label, formatted by label,
// at each power of base (10, or 4 for sizes: 64, 256, 1KiB, 4KiB...), and
// unlabelled ticks between powers of ten.
func setLogAxis(a *plot.Axis, base float64, label func(float64) string) {
	a.Scale = plot.LogScale{}
	a.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var ticks []plot.Tick
		if lo <= 0 || hi <= 0 {
			return nil
		}
		for v := math.Pow(base, math.Floor(math.Log(lo)/math.Log(base))); v <= hi*1.0001; v *= base {
			if v >= lo*0.9999 {
				ticks = append(ticks, plot.Tick{Value: v, Label: label(v)})
			}
			if base == 10 {
				for m := 2.0; m < 10; m++ {
					if mv := v * m; mv >= lo && mv <= hi {
						ticks = append(ticks, plot.Tick{Value: mv})
					}
				}
			}
		}
		return ticks
	})
}

// fitLog sets a log axis to a range around the values with room at both
// ends; a log scale cannot take the plotter's default of min-1 for a
// single value.
func fitLog(a *plot.Axis, vs ...float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if v > 0 {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 1, 10
	}
	a.Min, a.Max = lo/1.6, hi*1.6
}

// FormatSizeFloat is FormatSize for an axis: 64, 4KiB, 1MiB.
func FormatSizeFloat(v float64) string { return FormatSize(int64(math.Round(v))) }

func formatRateTick(v float64) string {
	s := FormatRate(v)
	s = strings.Replace(s, ".00 ", " ", 1)
	return strings.Replace(s, ".0 ", " ", 1)
}

func formatLatencyTick(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%gs", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%gms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%gµs", ns/1e3)
	}
	return fmt.Sprintf("%gns", ns)
}

type cdfSeries struct {
	name    string
	buckets []HistBucket
}

// plotCDF draws one line per series: the fraction of values at or below
// each latency, latency on a log axis. It writes nothing and returns
// false when no series has values.
func plotCDF(file, title string, series []cdfSeries) (bool, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "latency"
	p.Y.Label.Text = "fraction at or below (dashed: p50, p99)"
	setLogAxis(&p.X, 10, formatLatencyTick)
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = plot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 0.1}, {Value: 0.2}, {Value: 0.25, Label: "0.25"},
		{Value: 0.3}, {Value: 0.4}, {Value: 0.5, Label: "0.5"}, {Value: 0.6}, {Value: 0.7}, {Value: 0.75, Label: "0.75"},
		{Value: 0.8}, {Value: 0.9, Label: "0.9"}, {Value: 1, Label: "1"}}
	var all []float64
	for i, s := range series {
		ns, frac := CDF(s.buckets)
		if len(ns) == 0 {
			continue
		}
		// Start at 0 just below the smallest value, so each line rises
		// from the axis.
		pts := plotter.XYs{{X: max(float64(s.buckets[0].LoNs), 1), Y: 0}}
		for j := range ns {
			pts = append(pts, plotter.XY{X: max(ns[j], 1), Y: frac[j]})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return false, err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		l.Dashes = plotutil.Dashes(i)
		p.Add(l)
		p.Legend.Add(s.name, l)
		for _, pt := range pts {
			all = append(all, pt.X)
		}
	}
	if len(all) == 0 {
		return false, nil
	}
	fitLog(&p.X, all...)
	// The legend goes bottom right, in room made for it: every line
	// there is still near 0 or already near 1 only by luck.
	p.X.Max *= 30
	// Reference lines at p50 and p99, where the tables quote.
	for _, q := range []float64{0.5, 0.99} {
		ref, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: q}, {X: p.X.Max, Y: q}})
		if err != nil {
			return false, err
		}
		ref.Color = color.Gray{Y: 180}
		ref.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(ref)
	}
	p.Add(plotter.NewGrid())
	return true, p.Save(plotWidth, plotHeight, file)
}

// barPlot is a bar per name, labelled with its value.
func barPlot(title, ylabel string, names []string, vs plotter.Values, valueFormat string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	bars, err := plotter.NewBarChart(vs, vg.Points(28))
	if err != nil {
		return nil, err
	}
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(names...)
	if slices.ContainsFunc(names, func(n string) bool { return len(n) > 6 }) {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	}
	p.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		ticks := plot.DefaultTicks{}.Ticks(lo, hi)
		for i := range ticks {
			if v := ticks[i].Value; ticks[i].Label != "" && v >= 1000 {
				ticks[i].Label = FormatCount(v)
			} else if ticks[i].Label != "" {
				ticks[i].Label = strconv.FormatFloat(v, 'g', 4, 64)
			}
		}
		return ticks
	})
	var top float64
	labels := plotter.XYLabels{}
	for i, v := range vs {
		top = max(top, v)
		labels.XYs = append(labels.XYs, plotter.XY{X: float64(i), Y: v})
		labels.Labels = append(labels.Labels, fmt.Sprintf(valueFormat, v))
	}
	lab, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].XAlign = draw.XCenter
		lab.TextStyle[i].YAlign = draw.YBottom
	}
	p.Add(lab)
	p.Y.Max = max(top*1.15, 1)
	return p, nil
}

// saveGrid draws plots in a grid on one canvas and writes it to file, in
// the format its extension names.
func saveGrid(file string, grid [][]*plot.Plot, w, h vg.Length) error {
	format := strings.TrimPrefix(filepath.Ext(file), ".")
	c, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return err
	}
	t := draw.Tiles{Rows: len(grid), Cols: len(grid[0]), PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 6,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, t, draw.New(c))
	for j := range grid {
		for i, p := range grid[j] {
			if p != nil {
				p.Draw(canvases[j][i])
			}
		}
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
