package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/ospreystore/osprey/internal/dirlock"
	"github.com/ospreystore/osprey/internal/metrics"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/transports"
	"github.com/ospreystore/osprey/osd"
	"github.com/spf13/cobra"
)

func newOSDCmd() *cobra.Command {
	var (
		cfg        osd.Config
		id         uint32
		cacheMiB   int64
		readMiB    int64
		memMiB     uint64
		keepFor    time.Duration
		stopWithin time.Duration
		keyring    string
		memBudget  rdmaMemBudget
		scrubOff   bool
	)
	var (
		metricsAddr string
		pprofOn     bool
	)
	cmd := &cobra.Command{
		Use:   "osd",
		Short: "Run one object storage daemon",
		Long: `Runs one OSD, keeping its objects under --data.

With --mon (the usual way) the OSD needs no map: on its first start it gets
an id from the mon and keeps it in --data; it then registers its addresses
(--public and --cluster, required on the first start), is marked up and in,
receives every map change from the mon, beacons to it, and reports peers it
cannot reach. Its subcommands (below) administer OSDs through the mon, as
` + "`ceph osd ...`" + `.

With a mon, the OSD authenticates (docs/auth.md): a new OSD starts with the
bootstrap key the mon wrote (--keyring client.bootstrap-osd.keyring), gets
its id and its own keyring (osd.N) from the mon and keeps that in
--data/keyring, which later starts use without --keyring. --auth none turns
authentication off, for tests and closed networks only.

Without a mon (offline bootstrap) it runs OSD --id of the cluster described
by --map. It listens on its public address (clients) and its cluster address
(replication between OSDs) from the map; each address names its transport,
e.g. tcp://10.0.0.1:6800 or rdma+verbs://10.0.1.1:6801, as Ceph's
ms_public_type and ms_cluster_type. --public and --cluster listen elsewhere
(a wildcard address, say) while peers still use the map's.

The map is a JSON file (see docs/mon.md, "The cluster map"); the OSD reads it again on SIGHUP and
when a peer or client shows a newer epoch. SIGINT or SIGTERM stops it
gracefully.`,
		Example: `  osprey osd --mon tcp://10.0.0.1:3300 --data /var/lib/osprey/osd.0 \
      --keyring /etc/osprey/client.bootstrap-osd.keyring \
      --public tcp://10.0.0.2:6800 --cluster tcp://10.0.1.2:6801
  osprey osd tree --mon tcp://10.0.0.1:3300
  osprey osd out 3
  osprey osd --id 0 --map cluster.json --data /var/lib/osprey/osd.0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.ID = id
			cfg.Store.CacheSize = cacheMiB << 20
			cfg.Store.ReadCacheSize = readMiB << 20
			cfg.Store.MemTableSize = memMiB << 20
			cfg.Store.KeepReplacedFor = keepFor
			if cfg.ScrubBytesPerSec == 0 {
				cfg.ScrubBytesPerSec = -1 // the flag's 0 is unpaced, the Config's the default
			}
			if scrubOff {
				cfg.DeepScrubInterval = -1
			}
			cfg.Logger = slog.Default()
			cfg.Store.OnFatal = func(msg string) {
				// The OSD cannot go on (a WAL write failed, another daemon booted as it): stop
				// with a line an operator can act on, not a panic's stack.
				slog.Error("the OSD stops (its data is safe up to the last acknowledged write)", "err", msg)
				os.Exit(exitError)
			}
			if cfg.DataDir == "" {
				return usageErrorf("--data is required")
			}
			if pprofOn && metricsAddr == "" {
				return usageErrorf(pprofNeedsMetrics)
			}
			if keyring != "" {
				k, err := auth.LoadKeyring(keyring)
				if err != nil {
					return usageErrorf("--keyring: %v", err)
				}
				cfg.Keyring = k
			}
			if len(cfg.Mon) == 0 {
				if cfg.MapPath == "" {
					return usageErrorf("give --mon ADDR (or --map FILE for a cluster without a mon)")
				}
				if _, err := placement.Load(cfg.MapPath); err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("rdma-mem-budget") {
				// The OSD closes only the transports it made itself:
				// these close after it has stopped (defers run after the
				// return's Close).
				ts, err := osdTransports(memBudget)
				if err != nil {
					return err
				}
				defer ts.Close()
				cfg.Transports = ts
			}
			// One daemon per data directory, from before anything there is
			// read or written (identity.json, the keyring): a second one
			// fails at once naming the holder, rather than on Pebble's own
			// lock after it may have rewritten the identity.
			if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
				return err
			}
			lock, err := dirlock.Lock(cfg.DataDir)
			if err != nil {
				return fmt.Errorf("--data: %w", err)
			}
			defer lock.Close()
			// The admin address is bound before the store opens: one in
			// use (an earlier daemon not yet gone) fails the start here,
			// not after a WAL replay and a join of the cluster.
			var metricsLn net.Listener
			if metricsAddr != "" {
				if metricsLn, err = metrics.Listen(cmd.Context(), metricsAddr); err != nil {
					return fmt.Errorf("--metrics-addr: %w", err)
				}
				defer metricsLn.Close() // a no-op once the server has it
			}
			o, err := startOSD(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "osd.%d serving: public %s, cluster %s\n", o.ID(), o.PublicAddr(), o.ClusterAddr())
			var ms *metrics.Server
			if metricsAddr != "" {
				if ms, err = metrics.Serve(cmd.Context(), metrics.ServerOptions{Listener: metricsLn, Registry: metrics.OSDRegistry(o), Pprof: pprofOn, Ready: o.Ready}); err != nil {
					o.Close(context.Background())
					return fmt.Errorf("--metrics-addr: %w", err)
				}
				printMetrics(cmd.OutOrStdout(), fmt.Sprintf("osd.%d", o.ID()), ms)
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			for reloading := true; reloading; {
				select {
				case <-hup:
					m, err := o.ReloadMap()
					if err != nil {
						slog.Error("reloading the map", "path", cfg.MapPath, "err", err)
					} else {
						slog.Info("map reloaded", "epoch", m.Epoch())
					}
				case <-cmd.Context().Done():
					reloading = false
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), stopWithin)
			defer cancel()
			return errors.Join(ms.Close(ctx), o.Close(ctx))
		},
	}
	f := cmd.Flags()
	f.StringVar(&keyring, "keyring", "", "a bootstrap key (client.bootstrap-osd's) for a new OSD, or the OSD's own; later starts use --data/keyring")
	f.Var(authFlag{&cfg.NoAuth}, "auth", `with --mon: "cert" (authenticate) or "none" (tests and closed networks only)`)
	f.Var(modesFlag{&cfg.ClusterModes}, "ms-cluster-mode", clusterModeUsage)
	f.Var(modesFlag{&cfg.ServiceModes}, "ms-service-mode", serviceModeUsage)
	f.StringVar(&metricsAddr, "metrics-addr", "", metricsAddrUsage)
	f.BoolVar(&pprofOn, "pprof", false, pprofUsage)
	f.StringSliceVar(&cfg.Mon, "mon", nil, "mon addresses (tcp://HOST:PORT,...); the OSD gets its id and maps from them")
	f.StringVar(&cfg.Host, "host", "", "host label in the map (default the host name)")
	f.Float64Var(&cfg.Weight, "weight", 0, "straw2 weight at the first boot (default 1)")
	f.StringVar(&cfg.PublicAddr, "public-addr", "", "public address to register when it differs from --public (a wildcard bind)")
	f.StringVar(&cfg.ClusterAddr, "cluster-addr", "", "cluster address to register when it differs from --cluster")
	f.Uint32Var(&id, "id", 0, "this OSD's id in the map (with --map)")
	f.StringVar(&cfg.MapPath, "map", "", "cluster map file (JSON)")
	f.StringVar(&cfg.DataDir, "data", "", "data directory")
	f.StringVar(&cfg.PublicListen, "public", "", "listen address for clients (default: the map's)")
	f.StringVar(&cfg.ClusterListen, "cluster", "", "listen address for OSDs (default: the map's)")
	f.Int64Var(&cacheMiB, "cache-mib", 256, "Pebble block cache, MiB")
	f.Int64Var(&readMiB, "read-cache-mib", 512, "cache of whole objects that gets are sent from without a read or copy, MiB; negative: off")
	f.Var(&memBudget, "rdma-mem-budget", rdmaMemBudgetUsage)
	f.Var((*byteSize)(&cfg.ClientMessageBytes), "client-message-size-cap", "bytes of client messages held at once, each until its write is done (Ceph's osd_client_message_size_cap), e.g. 1GiB; 0: 512 MiB, or an eighth of --rdma-mem-budget on RDMA")
	f.Uint64Var(&memMiB, "memtable-mib", 0, "Pebble memtable size, MiB (0: 64, or 1/256 of a smaller data disk)")
	f.DurationVar(&keepFor, "keep-replaced-for", 30*time.Second,
		"how long an overwritten or deleted object stays readable for the gets under way: each read window renews it, and a multipart object's parts are deleted this long after it is replaced (RGW's rgw_gc_obj_min_wait); raise it for slow streaming readers, at the cost of that much later freed space; 0: 30s, negative: none")
	f.Float64Var(&cfg.FailsafeFullRatio, "failsafe-full-ratio", 0.97, "fraction of the data disk in use over which the OSD takes no write but deletes, even a replica's (Ceph's osd_failsafe_full_ratio)")
	f.DurationVar(&cfg.RepTimeout, "rep-timeout", 10*time.Second, "how long a write waits for its replicas before failing (retriable); each such failure names the replica in the status's SLOW_OPS for a minute")
	f.DurationVar(&cfg.DiskStallTimeout, "disk-stall-timeout", 20*time.Second, "a write, sync or read stuck this long on the data disk makes the OSD serve no reads and ask to be marked down, booting again once the disk answers (Ceph's osd_op_thread_timeout); must exceed the 5s slow-disk threshold; negative: never")
	f.DurationVar(&cfg.OpComplaintTime, "op-complaint-time", 30*time.Second, "a client op in flight for longer is slow: logged, and the status warns SLOW_OPS (Ceph's osd_op_complaint_time)")
	f.DurationVar(&cfg.ReadLease, "read-lease", 0, "how long a heartbeat reply lets a primary read without hearing that peer again; keep it below the mon's --heartbeat-grace (0: 0.8 of that grace; without a mon, no leases)")
	f.IntVar(&cfg.MaxMarkdownCount, "max-markdown-count", 5, "marked down more often than this within --max-markdown-period while it runs, the OSD stays down until that period since the first has passed, instead of booting again (Ceph's osd_max_markdown_count); -1: no bound")
	f.DurationVar(&cfg.MaxMarkdownPeriod, "max-markdown-period", 10*time.Minute, "the window of --max-markdown-count (Ceph's osd_max_markdown_period)")
	f.DurationVar(&stopWithin, "stop-timeout", 30*time.Second, "bound on a graceful stop")
	f.IntVar(&cfg.RecoveryMaxActive, "recovery-max-active", 3, "PGs recovered or backfilled at once (Ceph's osd_recovery_max_active)")
	f.Var((*byteSize)(&cfg.RecoveryBytesPerSec), "recovery-bytes-per-sec", "cap on recovery and backfill copying, e.g. 100MiB (0: none)")
	cfg.ScrubBytesPerSec = 32 << 20
	f.DurationVar(&cfg.DeepScrubInterval, "deep-scrub-interval", 7*24*time.Hour, "how often each PG copy is deep scrubbed: every object read back and checked against its CRC32Cs, a damaged one repaired from another member (Ceph's osd_deep_scrub_interval)")
	f.BoolVar(&scrubOff, "no-scrub", false, "never deep scrub (Ceph's nodeep-scrub flag)")
	f.Var((*byteSize)(&cfg.ScrubBytesPerSec), "scrub-bytes-per-sec", "pace of the deep scrub's reads, e.g. 64MiB (0: unpaced)")
	f.Var((*socketFailures)(&cfg.Faults), "inject-socket-failures", socketFailuresUsage)
	cmd.AddCommand(newOSDAdminCmds()...)
	cmd.AddCommand(newOSDCheckCmds()...)
	cmd.AddCommand(newOSDDeepScrubCmd(), newOSDMapCmd(), newOSDDfCmd(), newOSDPerfCmd(), newOSDPoolCmd())
	return cmd
}

// startOSD is osd.Start; tests see the configuration the flags made.
var startOSD = osd.Start

// osdTransports are the build's transports as the environment tunes them
// (transports.ConfigFromEnv), with --rdma-mem-budget over
// OSPREY_RDMA_MEM_BUDGET.
func osdTransports(memBudget rdmaMemBudget) (transports.Set, error) {
	tcfg, err := transports.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	tcfg.RDMAMemBudget = int64(memBudget)
	return transports.New(tcfg)
}

// rdmaMemBudget is --rdma-mem-budget: bytes with or without a unit, read
// and checked by transports.ParseRDMAMemBudget as OSPREY_RDMA_MEM_BUDGET
// is.
type rdmaMemBudget int64

func (b *rdmaMemBudget) Type() string { return "bytes" }
func (b *rdmaMemBudget) String() string {
	if *b == 0 {
		return "0" // the transport's default; pflag shows no default for "0"
	}
	return humanize.IBytes(uint64(*b))
}
func (b *rdmaMemBudget) Set(s string) error {
	n, err := transports.ParseRDMAMemBudget(s)
	if err != nil {
		return err
	}
	*b = rdmaMemBudget(n)
	return nil
}

const rdmaMemBudgetUsage = "registered memory each RDMA domain (NIC port) may hold, e.g. 4GiB: half of it may hold the read cache, an eighth client messages in flight, the rest is for links; 0: 1 GiB (env OSPREY_RDMA_MEM_BUDGET; see docs/operations.md)"

// byteSize is a flag of bytes written with units ("64MiB", "1.5GB", "0"),
// parsed by go-humanize, the parser etcd and many Go CLIs already use.
type byteSize int64

func (b *byteSize) String() string { return humanize.IBytes(uint64(*b)) }
func (b *byteSize) Type() string   { return "bytes" }
func (b *byteSize) Set(s string) error {
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return err
	}
	if n > math.MaxInt64 {
		return fmt.Errorf("%s is too large", s)
	}
	*b = byteSize(n)
	return nil
}

// socketFailures is --inject-socket-failures N, as Ceph's
// ms_inject_socket_failures: the messenger drops a connection after about
// N frames on it (jittered between N/2 and 3N/2), through its fault
// injection (msgr.FaultInjection.EveryNFrames); 0 is off. Lossless
// sessions (between OSDs) reconnect and resend, so nothing is lost; a
// client's lossy session fails its op, which the client retries.
type socketFailures msgr.FaultInjection

func (s *socketFailures) String() string { return strconv.Itoa(s.EveryNFrames) }
func (s *socketFailures) Type() string   { return "N" }
func (s *socketFailures) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("%q: want a count of messages, 0 (off) or more", v)
	}
	s.EveryNFrames = n
	return nil
}

const socketFailuresUsage = "fail a socket about once per N messages on it, to rehearse faults (Ceph's ms_inject_socket_failures); 0: off"
