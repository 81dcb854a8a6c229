package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/ospreystore/osprey/bench"
	"github.com/spf13/cobra"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure Osprey's components",
		Long: `Benchmarks that reproduce the figures in docs/ and the targets in TARGETS.md.
The machines they run on are noisy, so compare within one run (--baseline)
rather than across runs.`,
	}
	cmd.AddCommand(newBenchMsgrCmd(), newBenchObjCmd())
	return cmd
}

func newBenchMsgrCmd() *cobra.Command {
	var (
		sizes, modes, transports []string
		depths                   []int
		duration, warmup         time.Duration
		baseline, asJSON, noCRC  bool
		zeroCopy                 bool
		cpuProfile               string
	)
	cmd := &cobra.Command{
		Use:   "msgr",
		Short: "Benchmark the messenger on loopback, optionally against raw TCP and raw libfabric",
		Long: `Runs the messenger with both ends in this process on 127.0.0.1 and reports,
for every combination of --size, --depth, --mode and --transport, messages
and bytes per second, latency percentiles and the CPU the process used.

  stream    the client sends as fast as it can with --depth messages in
            flight; latency is one way, send to server handler.
  pingpong  the server echoes each message; --depth requests outstanding;
            latency is the round trip, msgs/s counts round trips.

Every row gets fresh messengers, a --warmup that is discarded, then
--duration measured. --baseline runs the same pattern on a plain TCP socket
pair right after each messenger row and prints messenger/raw ratios; for an
rdma+PROVIDER transport it also runs it over raw libfabric send/recv on
PROVIDER (rows "raw-fabric", JSON "provider"), and the rdma+ rows are
compared with those.`,
		Example: `  osprey bench msgr --size 64,4KiB,1MiB --depth 1,16,128 --baseline
  osprey bench msgr --transport tcp,rdma+tcp --depth 1,16 --baseline   (needs -tags rdma)
  osprey bench msgr --mode pingpong --size 64 --depth 1 --duration 10s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o := bench.MsgrOptions{
				Transports: transports, Depths: depths, Duration: duration, Warmup: warmup,
				Baseline: baseline, DisableDataCRC: noCRC, ZeroCopy: zeroCopy, Logger: slog.Default(),
			}
			if warmup == 0 {
				o.Warmup = -1 // explicitly none, not the default
			}
			if duration <= 0 {
				return fmt.Errorf("--duration %v: must be positive", duration)
			}
			var err error
			if o.Sizes, err = bench.ParseSizes(sizes); err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			for _, m := range modes {
				mode, err := bench.ParseMode(m)
				if err != nil {
					return fmt.Errorf("--mode: %w", err)
				}
				o.Modes = append(o.Modes, mode)
			}
			stop, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stop()
			rows, runErr := bench.RunMsgr(cmd.Context(), o)
			// Whatever ran is printed, even when a later row failed.
			out := cmd.OutOrStdout()
			if asJSON {
				err = bench.WriteJSON(out, rows)
			} else if len(rows) > 0 {
				err = bench.WriteTable(out, rows)
			}
			if runErr != nil {
				return runErr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&sizes, "size", []string{"64", "4KiB", "1MiB"}, "payload sizes, with units B, KiB, MiB, GiB, KB, MB, GB")
	f.IntSliceVar(&depths, "depth", []int{1, 16, 128}, "messages in flight")
	f.StringSliceVar(&modes, "mode", []string{"stream", "pingpong"}, "traffic patterns: stream, pingpong")
	f.StringSliceVar(&transports, "transport", []string{"tcp"}, "messenger transports (address schemes), e.g. tcp, rdma+tcp")
	f.DurationVar(&duration, "duration", 3*time.Second, "measured time per row")
	f.DurationVar(&warmup, "warmup", 500*time.Millisecond, "discarded time before each row's measurement")
	f.BoolVar(&baseline, "baseline", false, "also run each pattern over a raw TCP socket (and raw libfabric for rdma+ transports) and print messenger/raw ratios")
	f.BoolVar(&asJSON, "json", false, "print a JSON array, one object per row, instead of a table")
	f.BoolVar(&noCRC, "no-data-crc", false, "turn off the messenger's data CRC (the raw baseline has none)")
	f.BoolVar(&zeroCopy, "zero-copy", false, "send payloads from Conn.AllocPayload buffers (registered memory on RDMA: large payloads move with no copy)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	return cmd
}

// startCPUProfile profiles the process into path until stop; no-op for "".
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
