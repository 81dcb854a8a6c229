package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/ospreystore/osprey/bench"
	"github.com/spf13/cobra"
)

func newBenchObjCmd() *cobra.Command {
	var (
		o       bench.ObjOptions
		sizes   []string
		opNames []string
		asJSON  bool
		cpuProf string
	)
	cmd := &cobra.Command{
		Use:   "obj",
		Short: "Benchmark the object store, in the spirit of rados bench",
		Long: `Writes fresh objects of each --size for --duration with --concurrency ops in
flight, then reads random ones of them back, and reports ops/s, MB/s and
latency percentiles. Every acknowledged write is synced on every replica.

Without --seeds it starts a local cluster in this process (--osds, --replicas,
--public and --cluster transports) with its data in a temporary directory on
disk, and removes it afterwards.`,
		Example: `  osprey bench obj --size 4KiB,4MiB --concurrency 16 --duration 10s
  osprey bench obj --replicas 1 --osds 1
  osprey bench obj --seeds tcp://10.0.0.1:6800 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.Sizes, err = bench.ParseSizes(sizes); err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			for _, n := range opNames {
				switch op := bench.ObjOp(n); op {
				case bench.OpPut, bench.OpGet:
					o.Ops = append(o.Ops, op)
				default:
					return fmt.Errorf("--op %q: want put or get", n)
				}
			}
			o.Logger = slog.Default()
			stop, err := startCPUProfile(cpuProf)
			if err != nil {
				return err
			}
			defer stop()
			rows, err := bench.RunObj(cmd.Context(), o)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, r := range rows {
					enc.Encode(r)
				}
			} else {
				bench.WriteObjTable(cmd.OutOrStdout(), rows)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&sizes, "size", []string{"4KiB", "4MiB"}, "object sizes")
	f.StringSliceVar(&opNames, "op", []string{"put", "get"}, "operations: put, get")
	f.IntVar(&o.Concurrency, "concurrency", 16, "ops in flight")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "measured time per size and op")
	f.StringSliceVar(&o.Seeds, "seeds", nil, "OSD public addresses of a running cluster (default: start a local one)")
	f.IntVar(&o.OSDs, "osds", 3, "local cluster: OSDs")
	f.IntVar(&o.Replicas, "replicas", 0, "local cluster: replicas (default min(3, osds))")
	f.StringVar(&o.Public, "public", "tcp", "local cluster: client network transport")
	f.StringVar(&o.Cluster, "cluster", "tcp", "local cluster: replication network transport (e.g. rdma+tcp)")
	f.StringVar(&o.Dir, "dir", "", "local cluster: data directory (default: a temporary one)")
	f.BoolVar(&asJSON, "json", false, "one JSON object per row")
	f.StringVar(&cpuProf, "cpuprofile", "", "write a CPU profile of the whole run (local cluster included) to this file")
	return cmd
}
