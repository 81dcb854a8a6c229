package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/dirlock"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
)

// hookStartOSD replaces startOSD for one test.
func hookStartOSD(t *testing.T, f func(context.Context, osd.Config) (*osd.OSD, error)) {
	t.Helper()
	prev := startOSD
	startOSD = f
	t.Cleanup(func() { startOSD = prev })
}

// captureOSDConfig has `osprey osd` stop before it starts the OSD: the
// func it returns runs `osprey osd` on a one-OSD map with more args and
// returns the configuration the flags made.
func captureOSDConfig(t *testing.T) (dir, mapPath string, osdConfig func(args ...string) osd.Config) {
	t.Helper()
	dir = t.TempDir()
	mapPath = writeMap(t, dir, 7000, 1)
	var got osd.Config
	stopHere := errors.New("stop here")
	hookStartOSD(t, func(_ context.Context, cfg osd.Config) (*osd.OSD, error) {
		got = cfg
		return nil, stopHere
	})
	return dir, mapPath, func(more ...string) osd.Config {
		t.Helper()
		got = osd.Config{}
		args := append([]string{"osd", "--map", mapPath, "--data", filepath.Join(dir, "osd.0")}, more...)
		if _, _, err := run(t, args...); !errors.Is(err, stopHere) {
			t.Fatalf("%v: %v", more, err)
		}
		return got
	}
}

// TestInjectSocketFailuresFlag: `osprey osd --inject-socket-failures N`
// reaches the OSD's messenger fault injection; 0 and no flag are off; a
// negative count is a usage error.
func TestInjectSocketFailuresFlag(t *testing.T) {
	dir, mapPath, osdConfig := captureOSDConfig(t)
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, 0}, {[]string{"--inject-socket-failures", "0"}, 0}, {[]string{"--inject-socket-failures", "50"}, 50}, {[]string{"--inject-socket-failures=7"}, 7}} {
		got := osdConfig(tc.args...)
		if got.Faults.EveryNFrames != tc.want || got.Faults.Probability != 0 {
			t.Errorf("%v: Faults %+v, want EveryNFrames %d", tc.args, got.Faults, tc.want)
		}
	}
	for _, bad := range []string{"-1", "many", "1.5"} {
		_, _, err := run(t, "osd", "--map", mapPath, "--data", dir, "--inject-socket-failures", bad)
		if exitCode(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "inject-socket-failures") {
			t.Errorf("--inject-socket-failures %s: %v (exit %d), want a usage error", bad, err, exitCode(err))
		}
	}
}

// TestKeepReplacedForFlag: `osprey osd --keep-replaced-for` reaches the
// store's KeepReplacedFor (how long replaced objects, and a multipart
// object's parts, stay readable for reads under way).
func TestKeepReplacedForFlag(t *testing.T) {
	_, _, osdConfig := captureOSDConfig(t)
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{{nil, 30 * time.Second}, {[]string{"--keep-replaced-for", "10m"}, 10 * time.Minute}, {[]string{"--keep-replaced-for=-1s"}, -time.Second}} {
		if got := osdConfig(tc.args...).Store.KeepReplacedFor; got != tc.want {
			t.Errorf("%v: KeepReplacedFor %v, want %v", tc.args, got, tc.want)
		}
	}
}

// faultCounter is a slog handler that counts the messenger's injected
// link faults, by network ("public", "cluster").
type faultCounter struct {
	net    string
	counts *sync.Map // net -> *atomic.Int64
}

func (h faultCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h faultCounter) WithGroup(string) slog.Handler            { return h }
func (h faultCounter) WithAttrs(as []slog.Attr) slog.Handler {
	for _, a := range as {
		if a.Key == "net" {
			h.net = a.Value.String()
		}
	}
	return h
}
func (h faultCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "msgr: link fault" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" && strings.Contains(a.Value.String(), "injected fault") {
			n, _ := h.counts.LoadOrStore(h.net, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			return false
		}
		return true
	})
	return nil
}

func (h faultCounter) count(net string) int64 {
	if n, ok := h.counts.Load(net); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// TestInjectSocketFailuresEndToEnd runs three `osprey osd
// --inject-socket-failures 50` in process and a put/get workload through
// the SDK: every object must come back intact although sockets fail all
// the time, on the replication network (lossless sessions reconnect and
// resend) and on the client one (the client retries its op).
func TestInjectSocketFailuresEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	const osds = 3
	dir := t.TempDir()
	var pub, clu []string
	for range osds {
		pub = append(pub, fmt.Sprintf("tcp://127.0.0.1:%d", osdtest.FreePort(t)))
		clu = append(clu, fmt.Sprintf("tcp://127.0.0.1:%d", osdtest.FreePort(t)))
	}
	m, err := placement.NewLocal(placement.LocalOptions{PublicAddrs: pub, ClusterAddrs: clu, PGCount: 16})
	if err != nil {
		t.Fatal(err)
	}
	mapPath := filepath.Join(dir, "map.json")
	if err := m.Save(mapPath); err != nil {
		t.Fatal(err)
	}

	faults := faultCounter{counts: &sync.Map{}}
	started := make(chan error, osds)
	hookStartOSD(t, func(ctx context.Context, cfg osd.Config) (*osd.OSD, error) {
		if cfg.Faults.EveryNFrames != 50 {
			t.Errorf("osd.%d: Faults %+v, want EveryNFrames 50", cfg.ID, cfg.Faults)
		}
		cfg.Logger = slog.New(faults) // observe the faults; the flag set the rest
		o, err := osd.Start(ctx, cfg)
		started <- err
		return o, err
	})
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, osds)
	for i := range osds {
		wg.Go(func() {
			cmd := newRootCmd()
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			cmd.SetArgs([]string{"osd", "--id", fmt.Sprint(i), "--map", mapPath, "--data", filepath.Join(dir, fmt.Sprintf("osd.%d", i)),
				"--inject-socket-failures", "50", "--stop-timeout", "20s", "--log-level", "error"})
			errs[i] = cmd.ExecuteContext(ctx)
		})
	}
	defer func() {
		stop()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("osd.%d: %v", i, err)
			}
		}
	}()
	for range osds {
		select {
		case err := <-started:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the OSDs did not start within 30s")
		}
	}

	wctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := client.New(wctx, client.Options{Seeds: pub, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RetryFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.MakeBucket(wctx, "faults"); err != nil {
		t.Fatal(err)
	}
	// Rounds of overwrites and reads until faults have hit both networks,
	// at least three rounds: a fault comes after 25 to 75 frames on a
	// link, and how many frames one round puts on each link depends on
	// placement and timing (CI runs have seen a round with no fault on
	// the public network, and one with none on the cluster network).
	sizes := []int{0, 1, 4 << 10, 64 << 10, 1 << 20}
	objs := make([][]byte, 40)
	for round := 0; round < 3 || faults.count("cluster") == 0 || faults.count("public") == 0; round++ {
		if wctx.Err() != nil {
			t.Fatalf("after %d rounds: injected faults: cluster %d, public %d; want some on both", round, faults.count("cluster"), faults.count("public"))
		}
		for i := range objs {
			objs[i] = osdtest.Payload(sizes[i%len(sizes)], uint64(round*len(objs)+i))
			if _, err := osdtest.Put(wctx, cl, "faults", fmt.Sprintf("k%02d", i), objs[i], client.PutOptions{}); err != nil {
				t.Fatalf("put k%02d (round %d): %v", i, round, err)
			}
		}
		for i, want := range objs {
			got, _, err := osdtest.Get(wctx, cl, "faults", fmt.Sprintf("k%02d", i), client.GetOptions{})
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("get k%02d (round %d): %d bytes (want %d), %v", i, round, len(got), len(want), err)
			}
		}
	}
	t.Logf("injected faults survived: cluster network %d, public network %d", faults.count("cluster"), faults.count("public"))
}

// TestUpDemoWithSocketFailures: `osprey up --demo` with a socket failure
// injected about every 50 messages on every OSD messenger still passes
// its demo: every byte read back and verified.
func TestUpDemoWithSocketFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	// 16 PGs, not the default 128: the demo writes to a few, and peering
	// 128 over links that fail every 50 frames queued up to 1,700
	// messages on a session under load (race detector, CI). Before
	// heartbeats had side sessions of their own that made them seconds
	// late, peers flapped and the demo's first write outlasted the
	// client's retries (3 of 12 runs at load 20-25; 0 of 6 with 16 PGs);
	// 128 has not been measured since.
	out, _, err := run(t, "up", "--demo", "--temp", "--osds", "3", "--pgs", "16", "--demo-sizes", "0,1KiB,1MiB",
		"--inject-socket-failures", "50", "--log-level", "warn")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "demo passed") {
		t.Fatalf("demo output:\n%s", out)
	}
}

// TestOSDRefusesDataDirInUse: a second `osprey osd` on a data directory
// another holds fails at once, naming the holder, before it reads or
// writes anything there.
func TestOSDRefusesDataDirInUse(t *testing.T) {
	dir, mapPath, osdConfig := captureOSDConfig(t)
	data := filepath.Join(dir, "osd.0")
	osdConfig() // makes the directory; the lock goes with the command
	held, err := dirlock.Lock(data)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, _, err = run(t, "osd", "--map", mapPath, "--data", data)
	var inUse *dirlock.InUseError
	if !errors.As(err, &inUse) || !strings.Contains(err.Error(), "in use by process") {
		t.Fatalf("osprey osd on a data directory in use: %v", err)
	}
}

// TestOSDMetricsAddrInUseFailsFirst: an `osprey osd` whose --metrics-addr
// is taken (an earlier daemon not gone yet) fails naming the flag before
// it starts the OSD, which would open the store and join the cluster
// first.
func TestOSDMetricsAddrInUseFailsFirst(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dir, mapPath, _ := captureOSDConfig(t)
	started := false
	hookStartOSD(t, func(context.Context, osd.Config) (*osd.OSD, error) {
		started = true
		return nil, errors.New("started")
	})
	_, _, err = run(t, "osd", "--map", mapPath, "--data", filepath.Join(dir, "osd.0"), "--metrics-addr", held.Addr().String())
	if started || err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Fatalf("osprey osd with its --metrics-addr taken: %v (OSD started: %v), want --metrics-addr refused first", err, started)
	}
}
