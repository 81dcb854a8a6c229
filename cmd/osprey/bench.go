package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"time"

	"github.com/ospreystore/osprey/bench"
	"github.com/ospreystore/osprey/msgr"
	"github.com/spf13/cobra"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure Osprey's components",
		Long: `Benchmarks that reproduce the figures in docs/benchmarks.md. The machines
they run on are noisy, so compare within one run (--baseline) rather than
across runs.`,
	}
	cmd.AddCommand(newBenchMsgrCmd(), newBenchObjCmd(), newBenchCompareCmd(), newBenchPlotCmd())
	return cmd
}

func newBenchMsgrCmd() *cobra.Command {
	var (
		sizes, modes, transports                  []string
		depths                                    []int
		duration, warmup                          time.Duration
		baseline, noCRC, zeroCopy, authOn, secure bool
		histogram                                 bool
		cpuProfile                                string
		out                                       benchOutput
		conns                                     int
		serve, connect                            string
		faults                                    msgr.FaultInjection
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
compared with those.

Every row also reports its throughput per --segment (1s): the slowest,
median and fastest segment, as warp does; its CPU seconds per GB of payload;
and, in --json, its whole latency histogram; --histogram prints that
histogram after the table, folded into octaves of µs (1-2, 2-4, ...) with
counts and percentages, a messenger row's baseline beside it. While a row runs, a progress
line is drawn on stderr if it is a terminal. --plot DIR writes throughput
against size per transport and a latency CDF per combination;
"osprey bench compare" weighs two saved --json runs against each other.

--secure runs each combination's messenger rows again in secure mode
(authenticated, every frame sealed with AES-256-GCM, docs/auth.md) right
after its crc rows, and prints secure/crc ratios and each row's handshake.
With --auth or --secure a row's "handshake µs first" is its first
connection's, Connect to session ready; before its measured interval the
row then opens and closes 100 more authenticated sessions from another
client messenger and prints their p50/p99/max and the process's CPU time
per handshake (both ends in one process, so it holds on a loaded machine).

--conns N runs N connections at once, each from its own client messenger
with --depth in flight. For two processes (or two hosts), start a server
with --serve ADDR and run the client with --connect ADDR (the transport is
ADDR's scheme): the server echoes pingpong requests and acknowledges each
stream message, so a two-process stream row's latency is send to
acknowledgement, and its CPU is the client's only.

--inject-socket-failures N makes every messenger of the run (server and
clients; with --serve or --connect, this process's) drop a connection about
once per N messages on it, as "osprey osd" does. The sessions reconnect and
resend, and a row fails if any message was lost or delivered twice; each
row reports its faults and reconnects.`,
		Example: `  osprey bench msgr --size 64,4KiB,1MiB --depth 1,16,128 --baseline
  osprey bench msgr --transport tcp,rdma+tcp --depth 1,16 --baseline   (needs -tags rdma)
  osprey bench msgr --mode pingpong --size 64 --depth 1 --duration 10s --json
  osprey bench msgr --mode pingpong --size 64 --depth 1 --baseline --histogram
  osprey bench msgr --mode stream,pingpong --size 64,1MiB --depth 1,16 --secure
  osprey bench msgr --baseline --plot plots/ --json > run.json
  osprey bench msgr --serve tcp://0.0.0.0:7300                        (on host A)
  osprey bench msgr --connect tcp://hostA:7300 --conns 4 --depth 16   (on host B)
  osprey bench msgr --size 4KiB --depth 16 --mode stream --inject-socket-failures 500`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if serve != "" {
				return serveMsgr(cmd, serve, noCRC, faults)
			}
			if err := out.check(duration); err != nil {
				return err
			}
			if histogram && (out.json || out.csv) {
				return usageErrorf("--histogram prints after the table; --json holds the whole histogram already")
			}
			if connect != "" && cmd.Flags().Changed("transport") {
				return usageErrorf("--transport and --connect: the transport is --connect's scheme")
			}
			o := bench.MsgrOptions{
				Conns: conns, Remote: connect,
				Transports: transports, Depths: depths, Duration: duration, Warmup: warmup,
				Baseline: baseline, DisableDataCRC: noCRC, ZeroCopy: zeroCopy, Logger: cliLogger(cmd), Auth: authOn, Secure: secure,
				Segment: out.segment, Progress: out.progress(cmd), Faults: faults,
			}
			if warmup < 0 {
				return usageErrorf("--warmup %v: must be 0 (none) or more", warmup)
			}
			if warmup == 0 {
				o.Warmup = -1 // explicitly none, not the default
			}
			var err error
			if o.Sizes, err = bench.ParseSizes(sizes); err != nil {
				return usageErrorf("--size: %v", err)
			}
			for _, m := range modes {
				mode, err := bench.ParseMode(m)
				if err != nil {
					return usageErrorf("--mode: %v", err)
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
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				err = writeJSONLines(w, rows)
			case out.csv:
				err = bench.WriteCSV(w, rows)
			case len(rows) > 0:
				err = bench.WriteTable(w, rows)
				if err == nil && histogram {
					err = bench.WriteLatencyHistograms(w, rows)
				}
			}
			if err == nil && len(rows) > 0 {
				err = out.writePlots(cmd, func(dir, format string) ([]string, error) { return bench.PlotMsgr(dir, format, rows) })
			}
			if errors.Is(runErr, msgr.ErrNoTransport) {
				// A transport this build has not (a typo, or rdma+ without
				// -tags rdma): the command line's fault, as perftest's.
				return usageErrorf("%v", runErr)
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
	f.BoolVar(&histogram, "histogram", false, "after the table, print each messenger row's latency histogram in octaves of µs, its --baseline row beside it")
	out.register(cmd)
	f.IntVar(&conns, "conns", 1, "connections per row, each from its own client messenger with --depth in flight")
	markPositive(f, "depth", "duration", "conns")
	f.StringVar(&serve, "serve", "", "serve the benchmark on this address (e.g. tcp://0.0.0.0:7300) for --connect clients, until interrupted")
	f.StringVar(&connect, "connect", "", "run against a --serve server at this address instead of both ends in this process")
	cmd.MarkFlagsMutuallyExclusive("serve", "connect")
	f.BoolVar(&secure, "secure", false, "after each combination's rows, the same rows in secure mode (authenticated, every frame sealed with AES-256-GCM), with ratios to crc (the crc rows authenticated too, as with --auth); not with --connect")
	f.BoolVar(&authOn, "auth", false, "authenticate every session (tls13 handshake with keyrings of a CA made for the run), as a cluster with auth does; not with --connect")
	f.BoolVar(&noCRC, "no-data-crc", false, "turn off the messenger's data CRC (the raw baseline has none)")
	f.BoolVar(&zeroCopy, "zero-copy", false, "send payloads from Conn.AllocPayload buffers (registered memory on RDMA: large payloads move with no copy)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	f.Var((*socketFailures)(&faults), "inject-socket-failures", "every messenger of the run: "+socketFailuresUsage)
	return cmd
}

// serveMsgr runs the server end of a two-process benchmark until the
// command's context ends (Ctrl-C).
func serveMsgr(cmd *cobra.Command, addr string, noCRC bool, faults msgr.FaultInjection) error {
	return bench.ServeMsgr(cmd.Context(), bench.ServeOptions{Addr: addr, DisableDataCRC: noCRC, Faults: faults, Logger: slog.Default(),
		Listening: func(a string) {
			fmt.Fprintf(cmd.ErrOrStderr(), "serving the messenger benchmark on %s; run: osprey bench msgr --connect %s\n", a, a)
		}})
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
