package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ospreystore/osprey/bench"
	"github.com/spf13/cobra"
)

// benchOutput holds the output flags both benchmarks share: what goes to
// stdout (a table, --json or --csv), plots, throughput segments and the
// live progress line.
type benchOutput struct {
	json, csv  bool
	plotDir    string
	plotFormat string
	segment    time.Duration
	noProgress bool
}

func (b *benchOutput) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&b.json, "json", false, "print one JSON object per row, one per line (JSON Lines), instead of a table")
	f.BoolVar(&b.csv, "csv", false, "print CSV, a header of the JSON keys then a line per row (the latency histogram only in --json)")
	f.StringVar(&b.plotDir, "plot", "", "also write plots into this directory (created if missing)")
	addPlotFormat(cmd, &b.plotFormat)
	f.DurationVar(&b.segment, "segment", bench.DefaultSegment, "width of a throughput segment (rows report their slowest, median and fastest)")
	f.BoolVar(&b.noProgress, "no-progress", false, "no live progress line on stderr (there is none unless stderr is a terminal)")
}

// maxSegments bounds the throughput segments of a row: each recorder of a
// row keeps a count per segment (a run of bench obj has five per op in
// flight), and --segment 1ns over 1 s asked for 8 GB.
const maxSegments = 100_000

// check checks the output flags of a run whose rows measure for
// duration.
func (b *benchOutput) check(duration time.Duration) error {
	if b.json && b.csv {
		return usageErrorf("--json and --csv: choose one")
	}
	if b.segment <= 0 {
		return usageErrorf("--segment %v: must be positive", b.segment)
	}
	if duration/b.segment > maxSegments {
		return usageErrorf("--segment %v: --duration %v would make more than %d segments of it", b.segment, duration, maxSegments)
	}
	if b.plotDir != "" {
		return checkPlotFormat(b.plotFormat)
	}
	return nil
}

func checkPlotFormat(format string) error {
	if format != "svg" && format != "png" {
		return usageErrorf("--plot-format %q: want svg or png", format)
	}
	return nil
}

// addPlotFormat adds --plot-format, one name in bench msgr, obj and plot.
func addPlotFormat(cmd *cobra.Command, format *string) {
	cmd.Flags().StringVar(format, "plot-format", "svg", "plot file format: svg or png")
}

// writeJSONLines writes rows as JSON Lines: one object per row and line,
// the --json output of both benchmarks (bench.ReadRun reads it back).
func writeJSONLines[R any](w io.Writer, rows []R) error {
	enc := json.NewEncoder(w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// progress returns the live display for the command's stderr, or nil
// when it is not a terminal: a line redrawn with "\r" is noise in a log.
func (b *benchOutput) progress(cmd *cobra.Command) func(bench.Progress) {
	f, ok := cmd.ErrOrStderr().(*os.File)
	if b.noProgress || !ok || !isTerminal(f) {
		return nil
	}
	return progressLine(f, termWidth())
}

// progressLine draws each snapshot over the previous one and erases the
// line when a row's timeline ends, so that what is printed next starts
// on a clean line:
//
//	tcp stream 4KiB depth 16  measuring 1.2s of 3s  612.3k/s  2.51 GB/s
func progressLine(w io.Writer, width int) func(bench.Progress) {
	return func(p bench.Progress) {
		if p.Phase == bench.PhaseDone {
			fmt.Fprint(w, "\r\033[K")
			return
		}
		s := fmt.Sprintf("%s  warming up %s of %s", p.Row, p.Elapsed.Round(100*time.Millisecond), p.Duration)
		if p.Phase == bench.PhaseMeasure {
			s = fmt.Sprintf("%s  measuring %s of %s  %s/s", p.Row, p.Elapsed.Round(100*time.Millisecond), p.Duration, bench.FormatCount(p.PerSec))
			if p.BytesPerSec > 0 {
				s += "  " + bench.FormatRate(p.BytesPerSec)
			}
		}
		if len(s) > width-1 && width > 1 {
			s = s[:width-1] // a wrapped line cannot be redrawn with \r
		}
		fmt.Fprint(w, "\r"+s+"\033[K")
	}
}

// writePlots writes the plots and says where on stderr.
func (b *benchOutput) writePlots(cmd *cobra.Command, plot func(dir, format string) ([]string, error)) error {
	if b.plotDir == "" {
		return nil
	}
	files, err := plot(b.plotDir, b.plotFormat)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d plots: %s\n", len(files), strings.Join(files, " "))
	return nil
}

func newBenchCompareCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "compare A.json B.json",
		Short: "Compare two saved runs of the same benchmark, with the noise shown",
		Long: `Reads two runs saved with --json (both of bench msgr, or both of bench obj),
matches their rows (transport, mode, size and depth; or operation, mix, size
and concurrency) and prints B's difference from A, in the spirit of benchstat.

Each throughput is shown with ± half the range of its row's segments. When
A's range (slowest to fastest segment) overlaps B's, the difference is no
larger than what either run saw from one second to the next, and is shown
as "~ (no significant difference)"; with fewer than 3 whole segments (a
--duration under 3 x --segment) a row gives no noise estimate and the delta
is marked "?". Latency and CPU deltas
follow, without a noise estimate.`,
		Example: `  osprey bench msgr --json > before.json
  (change something, rebuild)
  osprey bench msgr --json > after.json
  osprey bench compare before.json after.json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			runs := make([]bench.Run, 2)
			for i, name := range args {
				r, err := readRunFile(name)
				if err != nil {
					return err
				}
				runs[i] = r
			}
			return bench.Compare(cmd.OutOrStdout(), args[0], runs[0], args[1], runs[1])
		},
	}
}

func newBenchPlotCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "plot RUN.json DIR",
		Short: "Draw the plots of a saved run",
		Long: `Writes the plots --plot would have written for a run saved with --json, so
that a run on a machine without a browser can be looked at elsewhere.`,
		Example: `  osprey bench plot run.json plots/
  osprey bench plot run.json plots/ --plot-format png`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPlotFormat(format); err != nil {
				return err
			}
			r, err := readRunFile(args[0])
			if err != nil {
				return err
			}
			var files []string
			if r.Msgr != nil {
				files, err = bench.PlotMsgr(args[1], format, r.Msgr)
			} else {
				files, err = bench.PlotObj(args[1], format, r.Obj)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), strings.Join(files, "\n"))
			return nil
		},
	}
	addPlotFormat(cmd, &format)
	// Its old name, hidden; using it says to use --plot-format.
	cmd.Flags().StringVar(&format, "format", "svg", "plot file format")
	cmd.Flags().MarkDeprecated("format", "use --plot-format")
	return cmd
}

func readRunFile(name string) (bench.Run, error) {
	f, err := os.Open(name)
	if err != nil {
		return bench.Run{}, err
	}
	defer f.Close()
	r, err := bench.ReadRun(f)
	if err != nil {
		return bench.Run{}, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}
