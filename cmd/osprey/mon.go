package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ospreystore/osprey/internal/metrics"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/mon/dashboard"
	"github.com/ospreystore/osprey/proto/osdpb"
	"github.com/spf13/cobra"
)

// downOutUsage is --down-out-interval's, for osprey mon and osprey up.
const downOutUsage = "how long an OSD stays down before the mon marks it out (its data is then re-replicated); 0: never, as Ceph's mon_osd_down_out_interval"

// minInUsage is --min-in-ratio's, for osprey mon and osprey up.
const minInUsage = "the mon marks no more down OSDs out once fewer than this fraction of the OSDs are in, so a rack that goes down is not re-replicated onto the rest; 0: no floor, as Ceph's mon_osd_min_in_ratio"

// minInRatio is the mon's MinInRatio for --min-in-ratio r: 0 means no
// floor, as in Ceph, where mon.Config's zero is its default.
func minInRatio(r float64) (float64, error) {
	switch {
	case !(r >= 0 && r <= 1):
		return 0, usageErrorf("--min-in-ratio %g: want a fraction from 0 (no floor) to 1", r)
	case r == 0:
		return -1, nil
	}
	return r, nil
}

// downOutInterval is the mon's DownOutInterval for --down-out-interval
// d: 0 means never, as in Ceph, where mon.Config's zero is its default.
func downOutInterval(d time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, usageErrorf("--down-out-interval %v: want 0 (never) or more", d)
	case d == 0:
		return mon.NeverOut, nil
	}
	return d, nil
}

func newMonCmd() *cobra.Command {
	var (
		cfg        mon.Config
		pgs        uint32
		replicas   uint32
		minSize    uint32
		stopWithin time.Duration
		keyringDir string
		dashAddr   string
	)
	var (
		metricsAddr string
		pprofOn     bool
	)
	cmd := &cobra.Command{
		Use:   "mon",
		Short: "Run a monitor: the cluster map's authority",
		Long: `Runs mon --name, which keeps the cluster map in etcd and is its only writer,
as Ceph's mons are: OSDs boot and beacon to it, report peers they cannot
reach, and get every new map from it; operators run "osprey osd out|in|down|
rm|reweight|tree" and "osprey status" against it.

The map lives in an etcd cluster (--etcd ENDPOINTS), or, for a one-mon
cluster, in an etcd this process runs itself with its data in --embed-etcd
DIR. Several mons may share one etcd: they elect a leader, which does the
writing; the others answer reads and point writers to the leader, and one of
them takes over within seconds when the leader dies.

The first mon to start on an empty etcd creates the cluster: a new fsid and
the epoch-1 map, with the pool of --pgs, --replicas and --min-size and no
OSDs yet. Those flags do nothing once the cluster exists.

Authentication is on (docs/auth.md): every peer proves an identity the
cluster's CA signed, and every request is checked against its caps. At start
the mon writes client.admin.keyring (the operator's) and
client.bootstrap-osd.keyring (what a new OSD starts with) into --keyring-dir,
and writes each again whenever its key is rotated (on any mon), so the copies
there stay current. --auth none turns authentication off, for
tests and closed networks only; the mon logs a warning.

An OSD that sends no beacon for --heartbeat-grace, or that two OSDs on other
hosts report unreachable for that long, is marked down (at once when its
peers' connections are refused); one down for --down-out-interval is marked
out, and its PGs move. SIGINT or SIGTERM stops the mon; a standby takes over.

--dashboard-addr HOST:PORT serves a live status page (docs/dashboard.md) on
an HTTP listener of its own: health and its reasons, the OSD tree, PGs by
state, throughput and recent events. It has no authentication: bind it to
loopback or an admin network.`,
		Example: `  # one mon with its own etcd
  osprey mon --listen tcp://10.0.0.1:3300 --embed-etcd /var/lib/osprey/mon.a

  # with its status page on http://127.0.0.1:7000/
  osprey mon --embed-etcd /var/lib/osprey/mon.a --dashboard-addr 127.0.0.1:7000

  # three mons on an etcd cluster
  osprey mon --name a --listen tcp://10.0.0.1:3300 --etcd http://10.0.0.1:2379,http://10.0.0.2:2379,http://10.0.0.3:2379`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if pprofOn && metricsAddr == "" {
				return usageErrorf(pprofNeedsMetrics)
			}
			var err error
			if cfg.DownOutInterval, err = downOutInterval(cfg.DownOutInterval); err != nil {
				return err
			}
			if cfg.MinInRatio, err = minInRatio(cfg.MinInRatio); err != nil {
				return err
			}
			if (len(cfg.Etcd) == 0) == (cfg.EmbedEtcdDir == "") {
				return usageErrorf("give either --etcd ENDPOINTS or --embed-etcd DIR")
			}
			if minSize > replicas {
				return usageErrorf("--min-size %d exceeds --replicas %d", minSize, replicas)
			}
			if pgs == 0 || pgs > placement.MaxPGCount {
				return usageErrorf("--pgs %d: want 1..%d", pgs, placement.MaxPGCount)
			}
			if replicas == 0 || replicas > mon.MaxPoolSize {
				return usageErrorf("--replicas %d: want 1..%d, as osd pool set size takes", replicas, mon.MaxPoolSize)
			}
			cfg.Pool = &osdpb.Pool{Id: placement.DefaultPoolID, Name: placement.DefaultPoolName, Size: replicas, PgCount: pgs, MinSize: minSize}
			cfg.Logger = slog.Default()
			if keyringDir == "" {
				keyringDir = cfg.EmbedEtcdDir
			}
			m, err := mon.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if !cfg.NoAuth && keyringDir != "" {
				k, err := m.WriteKeyrings(cmd.Context(), keyringDir)
				if err != nil {
					m.Close(context.Background())
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "client.admin keyring: %s\nclient.bootstrap-osd keyring: %s\n", k.AdminPath, k.BootstrapOSDPath)
			}
			role := "standby"
			if m.IsLeader() {
				role = "leader"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "mon.%s serving on %s (%s), fsid %s, map epoch %d\n", cfg.Name, m.Addr(), role, m.FSID(), m.Map().Epoch())
			var ms *metrics.Server
			if metricsAddr != "" {
				if ms, err = metrics.Serve(cmd.Context(), metrics.ServerOptions{Addr: metricsAddr, Registry: metrics.MonRegistry(m), Pprof: pprofOn, Ready: m.Ready}); err != nil {
					m.Close(context.Background())
					return fmt.Errorf("--metrics-addr: %w", err)
				}
				printMetrics(cmd.OutOrStdout(), "mon."+cfg.Name, ms)
			}
			var dash *dashboard.Server
			if dashAddr != "" {
				if dash, err = dashboard.Serve(cmd.Context(), dashAddr, dashboard.Options{Source: m, Logger: cfg.Logger}); err != nil {
					ms.Close(context.Background())
					m.Close(context.Background())
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "dashboard: %s\n", dash.URL())
			}
			<-cmd.Context().Done()
			ctx, cancel := context.WithTimeout(context.Background(), stopWithin)
			defer cancel()
			dash.Close(ctx)
			return errors.Join(ms.Close(ctx), m.Close(ctx))
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", "a", "this mon's name (its entity is mon.NAME)")
	f.StringVar(&cfg.Listen, "listen", "tcp://127.0.0.1:3300", "msgr address to serve on")
	f.StringSliceVar(&cfg.Etcd, "etcd", nil, "etcd endpoints, e.g. http://10.0.0.1:2379,http://10.0.0.2:2379")
	f.StringVar(&cfg.EmbedEtcdDir, "embed-etcd", "", "run a single-node etcd in this process, with its data in this directory")
	f.DurationVar(&cfg.HeartbeatGrace, "heartbeat-grace", 20*time.Second, "an OSD silent (or reported unreachable) this long is marked down")
	f.DurationVar(&cfg.DownOutInterval, "down-out-interval", 10*time.Minute, downOutUsage)
	f.Float64Var(&cfg.MinInRatio, "min-in-ratio", 0.75, minInUsage)
	f.IntVar(&cfg.MinDownReporters, "min-down-reporters", 2, "reporters (hosts) needed to mark an OSD down")
	f.Uint32Var(&pgs, "pgs", placement.DefaultPGCount, "PGs of the default pool (new cluster only)")
	f.Uint32Var(&replicas, "replicas", 3, "replicas of the default pool (new cluster only)")
	markPositive(f, "pgs", "replicas", "heartbeat-grace", "min-down-reporters")
	f.Uint32Var(&minSize, "min-size", 0, "min_size of the default pool; 0: replicas - replicas/2 (new cluster only)")
	f.DurationVar(&stopWithin, "stop-timeout", 10*time.Second, "bound on a graceful stop")
	f.Var(modesFlag{&cfg.ServiceModes}, "ms-service-mode", "connection modes the mon accepts from clients and daemons: crc, secure (needs --auth cert), prefer-secure or prefer-crc (Ceph's ms_mon_service_mode)")
	f.Var(authFlag{&cfg.NoAuth}, "auth", `"cert": authenticate every peer and check its caps; "none": no authentication (tests and closed networks only)`)
	f.StringVar(&metricsAddr, "metrics-addr", "", metricsAddrUsage)
	f.BoolVar(&pprofOn, "pprof", false, pprofUsage)
	f.StringVar(&keyringDir, "keyring-dir", "", "where to write client.admin.keyring and client.bootstrap-osd.keyring, kept current across rotations (default: the --embed-etcd directory; none with --etcd)")
	f.StringVar(&dashAddr, "dashboard-addr", "", "HOST:PORT to serve the status page on (HTTP, no authentication); '' for none")
	cmd.AddCommand(newMonRmCmd())
	return cmd
}

// newMonRmCmd is `osprey mon rm NAME`, Ceph's `ceph mon remove`.
func newMonRmCmd() *cobra.Command {
	var mf monFlags
	var asJSON bool
	c := &cobra.Command{
		Use:   "rm NAME",
		Short: "Forget a retired mon, so that status no longer warns it is down (MON_DOWN)",
		Long: `Removes mon NAME from the mons the cluster counts, as "ceph mon remove": the
cluster remembers every mon that ever ran, and "osprey status" warns MON_DOWN
while one does not run. A mon that runs is refused: stop it first. Its etcd
member, if it had one, is etcd's to remove ("etcdctl member remove").
Needs an admin keyring.`,
		Example: `  osprey mon rm c`,
		Args:    argsBetween(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := monCommand(cmd, mf, &osdpb.MonCommand{Prefix: "mon rm", Var: args[0]})
			if err != nil {
				return err
			}
			if asJSON {
				fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(rep.Output))
				return nil
			}
			var res struct{ Message string }
			if err := json.Unmarshal([]byte(rep.Output), &res); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "mon rm %s: %s\n", args[0], res.Message)
			return nil
		},
	}
	addMonFlags(c.Flags(), &mf)
	c.Flags().BoolVar(&asJSON, "json", false, "print the mon's result as one JSON object: removed, message")
	return c
}
