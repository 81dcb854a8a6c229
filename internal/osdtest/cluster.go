// Package osdtest starts real OSD clusters for tests: in this process
// (Start) with fast failure detection, on loopback ports of their own, or
// a local cluster (StartLocal). It must never be imported by non-test
// code.
package osdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/freeport"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/osd"
)

// Options shape a test cluster.
type Options struct {
	OSDs     int    // default 3
	Size     uint32 // replicas; default min(3, OSDs)
	PGs      uint32 // default 32
	Public   string // scheme of the public network; default "tcp"
	Cluster  string // scheme of the cluster network; default "tcp"
	Tweak    func(*osd.Config)
	LogLevel slog.Level // default: warnings and above, to stderr when -v
}

// Cluster is a running test cluster.
type Cluster struct {
	t    testing.TB
	Map  *placement.Map
	Dir  string
	OSDs []*osd.OSD // nil while stopped
	opts Options
}

// FreePort returns a loopback port nobody listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freeport.Port("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// NewMap returns a map for n OSDs on fresh loopback ports, at full ratios
// that ignore the host's disk (IgnoreHostDisk).
func NewMap(t testing.TB, opts Options) *placement.Map {
	t.Helper()
	opts.defaults()
	var pub, clu []string
	for range opts.OSDs {
		pub = append(pub, fmt.Sprintf("%s://127.0.0.1:%d", opts.Public, FreePort(t)))
		clu = append(clu, fmt.Sprintf("%s://127.0.0.1:%d", opts.Cluster, FreePort(t)))
	}
	m, err := placement.NewLocal(placement.LocalOptions{PublicAddrs: pub, ClusterAddrs: clu, PGCount: opts.PGs, Size: opts.Size})
	if err != nil {
		t.Fatal(err)
	}
	pb := m.Proto()
	pb.NearfullRatio, pb.BackfillfullRatio, pb.FullRatio = IgnoreHostDisk, IgnoreHostDisk, IgnoreHostDisk
	if m, err = placement.FromProto(pb); err != nil {
		t.Fatal(err)
	}
	return m
}

func (o *Options) defaults() {
	if o.OSDs == 0 {
		o.OSDs = 3
	}
	if o.PGs == 0 {
		o.PGs = 32
	}
	if o.Public == "" {
		o.Public = "tcp"
	}
	if o.Cluster == "" {
		o.Cluster = "tcp"
	}
	if o.LogLevel == 0 {
		o.LogLevel = slog.LevelWarn
	}
}

// Start starts a cluster in this process; t.Cleanup stops it.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	opts.defaults()
	// The ports were free when chosen, but another test process may bind
	// one before the OSD does (packages run in parallel): then choose
	// again, as local.Start does, a few times.
	var c *Cluster
	for attempt := 0; ; attempt++ {
		c = &Cluster{t: t, Map: NewMap(t, opts), Dir: t.TempDir(), opts: opts}
		c.OSDs = make([]*osd.OSD, opts.OSDs)
		err := c.startAll()
		if err == nil {
			break
		}
		for i := range c.OSDs {
			c.StopOSD(uint32(i))
		}
		if attempt == 4 || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := range c.OSDs {
			c.StopOSD(uint32(i))
		}
	})
	// Reads are served once each primary's peers answered its pings (read
	// leases): a test's first get would otherwise be retried, and one
	// that counts ops would count the retries.
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string { return "read leases held: " + c.laggyState() }, func() bool {
		return c.laggyState() == ""
	})
	return c
}

// laggyState names the first OSD with PGs that wait for read leases, or "".
func (c *Cluster) laggyState() string {
	for _, o := range c.OSDs {
		if o != nil {
			if n := o.Stats().LaggyPGs; n > 0 {
				return fmt.Sprintf("osd.%d has %d PGs waiting for read leases", o.ID(), n)
			}
		}
	}
	return ""
}

// StartLocal starts a local cluster (internal/local: with a mon, if
// opts says so); t.Cleanup stops it and fails t if that fails.
func StartLocal(t testing.TB, opts local.Options) *local.Cluster {
	t.Helper()
	lc, err := local.Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := lc.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return lc
}

// Keyring makes entity with caps at lc's mon ("auth get-or-create") and
// returns its keyring.
func Keyring(t testing.TB, lc *local.Cluster, entity string, caps map[string]string) *auth.Keyring {
	t.Helper()
	pem, err := lc.Mon.GetOrCreateKeyring(t.Context(), entity, caps)
	if err != nil {
		t.Fatal(err)
	}
	k, err := auth.ParseKeyring(pem)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Config is the configuration OSD id starts with.
func (c *Cluster) Config(id uint32) osd.Config {
	var w io.Writer = io.Discard
	if testing.Verbose() {
		w = os.Stderr
	}
	cfg := osd.Config{
		ID: id, Map: c.Map, DataDir: filepath.Join(c.Dir, fmt.Sprintf("osd.%d", id)),
		RepTimeout: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, HeartbeatGrace: time.Second,
		// Read leases as with a mon (which a static map lacks), so that
		// every test runs with them.
		ReadLease: 800 * time.Millisecond,
		Logger:    slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: c.opts.LogLevel})),
	}
	cfg.Store.CacheSize = 8 << 20
	cfg.Store.MemTableSize = 4 << 20
	// Replaced versions and parts go 2 s after their last reader instead
	// of 30: tests that wait for replaced parts' deletes poll for less,
	// and a loaded host still reads a window well within it.
	cfg.Store.KeepReplacedFor = 2 * time.Second
	if c.opts.Tweak != nil {
		c.opts.Tweak(&cfg)
	}
	return cfg
}

// startAll starts every OSD of a new cluster once.
func (c *Cluster) startAll() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range c.OSDs {
		o, err := osd.Start(ctx, c.Config(uint32(i)))
		if err != nil {
			return fmt.Errorf("start osd.%d: %w", i, err)
		}
		c.OSDs[i] = o
	}
	return nil
}

// StartOSD starts (or restarts, on its old data) OSD id.
func (c *Cluster) StartOSD(id uint32) *osd.OSD {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var o *osd.OSD
	var err error
	// The port may still be held by the previous incarnation's sockets
	// for a moment; retry a bounded number of times.
	for range 50 {
		if o, err = osd.Start(ctx, c.Config(id)); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // waiting for the port, not for state
	}
	if err != nil {
		c.t.Fatalf("start osd.%d: %v", id, err)
	}
	c.OSDs[id] = o
	return o
}

// StopOSD stops OSD id gracefully (nothing if stopped).
func (c *Cluster) StopOSD(id uint32) {
	if o := c.OSDs[id]; o != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := o.Close(ctx); err != nil {
			c.t.Logf("stop osd.%d: %v", id, err)
		}
		c.OSDs[id] = nil
	}
}

// Seeds are the public addresses of all OSDs.
func (c *Cluster) Seeds() []string {
	var s []string
	for info := range c.Map.OSDs() {
		s = append(s, info.PublicAddr)
	}
	return s
}

// Client returns a client of the cluster, closed by t.Cleanup.
func (c *Cluster) Client(t testing.TB, tweak func(*client.Options)) *client.Client {
	t.Helper()
	opts := client.Options{Seeds: c.Seeds(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RetryFor: 20 * time.Second}
	if tweak != nil {
		tweak(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// Eventually is msgrtest.Eventually: poll cond until it holds, failing
// the test after timeout.
var Eventually = msgrtest.Eventually

// Payload returns n bytes of pseudo-random data that seed determines.
func Payload(n int, seed uint64) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 1}).Read(b)
	return b
}

// Put stores data as bucket/key through cl.
func Put(ctx context.Context, cl *client.Client, bucket, key string, data []byte, opts client.PutOptions) (client.ObjectInfo, error) {
	return cl.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(len(data)), opts)
}

// Get reads bucket/key (or the range opts names) whole through cl.
func Get(ctx context.Context, cl *client.Client, bucket, key string, opts client.GetOptions) ([]byte, client.ObjectInfo, error) {
	o, err := cl.GetObject(ctx, bucket, key, opts)
	if err != nil {
		return nil, client.ObjectInfo{}, err
	}
	defer o.Close()
	info, _ := o.Stat()
	b, err := io.ReadAll(o)
	return b, info, err
}
