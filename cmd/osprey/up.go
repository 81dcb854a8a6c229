package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ospreystore/osprey/bench"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/dirlock"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/spf13/cobra"
)

// upOptions are `osprey up`'s flags.
type upOptions struct {
	readCache       int64 // each OSD's read cache, bytes
	s3AccessLog     bool
	s3CORSOrigins   []string
	dir             string
	temp            bool
	osds, replicas  int
	noAuth          bool // --auth none
	pgs             uint32
	host            string
	port            int
	transport       string
	public, cluster string
	demo            bool
	demoSizes       []string
	asJSON          bool
	readyTimeout    time.Duration
	stopTimeout     time.Duration
	grace, downOut  time.Duration
	minIn           float64
	failsafe        float64 // each OSD's failsafe full ratio
	faults          msgr.FaultInjection
	s3              string // the S3 gateway's address; "" none
	metrics         bool   // serve each daemon's /metrics on loopback
	dashboard       string // the mon's status page's address; "" none
	// --ms-cluster-mode, --ms-service-mode, --ms-client-mode
	clusterModes, serviceModes, clientModes []msgr.Mode
}

func newUpCmd() *cobra.Command {
	var o upOptions
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local cluster in this process (the embedded default)",
		Long: `Starts --osds OSDs in this process on --host, OSD i listening on port
--port+2i for clients and --port+2i+1 for replication, with their data and
the cluster map under --dir. It prints how to reach the cluster and serves
until Ctrl-C (SIGINT) or SIGTERM, then stops the OSDs cleanly.

The data stays: a later ` + "`osprey up`" + ` on the same --dir reads the map it
finds there (same fsid, same addresses) and serves the same objects. Flags
that contradict that map are an error rather than a silent new cluster.

--transport (or --public and --cluster separately) picks the messenger
transport: tcp, or rdma+PROVIDER (rdma+verbs on RDMA NICs, rdma+tcp
anywhere) in a binary built with -tags rdma.

--demo runs a short workload through the Go SDK once the cluster serves
(a bucket, objects of several sizes up to 100 MiB, list, get and verify,
a ranged read, stat, delete), prints what it measured, stops the cluster
and exits: 0 when every step worked and every byte came back intact.`,
		Example: `  osprey up                                  # ./osprey-data, ports 6800-6805
  osprey up --demo --temp                    # a self-checking tour; leaves nothing behind
  osprey up --osds 1 --dir /tmp/osp --port 7000
  osprey up --transport rdma+tcp             # built with -tags rdma
  osprey up --public tcp --cluster rdma+verbs --host 192.168.1.10`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUp(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", defaultDataDir, "data directory: the map and one osd.N directory per OSD; kept across runs")
	f.BoolVar(&o.temp, "temp", false, "keep the data in a fresh temporary directory, removed on exit (implies --port 0 unless --port is given)")
	f.IntVar(&o.osds, "osds", 3, "number of OSDs")
	f.IntVar(&o.replicas, "replicas", 0, "replicas per object (default min(3, --osds))")
	f.Uint32Var(&o.pgs, "pgs", placement.DefaultPGCount, "placement groups in the pool")
	markPositive(f, "osds", "replicas", "pgs")
	f.StringVar(&o.host, "host", "127.0.0.1", "IP address or host name the OSDs listen on and the map names")
	f.IntVar(&o.port, "port", 6800, "first port: OSD i uses port+2i (public) and port+2i+1 (cluster); 0 picks free ports")
	f.StringVar(&o.transport, "transport", "tcp", "transport of both networks: tcp or rdma+PROVIDER (needs -tags rdma)")
	f.StringVar(&o.public, "public", "", "transport of the client network (default --transport)")
	f.StringVar(&o.cluster, "cluster", "", "transport of the replication network (default --transport)")
	f.BoolVar(&o.demo, "demo", false, "run a demo workload through the SDK, print a summary, stop and exit")
	f.StringSliceVar(&o.demoSizes, "demo-sizes", []string{"4KiB", "1MiB", "16MiB", "100MiB"}, "object sizes of the --demo workload")
	f.BoolVar(&o.asJSON, "json", false, "print events (serving, demo steps, stopped) as JSON lines")
	f.DurationVar(&o.readyTimeout, "ready-timeout", 30*time.Second, "how long the OSDs may take to serve a first request")
	f.DurationVar(&o.stopTimeout, "stop-timeout", 30*time.Second, "bound on a graceful stop")
	f.DurationVar(&o.grace, "heartbeat-grace", 20*time.Second, "the mon marks an OSD down after this long without heartbeats (at once when its connections are refused)")
	f.DurationVar(&o.downOut, "down-out-interval", 10*time.Minute, downOutUsage)
	f.Float64Var(&o.minIn, "min-in-ratio", 0.75, minInUsage)
	markPositive(f, "heartbeat-grace")
	o.readCache = upReadCacheMiB << 20
	f.Var((*mibFlag)(&o.readCache), "read-cache-mib", "each OSD's cache of whole objects, MiB (osprey osd's is 512: up runs every OSD in one process); negative: off")
	f.Float64Var(&o.failsafe, "failsafe-full-ratio", 0.97, "fraction of an OSD's data disk in use over which it takes no write but deletes, even a replica's, as osprey osd's flag")
	f.Var((*socketFailures)(&o.faults), "inject-socket-failures", socketFailuresUsage)
	f.Var(authFlag{&o.noAuth}, "auth", `"cert": every daemon and client proves who it is and is checked against its caps; "none": no authentication (tests and closed networks only)`)
	f.Var(modesFlag{&o.clusterModes}, "ms-cluster-mode", clusterModeUsage)
	f.Var(modesFlag{&o.serviceModes}, "ms-service-mode", serviceModeUsage+" (by the OSDs and the mon)")
	f.Var(modesFlag{&o.clientModes}, "ms-client-mode", "connection modes of the clients up runs (--demo, the S3 gateway): crc, secure, prefer-secure or prefer-crc (Ceph's ms_client_mode)")
	f.BoolVar(&o.metrics, "metrics", true, "serve each daemon's Prometheus metrics (/metrics) on a free loopback port, and print where; not with --demo")
	f.StringVar(&o.dashboard, "dashboard-addr", "127.0.0.1:0", "HOST:PORT of the mon's status page (port 0: a free one); '' for none")
	f.BoolVar(&o.s3AccessLog, "s3-access-log", true, "the S3 gateway's: "+accessLogUsage)
	f.StringSliceVar(&o.s3CORSOrigins, "s3-cors-origin", nil, "the S3 gateway's --cors-origin: "+corsOriginUsage)
	f.StringVar(&o.s3, "s3", defaultS3Listen, "HOST:PORT of the S3 gateway (a free port with --port 0 or --temp); '' for none; not with --demo")
	return cmd
}

// upReadCacheMiB is each of up's OSDs' read cache: they share one
// process, whose heap Go lets grow to twice what is live, so three of
// osprey osd's 512 MiB took some 3 GB of a laptop for a trial cluster.
const upReadCacheMiB = 128

// localCluster is the cluster `up` runs.
type localCluster struct {
	*local.Cluster
	reused  bool   // the map was on disk already
	keyring string // client.admin's keyring file, when there is a mon
	// clientModes are the connection modes of the clients up runs.
	clientModes []msgr.Mode
	s3          *upGateway
	// noS3AccessLog: --s3-access-log=false.
	noS3AccessLog bool
	s3CORSOrigins []string // --s3-cors-origin
}

func runUp(cmd *cobra.Command, o upOptions) (err error) {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	if o.osds < 1 {
		return usageErrorf("--osds %d: want at least 1", o.osds)
	}
	if o.replicas < 0 || o.replicas > o.osds {
		return usageErrorf("--replicas %d: want 1..%d (the number of OSDs)", o.replicas, o.osds)
	}
	if o.port < 0 || o.port+2*o.osds-1 > 65535 {
		return usageErrorf("--port %d: ports %d..%d do not exist", o.port, o.port, o.port+2*o.osds-1)
	}
	if o.downOut, err = downOutInterval(o.downOut); err != nil {
		return err
	}
	if o.minIn, err = minInRatio(o.minIn); err != nil {
		return err
	}
	if o.public == "" {
		o.public = o.transport
	}
	if o.cluster == "" {
		o.cluster = o.transport
	}

	// A one-shot --demo logs warnings only unless asked: its summary is
	// the output, and OSD session logs would bury it.
	logger := slog.Default()
	if o.demo && !cmd.Flag("log-level").Changed {
		logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}

	dir := o.dir
	if o.temp {
		if dir, err = os.MkdirTemp("", "osprey-up-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if !cmd.Flags().Changed("port") {
			// Nobody restarts a temporary cluster, so fixed ports buy
			// nothing and could collide with a cluster already running.
			o.port = 0
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}

	lc, err := startLocal(ctx, cmd, o, dir, logger)
	if err != nil {
		return err
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		if err := lc.s3.stop(); err != nil {
			logger.Warn("osprey up: stopping the S3 gateway", "err", err)
		}
		sctx, cancel := context.WithTimeout(context.Background(), o.stopTimeout)
		defer cancel()
		return lc.Close(sctx)
	}
	defer func() {
		if cerr := stop(); err == nil {
			err = cerr
		}
	}()

	if err := waitReady(ctx, lc, o.readyTimeout, logger); err != nil {
		return err
	}
	if lc.AdminKeyring != nil {
		lc.keyring = lc.KeyringPath("client.admin")
	}
	if !o.demo && o.s3 != "" {
		if lc.s3, err = startUpGateway(ctx, lc, upS3Addr(cmd, o), cmd.Flags().Changed("s3"), o.metrics, logger, cmd.ErrOrStderr()); err != nil {
			return err
		}
	}
	printServing(out, o, lc)

	if o.demo {
		derr := runDemo(ctx, out, o, lc, logger)
		serr := stop()
		if derr != nil {
			return derr
		}
		if serr != nil {
			return serr
		}
		emitUp(out, o.asJSON, map[string]any{"event": "stopped"}, "osprey up: demo passed; cluster stopped")
		return nil
	}

	<-ctx.Done()
	// From here a second Ctrl-C kills the process the default way, for
	// when a graceful stop hangs.
	signal.Reset(os.Interrupt, syscall.SIGTERM)
	if !o.asJSON {
		fmt.Fprintln(out, "\nosprey up: stopping (Ctrl-C again to kill)")
	}
	if err := stop(); err != nil {
		return err
	}
	text := "osprey up: stopped; data kept in " + lc.Dir
	if o.temp {
		text = "osprey up: stopped; temporary data removed"
	}
	emitUp(out, o.asJSON, map[string]any{"event": "stopped", "dir": lc.Dir, "kept": !o.temp}, text)
	return nil
}

// startLocal loads the map in dir, or makes one, and starts its OSDs.
func startLocal(ctx context.Context, cmd *cobra.Command, o upOptions, dir string, logger *slog.Logger) (*localCluster, error) {
	lo := local.Options{OSDs: o.osds, Replicas: o.replicas, PGs: o.pgs, Public: o.public, Cluster: o.cluster,
		Host: o.host, BasePort: o.port, Dir: dir, Logger: logger, WithMon: true,
		HeartbeatGrace: o.grace, DownOutInterval: o.downOut, MinInRatio: o.minIn, Faults: o.faults, NoAuth: o.noAuth, DashboardAddr: o.dashboard,
		ClusterModes: o.clusterModes, ServiceModes: o.serviceModes, FailsafeFullRatio: o.failsafe, ReadCacheSize: o.readCache,
		Metrics: o.metrics && !o.demo} // a demo stops before anyone could scrape
	path := filepath.Join(dir, "map.json")
	m, err := placement.Load(path)
	switch {
	case err == nil:
		// A directory in use says so first: its map may not match the
		// flags either, but that is not what is wrong. (local.Start
		// takes the lock for good.)
		f, err := dirlock.Lock(dir)
		if err != nil {
			return nil, dirInUse(err, dir)
		}
		f.Close()
		if err := checkReuse(cmd, o, m, path); err != nil {
			return nil, err
		}
		lo.Map = m
	case errors.Is(err, fs.ErrNotExist):
	default:
		return nil, err
	}
	c, err := local.Start(ctx, lo)
	if errors.Is(err, placement.ErrInvalidMap) {
		return nil, usageErrorf("%v", err) // only flags go into a new map
	}
	if err != nil {
		return nil, dirInUse(err, lo.Dir)
	}
	return &localCluster{Cluster: c, reused: lo.Map != nil, clientModes: o.clientModes, noS3AccessLog: !o.s3AccessLog, s3CORSOrigins: o.s3CORSOrigins}, nil
}

// dirInUse says what to do about err when it is dir's lock held by
// another; other errors pass as they are.
func dirInUse(err error, dir string) error {
	var inUse *dirlock.InUseError
	if errors.As(err, &inUse) && inUse.Dir == dir {
		return fmt.Errorf("%w (another `osprey up` on this --dir? stop it first, or use another --dir)", err)
	}
	return err
}

// upMetrics is where one daemon of `osprey up` serves /metrics.
type upMetrics struct {
	Daemon string `json:"daemon"`
	URL    string `json:"url"`
}

// metricsURLs lists the daemons' metrics endpoints, the gateway's last.
func (lc *localCluster) metricsURLs() []upMetrics {
	var out []upMetrics
	for _, m := range lc.Metrics {
		out = append(out, upMetrics{m.Daemon, m.URL()})
	}
	if lc.s3 != nil && lc.s3.metrics != nil {
		out = append(out, upMetrics{"s3", lc.s3.metrics.URL()})
	}
	return out
}

// checkReuse refuses flags given on the command line that contradict the
// map found on disk. Flags left at their defaults do not count: a plain
// `osprey up` must restart whatever cluster the directory holds.
func checkReuse(cmd *cobra.Command, o upOptions, m *placement.Map, path string) error {
	changed := cmd.Flags().Changed
	var conflicts []string
	n := 0
	for range m.OSDs() {
		n++
	}
	if changed("osds") && o.osds != n {
		conflicts = append(conflicts, fmt.Sprintf("--osds %d (the map has %d)", o.osds, n))
	}
	var pool struct {
		size, pgs uint32
	}
	for p := range m.Pools() {
		pool.size, pool.pgs = p.Size, p.PgCount
		break
	}
	if changed("replicas") && uint32(o.replicas) != pool.size {
		conflicts = append(conflicts, fmt.Sprintf("--replicas %d (the map has %d)", o.replicas, pool.size))
	}
	if changed("pgs") && o.pgs != pool.pgs {
		conflicts = append(conflicts, fmt.Sprintf("--pgs %d (the map has %d)", o.pgs, pool.pgs))
	}
	if o.port != 0 && (changed("port") || changed("host") || changed("transport") || changed("public") || changed("cluster")) {
		want, err := local.NewMap(local.Options{OSDs: n, Public: o.public, Cluster: o.cluster, Host: o.host, BasePort: o.port})
		if err != nil {
			return usageErrorf("%v", err)
		}
		for info := range m.OSDs() {
			if w, ok := want.OSD(info.Id); ok && (info.PublicAddr != w.PublicAddr || info.ClusterAddr != w.ClusterAddr) {
				conflicts = append(conflicts, fmt.Sprintf("osd.%d at %s and %s (the map has %s and %s)",
					info.Id, w.PublicAddr, w.ClusterAddr, info.PublicAddr, info.ClusterAddr))
				break
			}
		}
	}
	if len(conflicts) > 0 {
		return usageErrorf("%s already holds cluster %s, which differs from the flags: %s; "+
			"drop those flags to restart it, or use another --dir for a new cluster",
			path, m.FSID(), strings.Join(conflicts, "; "))
	}
	return nil
}

// waitReady polls until the cluster answers a bucket listing through the
// SDK, the same path a user's first command takes, so that "serving" is
// printed only once it is true.
func waitReady(ctx context.Context, lc *localCluster, within time.Duration, logger *slog.Logger) error {
	rctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	cl, err := client.New(rctx, client.Options{Seeds: lc.Seeds(), Logger: logger, Keyring: lc.AdminKeyring, Modes: lc.clientModes, Transports: lc.Transports})
	if err != nil {
		return fmt.Errorf("the OSDs started but do not answer: %w", err)
	}
	defer cl.Close()
	if _, err := cl.ListBuckets(rctx); err != nil {
		return fmt.Errorf("the OSDs started but do not serve: %w", err)
	}
	return nil
}

// cliName is how the user can run this binary again: `go run` builds it
// into a temporary directory that is gone by the time they try.
func cliName() string {
	exe, err := os.Executable()
	if err == nil && strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/osprey"
	}
	if arg0 := os.Args[0]; strings.ContainsRune(arg0, filepath.Separator) {
		return arg0 // as the user typed it: ./osprey, bin/osprey
	}
	return "osprey"
}

type upOSDEvent struct {
	ID      uint32 `json:"id"`
	Public  string `json:"public"`
	Cluster string `json:"cluster"`
	Data    string `json:"data"`
}

// printServing tells the user where the cluster is and how to use it,
// with a command line that works as printed.
func printServing(w io.Writer, o upOptions, lc *localCluster) {
	seeds := strings.Join(lc.Seeds(), ",")
	pool := struct{ size, pgs uint32 }{}
	for p := range lc.Map.Pools() {
		pool.size, pool.pgs = p.Size, p.PgCount
		break
	}
	var osds []upOSDEvent
	for _, od := range lc.OSDs {
		info, _ := lc.Map.OSD(od.ID())
		osds = append(osds, upOSDEvent{ID: od.ID(), Public: info.PublicAddr, Cluster: info.ClusterAddr,
			Data: filepath.Join(lc.Dir, fmt.Sprintf("osd.%d", od.ID()))})
	}
	if o.asJSON {
		json.NewEncoder(w).Encode(map[string]any{
			"event": "serving", "fsid": lc.Map.FSID(), "epoch": lc.Map.Epoch(), "dir": lc.Dir, "map": lc.MapPath,
			"seeds": lc.Seeds(), "osds": osds, "replicas": pool.size, "pgs": pool.pgs, "reused": lc.reused,
			"mon": lc.monAddr(), "keyring": lc.keyring, "s3": lc.s3, "metrics": lc.metricsURLs(), "dashboard": lc.dashboardURL(),
		})
		return
	}
	how := "new cluster"
	if lc.reused {
		how = "restarted from " + lc.MapPath
	}
	fmt.Fprintf(w, "osprey up: serving %d OSDs, %d replicas, %d PGs (fsid %s, map epoch %d, %s)\n",
		len(lc.OSDs), pool.size, pool.pgs, lc.Map.FSID(), lc.Map.Epoch(), how)
	for _, e := range osds {
		fmt.Fprintf(w, "  osd.%d  public %s  cluster %s\n", e.ID, e.Public, e.Cluster)
	}
	if lc.Mon != nil {
		fmt.Fprintf(w, "  mon.a  %s (etcd embedded, data in %s)\n", lc.Mon.Addr(), lc.Etcd.Dir())
		if lc.keyring != "" {
			fmt.Fprintf(w, "  admin  client.admin's keyring in %s (keep it secret)\n", lc.keyring)
		} else {
			// --auth none: no keyring to point at, and a reader should
			// see that the cluster is open rather than an empty path.
			fmt.Fprintf(w, "  admin  no keyring: authentication is off (--auth none)\n")
		}
	}
	if u := lc.dashboardURL(); u != "" {
		fmt.Fprintf(w, "  dashboard  %s\n", u)
	}
	fmt.Fprintf(w, "  map    %s\n  seeds  %s\n", lc.MapPath, seeds)
	lc.s3.printS3(w)
	for _, m := range lc.metricsURLs() {
		fmt.Fprintf(w, "  metrics %-6s %s\n", m.Daemon, m.URL)
	}
	if o.demo {
		return
	}
	name := cliName()
	wd, _ := os.Getwd()
	// What commands run elsewhere need: where the cluster is (the mon,
	// which has every map change), and with auth on the admin's keyring,
	// which they look for in ./osprey-data only.
	exports := []string{envSeeds + "=" + seeds}
	if lc.Mon != nil {
		exports[0] = envMon + "=" + lc.Mon.Addr()
	}
	if lc.keyring != "" {
		exports = append(exports, envKeyring+"="+shellWord(lc.keyring))
	}
	env := ""
	if def, _ := filepath.Abs(defaultDataDir); def != lc.Dir {
		// Not where the commands look by default, even in the directory
		// up runs in: the Try lines need them too.
		for _, e := range exports {
			env += "export " + e + "\n  "
		}
	}
	// Daemons that accept only secure links refuse a crc client.
	cmdName := name
	if len(o.serviceModes) > 0 && !slices.Contains(o.serviceModes, msgr.ModeCRC) {
		cmdName += " --ms-client-mode secure"
	}
	fmt.Fprintf(w, "\nTry, from another shell in %s:\n  %s%s mb mybucket\n  %s put FILE mybucket/KEY\n  %s ls mybucket\n",
		wd, env, cmdName, cmdName, cmdName)
	if env == "" {
		fmt.Fprintf(w, "(from elsewhere: export %s)\n", strings.Join(exports, " "))
	}
	if o.temp {
		fmt.Fprintln(w, "Ctrl-C stops it and removes its data.")
	} else {
		fmt.Fprintf(w, "Ctrl-C stops it; the data stays in %s for the next `osprey up`.\n", lc.Dir)
	}
}

// emitUp prints an event: JSON, or its line for people.
func emitUp(w io.Writer, asJSON bool, ev map[string]any, text string) {
	if asJSON {
		json.NewEncoder(w).Encode(ev)
		return
	}
	fmt.Fprintln(w, text)
}

// The demo. Its objects hold a pattern in which every byte is a function
// of the object's seed and the byte's offset, so any range can be checked
// without keeping the object in memory: a 100 MiB object costs 100 MiB of
// disk per replica and none of RAM here.

// patternReader yields size bytes of the pattern of seed from offset 0.
type patternReader struct {
	seed      uint64
	off, size int64
}

func (r *patternReader) Read(b []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(b)), r.size-r.off))
	fillPattern(b[:n], r.seed, r.off)
	r.off += int64(n)
	return n, nil
}

// fillPattern writes the pattern of seed at offsets off.. into b. Each
// 8-byte word is a splitmix64 of (seed, word index): incompressible, as
// real data is, so no layer can flatter the throughput.
func fillPattern(b []byte, seed uint64, off int64) {
	var w [8]byte
	for i := 0; i < len(b); {
		word := uint64(off+int64(i)) / 8
		z := seed + word*0x9e3779b97f4a7c15
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(w[:], z^z>>31)
		j := int((uint64(off) + uint64(i)) % 8)
		i += copy(b[i:], w[j:])
	}
}

// patternChecker is an io.Writer that compares what it gets with the
// pattern, so a get can be streamed straight into it.
type patternChecker struct {
	seed uint64
	off  int64
	want []byte
	bad  int64 // offset of the first wrong byte, or -1
}

func (c *patternChecker) Write(b []byte) (int, error) {
	if cap(c.want) < len(b) {
		c.want = make([]byte, len(b))
	}
	want := c.want[:len(b)]
	fillPattern(want, c.seed, c.off)
	if c.bad < 0 {
		for i := range b {
			if b[i] != want[i] {
				c.bad = c.off + int64(i)
				break
			}
		}
	}
	c.off += int64(len(b))
	return len(b), nil
}

// demoStep is one measured SDK call.
type demoStep struct {
	Event       string  `json:"event"` // "demo"
	Op          string  `json:"op"`
	Key         string  `json:"key,omitempty"`
	Size        int64   `json:"size"`
	Seconds     float64 `json:"seconds"`
	BytesPerSec float64 `json:"bytes_per_sec,omitempty"`
	Detail      string  `json:"detail,omitempty"`
}

// runDemo walks the SDK through a bucket's life on the running cluster.
func runDemo(ctx context.Context, w io.Writer, o upOptions, lc *localCluster, logger *slog.Logger) error {
	var sizes []int64
	for _, s := range o.demoSizes {
		n, err := bench.ParseSize(s)
		if err != nil {
			return usageErrorf("--demo-sizes: %v", err)
		}
		sizes = append(sizes, n)
	}
	cl, err := client.New(ctx, client.Options{Seeds: lc.Seeds(), Logger: logger, Keyring: lc.AdminKeyring, Modes: lc.clientModes, Transports: lc.Transports})
	if err != nil {
		return err
	}
	defer cl.Close()

	var rb [4]byte
	rand.Read(rb[:])
	bucket := "demo-" + hex.EncodeToString(rb[:])
	type object struct {
		key  string
		size int64
		seed uint64
	}
	var objs []object
	for i, n := range sizes {
		objs = append(objs, object{key: fmt.Sprintf("demo/%02d-%s.bin", i, bench.FormatSize(n)), size: n, seed: uint64(i+1) * 0x5bd1e995})
	}

	const demoRow = "  %-13s %-20s %10s %10s %12s  %s"
	steps := 0
	begin := time.Now()
	step := func(op, key string, size int64, f func() (string, error)) error {
		t := time.Now()
		detail, err := f()
		if err != nil {
			if key != "" {
				return fmt.Errorf("demo: %s %s: %w", op, remotePath{bucket, key}, err)
			}
			return fmt.Errorf("demo: %s: %w", op, err)
		}
		s := demoStep{Event: "demo", Op: op, Key: key, Size: size, Seconds: time.Since(t).Seconds(), Detail: detail}
		if size > 0 && s.Seconds > 0 {
			s.BytesPerSec = float64(size) / s.Seconds
		}
		steps++
		if o.asJSON {
			json.NewEncoder(w).Encode(s)
			return nil
		}
		// One line per step as it ends: the large puts take seconds, and
		// a demo that prints nothing meanwhile looks hung.
		sz, rate := "", ""
		if size > 0 || op == "put" || op == "get" {
			sz = humanBytes(size)
		}
		if s.BytesPerSec > 0 {
			rate = bench.FormatRate(s.BytesPerSec)
		}
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf(demoRow, op, key, sz, roundDur(time.Since(t)), rate, detail), " "))
		return nil
	}
	if !o.asJSON {
		fmt.Fprintf(w, "\ndemo: bucket %s, %d objects (%s), through the Go SDK\n", bucket, len(objs), strings.Join(o.demoSizes, ", "))
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf(demoRow, "op", "key", "size", "time", "throughput", ""), " "))
	}

	if err := step("make-bucket", "", 0, func() (string, error) { return "", cl.MakeBucket(ctx, bucket) }); err != nil {
		return err
	}
	for _, ob := range objs {
		err := step("put", ob.key, ob.size, func() (string, error) {
			info, err := cl.PutObject(ctx, bucket, ob.key, &patternReader{seed: ob.seed, size: ob.size}, ob.size,
				client.PutOptions{ContentType: "application/octet-stream"})
			if err == nil && info.Size != ob.size {
				err = fmt.Errorf("stored %d bytes, sent %d", info.Size, ob.size)
			}
			return "etag " + info.ETag, err
		})
		if err != nil {
			return err
		}
	}
	err = step("list", "", 0, func() (string, error) {
		var got []string
		for info, err := range cl.ListObjects(ctx, bucket, client.ListOptions{Prefix: "demo/"}) {
			if err != nil {
				return "", err
			}
			got = append(got, fmt.Sprintf("%s=%d", info.Key, info.Size))
		}
		var want []string
		for _, ob := range objs {
			want = append(want, fmt.Sprintf("%s=%d", ob.key, ob.size))
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return "", fmt.Errorf("listed %v, want %v", got, want)
		}
		return fmt.Sprintf("%d objects, in key order", len(got)), nil
	})
	if err != nil {
		return err
	}
	for _, ob := range objs {
		err := step("get", ob.key, ob.size, func() (string, error) {
			obj, err := cl.GetObject(ctx, bucket, ob.key, client.GetOptions{})
			if err != nil {
				return "", err
			}
			defer obj.Close()
			chk := &patternChecker{seed: ob.seed, bad: -1}
			n, err := io.Copy(chk, obj)
			switch {
			case err != nil:
				return "", err
			case n != ob.size:
				return "", fmt.Errorf("read %d bytes, want %d", n, ob.size)
			case chk.bad >= 0:
				return "", fmt.Errorf("byte %d differs from what was put", chk.bad)
			}
			return "bytes verified", nil
		})
		if err != nil {
			return err
		}
	}
	if big := objs[len(objs)-1]; big.size >= 2 {
		// A ranged read from the middle of the largest object: S3's
		// Range: bytes=, through io.ReaderAt.
		n := min(big.size/2, 1<<20)
		off := big.size/2 - n/2
		err := step("read-at", big.key, n, func() (string, error) {
			obj, err := cl.GetObject(ctx, bucket, big.key, client.GetOptions{})
			if err != nil {
				return "", err
			}
			defer obj.Close()
			buf := make([]byte, n)
			if _, err := obj.ReadAt(buf, off); err != nil && !(errors.Is(err, io.EOF) && off+n == big.size) {
				return "", err
			}
			chk := &patternChecker{seed: big.seed, off: off, bad: -1}
			chk.Write(buf)
			if chk.bad >= 0 {
				return "", fmt.Errorf("byte %d differs from what was put", chk.bad)
			}
			return fmt.Sprintf("bytes %d-%d verified", off, off+n-1), nil
		})
		if err != nil {
			return err
		}
	}
	for _, ob := range objs {
		err := step("stat", ob.key, 0, func() (string, error) {
			info, err := cl.StatObject(ctx, bucket, ob.key)
			if err == nil && info.Size != ob.size {
				err = fmt.Errorf("size %d, want %d", info.Size, ob.size)
			}
			return fmt.Sprintf("size %d, etag %s", info.Size, info.ETag), err
		})
		if err != nil {
			return err
		}
	}
	for _, ob := range objs {
		err := step("delete", ob.key, 0, func() (string, error) {
			if err := cl.RemoveObject(ctx, bucket, ob.key); err != nil {
				return "", err
			}
			if _, err := cl.StatObject(ctx, bucket, ob.key); !errors.Is(err, client.ErrNoSuchKey) {
				return "", fmt.Errorf("after delete, stat says %v; want NoSuchKey", err)
			}
			return "gone", nil
		})
		if err != nil {
			return err
		}
	}
	if err := step("remove-bucket", "", 0, func() (string, error) { return "", cl.RemoveBucket(ctx, bucket) }); err != nil {
		return err
	}
	if !o.asJSON {
		var total int64
		for _, ob := range objs {
			total += ob.size
		}
		fmt.Fprintf(w, "demo: %d steps in %v; %s put, read back and verified\n", steps, roundDur(time.Since(begin)), humanBytes(total))
	}
	return nil
}

// roundDur keeps three significant digits or so: 1.23ms, 45.6ms, 1.2s.
func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// dashboardURL is the mon's status page; "" when there is none.
func (lc *localCluster) dashboardURL() string {
	if lc.Dashboard == nil {
		return ""
	}
	return lc.Dashboard.URL()
}

func (lc *localCluster) monAddr() string {
	if lc.Mon == nil {
		return ""
	}
	return lc.Mon.Addr()
}
