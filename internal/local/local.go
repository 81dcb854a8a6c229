// Package local runs a whole Osprey cluster in one process: its OSDs on
// loopback (or any one host), their data under one directory, the map in
// DIR/map.json. `osprey up` and `osprey bench obj` start clusters with it.
// It is for development, demos and benchmarks; it must never be the way a
// production cluster runs (one OSD per process and disk, `osprey osd`).
package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ospreystore/osprey/internal/dirlock"
	"github.com/ospreystore/osprey/internal/freeport"
	"github.com/ospreystore/osprey/internal/metrics"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/mon/dashboard"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/transports"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
	"github.com/prometheus/client_golang/prometheus"
)

// Options shape a local cluster.
type Options struct {
	// Map, when set, is the cluster to run (a restart of one whose map is
	// on disk): the fields below that describe a new map are ignored.
	Map *placement.Map
	// A new map: OSDs (default 3), Replicas (default min(3, OSDs)), PGs
	// (default placement.DefaultPGCount), the transports of the public and
	// cluster networks (default "tcp"), the host to listen on (default
	// 127.0.0.1), and ports: OSD i gets BasePort+2i (public) and
	// BasePort+2i+1 (cluster), or free ports when BasePort is 0.
	OSDs            int
	Replicas        int
	PGs             uint32
	Public, Cluster string
	Host            string
	BasePort        int
	// Dir holds the map and each OSD's data (DIR/osd.N); created if
	// missing. Empty: a temporary directory that Close removes. The
	// cluster holds a lock on it (DIR/LOCK) until Close: Start on a
	// directory in use fails at once with *dirlock.InUseError.
	Dir    string
	Logger *slog.Logger // default slog.Default()

	// WithMon runs a mon, on an etcd embedded in this process (data in
	// DIR/mon), and the OSDs boot through it instead of reading the map
	// file: failure detection, down/out and health then work as on a real
	// cluster. MonPort is its port (BasePort-1 by default, a free one when
	// BasePort is 0); HeartbeatGrace, DownOutInterval and MinInRatio tune
	// it (the mon's defaults, 20 s, 10 min and 0.75, when zero).
	WithMon                         bool
	MonPort                         int
	HeartbeatGrace, DownOutInterval time.Duration
	MinInRatio                      float64
	// NoAuth runs the mon and the OSDs without authentication (osprey up
	// --auth none). By default, with WithMon, they authenticate every
	// session: the OSDs join with client.bootstrap-osd's key, and
	// Cluster.AdminKeyring is the key for clients.
	NoAuth bool
	// ClusterModes and ServiceModes are the OSDs' and the mon's connection
	// modes (osd.Config, mon.Config; osprey up --ms-cluster-mode and
	// --ms-service-mode). Nil: crc.
	ClusterModes, ServiceModes []msgr.Mode
	// NearfullRatio, BackfillfullRatio and FullRatio are a new cluster's
	// full ratios, with WithMon (mon.Config), and FailsafeFullRatio every
	// OSD's (osd.Config); 0: the defaults. Tests that are not about full
	// disks set them to 1, so that how full the host's disk is plays no
	// part.
	NearfullRatio, BackfillfullRatio, FullRatio, FailsafeFullRatio float64
	// ReadCacheSize is each OSD's cache of checked whole objects
	// (store.Options.ReadCacheSize): 0 the store's default, negative off.
	ReadCacheSize int64

	// MaxMarkdownCount and MaxMarkdownPeriod are every OSD's (osd.Config),
	// with WithMon; zero: the defaults.
	MaxMarkdownCount  int
	MaxMarkdownPeriod time.Duration
	// RepTimeout and OpComplaintTime are every OSD's (osd.Config), with
	// WithMon; zero: the defaults.
	RepTimeout, OpComplaintTime time.Duration
	// OSDConfig, if set, edits each OSD's configuration last, before it
	// starts (tests: a store on a filesystem that can stall).
	OSDConfig func(id uint32, cfg *osd.Config)

	// Faults are injected into every OSD's messengers (osprey up
	// --inject-socket-failures).
	Faults msgr.FaultInjection

	// DashboardAddr, with WithMon, serves the mon's dashboard on this
	// HOST:PORT (port 0: a free one); "" serves none.
	DashboardAddr string

	// Metrics serves each daemon's Prometheus metrics (internal/metrics)
	// on a free loopback port; Cluster.Metrics lists where.
	Metrics bool
}

// DaemonMetrics is where one daemon of the cluster serves /metrics.
type DaemonMetrics struct {
	Daemon string // "mon.a", "osd.0"
	*metrics.Server
}

// Cluster is a running local cluster.
type Cluster struct {
	Map     *placement.Map
	MapPath string
	Dir     string
	OSDs    []*osd.OSD
	// With Options.WithMon: the mon and its embedded etcd.
	Mon  *mon.Mon
	Etcd *mon.Etcd
	// AdminKeyring is client.admin's (every cap), with WithMon and auth;
	// its file is DIR/client.admin.keyring.
	AdminKeyring *auth.Keyring
	// Metrics are the daemons' metrics listeners, with Options.Metrics:
	// the mon's first, then the OSDs' in id order.
	Metrics []DaemonMetrics
	// Dashboard is the mon's status page, with Options.DashboardAddr.
	Dashboard *dashboard.Server
	temp      bool
	lock      *os.File // holds Dir (dirlock.Lock); nil once Close released it
	// Transports are the one set every daemon of the cluster uses, and a
	// client in the same process may use too (client.Options.Transports):
	// one libfabric domain per RDMA provider for the whole process, as one
	// NIC has, so one completion poller instead of one per daemon. Close
	// closes them after the daemons.
	Transports transports.Set
	// osdRDMABudget is each OSD's share of the RDMA budget of Transports
	// (sharedTransports).
	osdRDMABudget int64
	// osdConfigs are what OSDs[i] started with, for RestartOSD.
	osdConfigs []osd.Config
	osdConfig  func(uint32, *osd.Config) // Options.OSDConfig
}

// KeyringPath is where the cluster keeps entity's keyring: DIR/ENTITY.keyring.
func (c *Cluster) KeyringPath(entity string) string {
	return mon.KeyringPath(c.Dir, entity)
}

// Start starts the cluster. With free ports, a port another process takes
// between being chosen and being bound makes it choose again, a few times.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	for attempt := 0; ; attempt++ {
		c, err := start(ctx, opts)
		if err == nil || opts.Map != nil || opts.BasePort != 0 || attempt == 4 || !errors.Is(err, syscall.EADDRINUSE) {
			return c, err
		}
	}
}

func start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Cluster{Dir: opts.Dir, osdConfig: opts.OSDConfig}
	if c.Dir != "" {
		if err := os.MkdirAll(c.Dir, 0o750); err != nil {
			return nil, err
		}
	} else {
		d, err := os.MkdirTemp("", "osprey-")
		if err != nil {
			return nil, err
		}
		c.Dir, c.temp = d, true
	}
	var err error
	if c.lock, err = dirlock.Lock(c.Dir); err != nil {
		c.Close(context.Background())
		return nil, err
	}
	c.MapPath = filepath.Join(c.Dir, "map.json")
	c.Map = opts.Map
	if c.Map == nil {
		m, err := NewMap(opts)
		if err == nil {
			err = m.Save(c.MapPath)
		}
		if err != nil {
			c.Close(context.Background())
			return nil, err
		}
		c.Map = m
	}
	if c.Transports, c.osdRDMABudget, err = sharedTransports(c.Map); err != nil {
		c.Close(context.Background())
		return nil, err
	}
	if err := c.startDaemons(ctx, opts); err != nil {
		c.Close(context.Background())
		return nil, err
	}
	return c, nil
}

// startDaemons starts the OSDs (through a mon with opts.WithMon, else on
// the map as it is) and the metrics endpoint.
func (c *Cluster) startDaemons(ctx context.Context, opts Options) error {
	if opts.WithMon {
		if err := c.startWithMon(ctx, opts); err != nil {
			return err
		}
		return c.serveMetrics(ctx, opts)
	}
	for info := range c.Map.OSDs() {
		if err := c.startOSD(ctx, info.Id, osd.Config{ID: info.Id, Map: c.Map, MapPath: c.MapPath, Transports: c.Transports,
			DataDir: filepath.Join(c.Dir, fmt.Sprintf("osd.%d", info.Id)), Logger: opts.Logger, Faults: opts.Faults, FailsafeFullRatio: opts.FailsafeFullRatio,
			Store: store.Options{ReadCacheSize: opts.ReadCacheSize}}); err != nil {
			return err
		}
	}
	return c.serveMetrics(ctx, opts)
}

// serveMetrics starts the daemons' metrics listeners, with opts.Metrics.
func (c *Cluster) serveMetrics(ctx context.Context, opts Options) error {
	if !opts.Metrics {
		return nil
	}
	const addr = "127.0.0.1:0"
	serve := func(daemon string, reg *prometheus.Registry, ready func() error) error {
		s, err := metrics.Serve(ctx, metrics.ServerOptions{Addr: addr, Registry: reg, Logger: opts.Logger, Ready: ready})
		if err != nil {
			return fmt.Errorf("%s: %w", daemon, err)
		}
		c.Metrics = append(c.Metrics, DaemonMetrics{daemon, s})
		return nil
	}
	if c.Mon != nil {
		if err := serve("mon.a", metrics.MonRegistry(c.Mon), c.Mon.Ready); err != nil {
			return err
		}
	}
	for _, o := range c.OSDs {
		if err := serve(fmt.Sprintf("osd.%d", o.ID()), metrics.OSDRegistry(o), o.Ready); err != nil {
			return err
		}
	}
	return nil
}

// startWithMon starts etcd and the mon, then each OSD of c.Map at its
// addresses there: the OSDs get their ids from the mon (in map order, so
// osd.N lands in DIR/osd.N) and boot through it. The map file is written
// again from the mon's map once all are up, for the CLI to find seeds.
func (c *Cluster) startWithMon(ctx context.Context, opts Options) error {
	host := cmp.Or(opts.Host, "127.0.0.1")
	port := opts.MonPort
	if port == 0 && opts.BasePort > 0 {
		port = opts.BasePort - 1
	}
	if port == 0 {
		var err error
		if port, err = freeport.Port(host); err != nil {
			return err
		}
	}
	var err error
	if c.Etcd, err = mon.StartEtcd(ctx, filepath.Join(c.Dir, "mon", "etcd"), opts.Logger); err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	var pool *osdpb.Pool
	for p := range c.Map.Pools() {
		pool = p
		break
	}
	pub := cmp.Or(opts.Public, "tcp")
	if info, ok := c.Map.OSD(0); ok {
		pub, _, _ = strings.Cut(info.PublicAddr, "://")
	}
	c.Mon, err = mon.Start(ctx, mon.Config{Name: "a", Listen: pub + "://" + net.JoinHostPort(host, fmt.Sprint(port)),
		Etcd: c.Etcd.Endpoints(), Transports: c.Transports, HeartbeatGrace: opts.HeartbeatGrace, DownOutInterval: opts.DownOutInterval, MinInRatio: opts.MinInRatio,
		Pool: pool, Logger: opts.Logger, NoAuth: opts.NoAuth, ServiceModes: opts.ServiceModes,
		NearfullRatio: opts.NearfullRatio, BackfillfullRatio: opts.BackfillfullRatio, FullRatio: opts.FullRatio})
	if err != nil {
		return fmt.Errorf("starting the mon: %w", err)
	}
	var bootstrap *auth.Keyring
	if !opts.NoAuth {
		k, err := c.Mon.WriteKeyrings(ctx, c.Dir)
		if err != nil {
			return err
		}
		c.AdminKeyring, bootstrap = k.Admin, k.BootstrapOSD
	}
	if opts.DashboardAddr != "" {
		if c.Dashboard, err = dashboard.Serve(ctx, opts.DashboardAddr, dashboard.Options{Source: c.Mon, Logger: opts.Logger}); err != nil {
			return err
		}
	}
	for info := range c.Map.OSDs() {
		if err := c.startOSD(ctx, info.Id, osd.Config{Mon: []string{c.Mon.Addr()}, PublicListen: info.PublicAddr, ClusterListen: info.ClusterAddr, Transports: c.Transports,
			DataDir: filepath.Join(c.Dir, fmt.Sprintf("osd.%d", info.Id)), Logger: opts.Logger, Faults: opts.Faults,
			Keyring: bootstrap, NoAuth: opts.NoAuth, ClusterModes: opts.ClusterModes, ServiceModes: opts.ServiceModes, FailsafeFullRatio: opts.FailsafeFullRatio,
			Store: store.Options{ReadCacheSize: opts.ReadCacheSize}, MaxMarkdownCount: opts.MaxMarkdownCount, MaxMarkdownPeriod: opts.MaxMarkdownPeriod,
			RepTimeout: opts.RepTimeout, OpComplaintTime: opts.OpComplaintTime}); err != nil {
			return err
		}
	}
	if err := c.settle(ctx, 30*time.Second); err != nil {
		return err
	}
	// The OSDs' boots are map changes; the last one's map names them all.
	m := c.Mon.Map()
	for _, o := range c.OSDs {
		if o.Map().Epoch() > m.Epoch() {
			m = o.Map()
		}
	}
	c.Map = m
	if err := os.WriteFile(filepath.Join(c.Dir, "mon.addr"), []byte(c.Mon.Addr()+"\n"), 0o644); err != nil {
		return err
	}
	return m.Save(c.MapPath)
}

// settle waits, up to limit, until the cluster the mon sees has settled
// from the OSDs' boots: each boot after the first few moves PGs onto the
// new OSD, and the mon keeps their old acting sets (pg_temp) until it is
// filled, at once here (the PGs are empty) but a beacon later; each such
// map change has the PGs peer again. Start returns a cluster whose acting
// sets are placement's and none of whose PGs is reported peering (or
// anything but active), as far as the limit allows (a cluster too small
// for its pool's min_size never is).
func (c *Cluster) settle(ctx context.Context, limit time.Duration) error {
	settled := func() bool {
		if len(c.Mon.Map().Proto().GetPgTemp()) > 0 {
			return false
		}
		st, err := c.Mon.Status(ctx)
		if err != nil {
			return false
		}
		for state := range st.PGs {
			// unknown: not reported at this epoch yet, which a new
			// cluster's PGs are for a beacon; they peer at once.
			if !strings.HasPrefix(state, "active") && state != "unknown" {
				return false
			}
		}
		return true
	}
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for deadline := time.Now().Add(limit); !settled() && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-poll.C:
		}
	}
	return nil
}

// rdmaBudgetPerOSD is what one OSD's RDMA domain may register by default
// (rdma.Config.MemBudget).
const rdmaBudgetPerOSD = 1 << 30

// rdmaCQPerDaemon is the completion queue one daemon's RDMA domain has by
// default (rdma.Config.CQEntries with the default send slots).
const rdmaCQPerDaemon = 4096

// sharedTransports are the cluster's one set of transports, tuned by the
// environment as each daemon's own would be (transports.ConfigFromEnv).
// The registered-memory budget is per domain, and the daemons now share
// one: it is an OSD's budget times the OSDs, so their read caches, which
// may fill half of it, keep the room they had. The mon's and a client's
// links take little beside them. The completion queue is shared too, and
// every link of the cluster, both its ends, completes into it: it gets
// each daemon's (the OSDs, the mon and a client), so that their links
// fit the CQ the poller sleeps on rather than spill into more CQs, which
// it only polls (docs/rdma.md, "Completion queues").
func sharedTransports(m *placement.Map) (ts transports.Set, perOSD int64, err error) {
	cfg, err := transports.ConfigFromEnv()
	if err != nil {
		return nil, 0, err
	}
	var osds int64
	for range m.OSDs() {
		osds++
	}
	perOSD = cmp.Or(cfg.RDMAMemBudget, rdmaBudgetPerOSD)
	cfg.RDMAMemBudget = max(osds, 1) * perOSD
	cfg.RDMACQEntries = int(osds+2) * rdmaCQPerDaemon
	ts, err = transports.New(cfg)
	return ts, perOSD, err
}

// startOSD starts the OSD of map entry id and appends it to c.OSDs.
func (c *Cluster) startOSD(ctx context.Context, id uint32, cfg osd.Config) error {
	if c.osdConfig != nil {
		c.osdConfig(id, &cfg)
	}
	// The daemons share one RDMA domain (sharedTransports): an OSD whose
	// networks use it takes the share of client messages of its own
	// budget in it, not of the whole.
	if info, _ := c.Map.OSD(id); cfg.ClientMessageBytes == 0 && osd.RegisteredBudget(cfg.Transports, info.GetPublicAddr(), info.GetClusterAddr()) > 0 {
		cfg.ClientMessageBytes = osd.DefaultClientMessageBytes(c.osdRDMABudget)
	}
	o, err := osd.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("starting osd.%d: %w", id, err)
	}
	c.OSDs = append(c.OSDs, o)
	c.osdConfigs = append(c.osdConfigs, cfg)
	return nil
}

// StopOSD stops c.OSDs[i] cleanly: with a mon, it asks the mon to mark
// it down first (as osprey osd does on SIGTERM), and its connections are
// refused from then on.
func (c *Cluster) StopOSD(ctx context.Context, i int) error {
	if i < 0 || i >= len(c.OSDs) {
		return fmt.Errorf("local: no OSD at index %d (%d OSDs)", i, len(c.OSDs))
	}
	return c.OSDs[i].Close(ctx)
}

// RestartOSD starts c.OSDs[i] again, stopped or not, with its data and
// addresses; c.OSDs[i] is the new one.
func (c *Cluster) RestartOSD(ctx context.Context, i int) error {
	if err := c.StopOSD(ctx, i); err != nil {
		return err
	}
	o, err := osd.Start(ctx, c.osdConfigs[i])
	if err != nil {
		return fmt.Errorf("restarting osd.%d: %w", c.OSDs[i].ID(), err)
	}
	c.OSDs[i] = o
	return c.reserveMetrics(ctx, i)
}

// reserveMetrics moves the metrics listener of c.OSDs[i]'s daemon, if
// any, to c.OSDs[i]: the old one serves the registry of the OSD it
// replaced, closed. The new listener takes the old one's address, which
// the cluster printed and scrapers were given.
func (c *Cluster) reserveMetrics(ctx context.Context, i int) error {
	o := c.OSDs[i]
	daemon := fmt.Sprintf("osd.%d", o.ID())
	for j := range c.Metrics {
		dm := &c.Metrics[j]
		if dm.Daemon != daemon {
			continue
		}
		addr := dm.Addr()
		if err := dm.Close(ctx); err != nil {
			return fmt.Errorf("%s: closing its metrics listener: %w", daemon, err)
		}
		s, err := metrics.Serve(ctx, metrics.ServerOptions{Addr: addr, Registry: metrics.OSDRegistry(o), Logger: c.osdConfigs[i].Logger, Ready: o.Ready})
		if err != nil {
			return fmt.Errorf("%s: metrics on %s again: %w", daemon, addr, err)
		}
		dm.Server = s
	}
	return nil
}

// NewMap makes the epoch-1 map of a new local cluster from opts.
func NewMap(opts Options) (*placement.Map, error) {
	if opts.OSDs <= 0 {
		opts.OSDs = 3
	}
	if opts.Public == "" {
		opts.Public = "tcp"
	}
	if opts.Cluster == "" {
		opts.Cluster = "tcp"
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	var pub, clu []string
	for i := range opts.OSDs {
		pp, cp := opts.BasePort+2*i, opts.BasePort+2*i+1
		if opts.BasePort == 0 {
			var err error
			if pp, err = freeport.Port(opts.Host); err == nil {
				cp, err = freeport.Port(opts.Host)
			}
			if err != nil {
				return nil, err
			}
		}
		pub = append(pub, opts.Public+"://"+net.JoinHostPort(opts.Host, fmt.Sprint(pp)))
		clu = append(clu, opts.Cluster+"://"+net.JoinHostPort(opts.Host, fmt.Sprint(cp)))
	}
	return placement.NewLocal(placement.LocalOptions{PublicAddrs: pub, ClusterAddrs: clu, PGCount: opts.PGs, Size: uint32(opts.Replicas)})
}

// Seeds are the OSDs' public addresses.
func (c *Cluster) Seeds() []string {
	var s []string
	for info := range c.Map.OSDs() {
		s = append(s, info.PublicAddr)
	}
	return s
}

// Close stops the OSDs, releases the directory and removes it if temporary.
func (c *Cluster) Close(ctx context.Context) error {
	var errs []error
	for _, m := range c.Metrics {
		errs = append(errs, m.Close(ctx))
	}
	errs = append(errs, c.Dashboard.Close(ctx))
	// Replaced parts waiting for their delete go first, while every OSD
	// still answers (osd.FlushDrops).
	var wg sync.WaitGroup
	for _, o := range c.OSDs {
		wg.Go(func() { o.FlushDrops(ctx) })
	}
	wg.Wait()
	// The mon stops first, and the OSDs do not ask it to mark them down:
	// marking each down would only have the rest peer again, and warn, on
	// the way out; and while one mon still acted, an OSD stopped before
	// its peers was marked down on their reports of its refused
	// connections.
	if c.Mon != nil {
		errs = append(errs, c.Mon.Close(ctx))
	}
	for _, o := range c.OSDs {
		errs = append(errs, o.CloseWith(ctx, osd.CloseOptions{StayUp: c.Mon != nil}))
	}
	if c.Etcd != nil {
		c.Etcd.Close()
	}
	errs = append(errs, c.Transports.Close())
	if c.lock != nil {
		// Last, once nothing of the cluster touches the directory.
		errs = append(errs, c.lock.Close())
		c.lock = nil
	}
	if c.temp {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	return errors.Join(errs...)
}
