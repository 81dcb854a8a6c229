package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ospreystore/osprey/bench"
	"github.com/spf13/cobra"
)

func newBenchObjCmd() *cobra.Command {
	var (
		o         bench.ObjOptions
		sizes     []string
		opNames   []string
		mix       string
		cpuProf   string
		out       benchOutput
		noCleanup bool
		keyring   string
		s3t       bench.S3Target
	)
	cmd := &cobra.Command{
		Use:   "obj",
		Short: "Benchmark the object store, in the spirit of rados bench and warp",
		Long: `For each --size, runs each --op for --duration with --concurrency ops in
flight, and reports ops/s, MB/s, throughput per --segment (slowest, median,
fastest), latency percentiles and the CPU the process used (per op and per
GB). Every acknowledged write is synced on every replica.

  put     writes fresh objects (the SDK's PutObjectBytes: each body sent from
          the benchmark's memory, with no copy)
  get     reads random objects of the working set, whole
  stat    stats random objects of the working set
  list    lists --list-keys keys after a random one
  delete  deletes objects of the working set, newest first; the row stops
          early when none is left

The working set is what earlier puts wrote, topped up (unmeasured) to
--objects before a get, stat, list or delete row. --mix runs a mixed
workload after the --op rows (only it, unless --op is given too): each
worker draws every operation by weight; reads see the working set as it was
when the row began, and deletes take only objects the mix's own puts wrote
(with none left, a delete is a put). A mix reports a row per operation and a
total.

Without --seeds it starts a local cluster in this process (--osds, --replicas,
--public and --cluster transports) with its data in a temporary directory on
disk, and removes it afterwards.

With --seeds, the objects go to --bucket on that cluster, and are deleted
at the end, as rados bench and warp do: the bucket too when the run made
it; in a bucket that existed, only the keys the run added. --no-cleanup
keeps them; an interrupted run (Ctrl-C) deletes them too, unless
interrupted again. Keys of a bucket that existed are the run's own names
(bench/SIZE/N): a delete row removes them whoever wrote them. The run authenticates with --keyring (env OSPREY_KEYRING;
default ./osprey-data/client.admin.keyring when it exists), as the other
commands that reach a cluster do.

With --s3 URL, the same workloads run against any S3 endpoint (Osprey's
gateway, Ceph's RGW, ...), path-style, signed (SigV4) with
--access-key and --secret-key (env OSPREY_S3_ACCESS_KEY, OSPREY_S3_SECRET_KEY):
get is GetObject, stat HeadObject, list ListObjectsV2. Requests are signed
UNSIGNED-PAYLOAD and carry no checksum unless --s3-sign-payload. The keys
the run added are deleted at the end (the bucket too when the run made it),
unless --no-cleanup.

CPU is this process's: with a local cluster, its OSDs' too; with --seeds or
--s3, the client's only (cpu_scope in --json).`,
		Example: `  osprey bench obj --size 4KiB,4MiB --concurrency 16 --duration 10s
  osprey bench obj --replicas 1 --osds 1
  osprey bench obj --op put,get,stat,list,delete --objects 20000 --size 4KiB
  osprey bench obj --mix get=45,stat=30,put=15,delete=10 --objects 1000
  osprey bench obj --seeds tcp://10.0.0.1:6800 --json > run.json
  osprey bench obj --seeds 10.0.0.1:6800 --op put --no-cleanup   (then --op get,stat on the same objects)
  osprey bench obj --s3 http://127.0.0.1:9000 --access-key AK --secret-key SK --size 4KiB,4MiB`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(o.Duration); err != nil {
				return err
			}
			var err error
			if o.Sizes, err = bench.ParseSizes(sizes); err != nil {
				return usageErrorf("--size: %v", err)
			}
			if mix != "" {
				if o.Mix, err = bench.ParseMix(mix); err != nil {
					return usageErrorf("--mix: %v", err)
				}
			}
			if mix == "" || cmd.Flags().Changed("op") {
				for _, n := range opNames {
					op, err := bench.ParseObjOp(n)
					if err != nil {
						return usageErrorf("--op: %v", err)
					}
					o.Ops = append(o.Ops, op)
				}
			}
			if o.Warmup < 0 || o.Objects < 0 {
				return usageErrorf("--warmup and --objects: want at least 0")
			}
			local := len(o.Seeds) == 0 && !cmd.Flags().Changed("s3")
			if local && cmd.Flags().Changed("replicas") && o.Replicas > o.OSDs {
				// Every replica on its own OSD: more would report a
				// replication (and a disk share) no OSD performs.
				return usageErrorf("--replicas %d over --osds %d: each replica needs an OSD of its own", o.Replicas, o.OSDs)
			}
			if !local {
				for _, name := range []string{"osds", "replicas", "public", "cluster", "dir", "read-cache-mib", "inject-socket-failures"} {
					if cmd.Flags().Changed(name) {
						return usageErrorf("--%s is for the local cluster: not with --seeds or --s3", name)
					}
				}
			}
			if cmd.Flags().Changed("s3") {
				if len(o.Seeds) > 0 {
					return usageErrorf("--s3 and --seeds: measure one or the other")
				}
				s3t.AccessKey = cmpOrEnv(s3t.AccessKey, envS3AccessKey)
				s3t.SecretKey = cmpOrEnv(s3t.SecretKey, envS3SecretKey)
				if s3t.Endpoint == "" || s3t.AccessKey == "" || s3t.SecretKey == "" {
					return usageErrorf("--s3 needs an endpoint URL and a key pair: --access-key and --secret-key (or %s and %s)",
						envS3AccessKey, envS3SecretKey)
				}
				o.S3, o.KeepObjects = &s3t, noCleanup
			}
			// The local cluster's and the rows' info lines would drown the
			// table: warnings only, unless --log-level says otherwise.
			o.Logger = cliLogger(cmd)
			o.Segment, o.Progress = out.segment, out.progress(cmd)
			if len(o.Seeds) > 0 {
				if o.Keyring, err = (monFlags{keyring: keyring}).loadKeyring(os.Getenv); err != nil {
					return err
				}
			} else if keyring != "" {
				return usageErrorf("--keyring is for a running cluster (--seeds): the local one runs without authentication")
			}
			var cleanup *benchCleanup
			if len(o.Seeds) > 0 && !noCleanup {
				if cleanup, err = prepareBenchCleanup(cmd.Context(), cmd, o.Seeds, o.Keyring, o.Bucket); err != nil {
					return err
				}
			}
			stop, err := startCPUProfile(cpuProf)
			if err != nil {
				return err
			}
			defer stop()
			rows, runErr := bench.RunObj(cmd.Context(), o)
			// Whatever ran is printed, even when a later row failed.
			w := cmd.OutOrStdout()
			switch {
			case out.json:
				err = writeJSONLines(w, rows)
			case out.csv:
				err = bench.WriteObjCSV(w, rows)
			case len(rows) > 0:
				err = bench.WriteObjTable(w, rows)
			}
			if err == nil && len(rows) > 0 {
				err = out.writePlots(cmd, func(dir, format string) ([]string, error) { return bench.PlotObj(dir, format, rows) })
			}
			if cleanup != nil {
				// Also after an interrupt, which ended the rows: the
				// objects go as they would have (a second one ends the
				// process at once, main).
				if cmd.Context().Err() != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "interrupted: deleting the benchmark's objects in %s%s (interrupt again to keep them)\n", remoteScheme, o.Bucket)
				}
				ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), bench.CleanupTimeout)
				defer cancel()
				if cerr := cleanup.run(ctx); cerr != nil {
					runErr = errors.Join(runErr, fmt.Errorf("deleting the benchmark's objects (still in %s%s): %w", remoteScheme, o.Bucket, cerr))
				}
			} else if o.S3 != nil && noCleanup {
				fmt.Fprintf(cmd.ErrOrStderr(), "kept the benchmark's objects in s3://%s at %s (--no-cleanup)\n", o.Bucket, o.S3.Endpoint)
			} else if len(o.Seeds) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "kept the benchmark's objects in %s%s (--no-cleanup)\n", remoteScheme, o.Bucket)
			}
			if runErr != nil {
				return runErr
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&sizes, "size", []string{"4KiB", "4MiB"}, "object sizes")
	f.StringSliceVar(&opNames, "op", []string{"put", "get"}, "operations, in this order: put, get, stat, list, delete")
	f.StringVar(&mix, "mix", "", "a mixed workload, op=weight,..., e.g. get=70,put=20,stat=10")
	f.IntVar(&o.Objects, "objects", 0, "working set for get, stat, list, delete and --mix (default 4 x concurrency)")
	f.IntVar(&o.ListKeys, "list-keys", 100, "keys one list operation asks for")
	f.IntVar(&o.Concurrency, "concurrency", 16, "ops in flight")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "measured time per size and op")
	f.DurationVar(&o.Warmup, "warmup", 0, "discarded time before each row's measurement")
	f.StringSliceVar(&o.Seeds, "seeds", nil, "OSD public addresses of a running cluster (default: start a local one)")
	f.StringVar(&keyring, "keyring", "", "with --seeds: keyring file of the entity to act as (env "+envKeyring+"; default ./"+adminKeyringFile+" when it exists); 'none' to connect without authentication")
	f.IntVar(&o.OSDs, "osds", 3, "local cluster: OSDs")
	f.IntVar(&o.Replicas, "replicas", 0, "local cluster: replicas (default min(3, osds))")
	markPositive(f, "concurrency", "duration", "osds", "replicas", "list-keys")
	f.StringVar(&o.Public, "public", "tcp", "local cluster: client network transport")
	f.StringVar(&o.Cluster, "cluster", "tcp", "local cluster: replication network transport (e.g. rdma+tcp)")
	f.StringVar(&o.Dir, "dir", "", "local cluster: data directory (default: a temporary one)")
	f.Var((*mibFlag)(&o.ReadCacheSize), "read-cache-mib", "local cluster: each OSD's cache of whole objects, MiB (default the OSD's, 512; negative: off), as osprey osd --read-cache-mib")
	f.Var((*socketFailures)(&o.Faults), "inject-socket-failures", "local cluster: "+socketFailuresUsage)
	f.StringVar(&o.Bucket, "bucket", "osprey-bench", "bucket the objects go to (made if missing)")
	f.BoolVar(&noCleanup, "no-cleanup", false, "with --seeds or --s3: keep the objects (and the bucket) the run wrote")
	f.StringVar(&s3t.Endpoint, "s3", "", "measure this S3 endpoint (http://HOST:PORT) instead of an Osprey cluster")
	f.StringVar(&s3t.AccessKey, "access-key", "", "with --s3: the access key (env "+envS3AccessKey+")")
	f.StringVar(&s3t.SecretKey, "secret-key", "", "with --s3: its secret (env "+envS3SecretKey+")")
	f.StringVar(&s3t.Region, "region", "us-east-1", "with --s3: the region requests are signed for")
	f.BoolVar(&s3t.SignPayload, "s3-sign-payload", false, "with --s3: sign each body's SHA-256 (as SDKs do over plain HTTP) instead of UNSIGNED-PAYLOAD")
	f.BoolVar(&o.CompressibleBody, "compressible", false, "write a patterned body that compresses about 1,000:1 instead of random bytes")
	f.BoolVar(&o.NoCeiling, "no-ceiling", false, "local cluster: skip the measure of its disk (4 writers, 64 MiB of synced 4 MiB O_DIRECT writes, then reads) the rows are put beside")
	out.register(cmd)
	f.StringVar(&cpuProf, "cpuprofile", "", "write a CPU profile of the whole run (local cluster included) to this file")
	return cmd
}

// mibFlag is a size in MiB held in bytes; 0 leaves the default, a
// negative value passes through (off).
type mibFlag int64

func (m *mibFlag) String() string {
	if *m == 0 {
		return "0"
	}
	return strconv.FormatInt(int64(*m)>>20, 10)
}

func (m *mibFlag) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > 1<<30 || n < -1<<30 {
		return fmt.Errorf("want a whole number of MiB")
	}
	*m = mibFlag(n << 20)
	return nil
}

func (*mibFlag) Type() string { return "MiB" }
