package mon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Tests run against a real etcd, embedded, in a temporary directory. Set
// MON_TEST_LOG=1 to see the mons' logs.

func testLogger() *slog.Logger {
	if os.Getenv("MON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startTestEtcd(t testing.TB) *Etcd {
	t.Helper()
	e, err := StartEtcd(context.Background(), t.TempDir(), testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// testConfig is a mon config for tests: a grace long enough that OSDs
// need no beacons unless a test wants leases to expire, no down-out, a
// small pool, the shortest etcd session. Auth is off: these tests play
// several OSDs through one client; access_test.go turns it on.
func testConfig(e *Etcd, name string) Config {
	return Config{
		NoAuth: true,
		Name:   name, Listen: "tcp://127.0.0.1:0", Etcd: e.Endpoints(),
		HeartbeatGrace: 30 * time.Second, DownOutInterval: time.Hour,
		Pool:       &osdpb.Pool{Id: 1, Name: "default", Size: 3, PgCount: 16},
		Logger:     testLogger().With("test", "mon"),
		sessionTTL: 2,
	}
}

func startTestMon(t testing.TB, cfg Config) *Mon {
	t.Helper()
	m, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Close(ctx)
	})
	return m
}

// startAuthMon starts a mon (testConfig) on an etcd of its own with auth
// on, as access_test.go's tests want it.
func startAuthMon(t testing.TB) *Mon {
	t.Helper()
	cfg := testConfig(startTestEtcd(t), "a")
	cfg.NoAuth = false
	return startTestMon(t, cfg)
}

// mapRecorder collects what OnMap delivers.
type mapRecorder struct {
	mu   sync.Mutex
	maps []*placement.Map
}

func (r *mapRecorder) onMap(mp *placement.Map) {
	r.mu.Lock()
	r.maps = append(r.maps, mp)
	r.mu.Unlock()
}

func (r *mapRecorder) epochs() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for _, mp := range r.maps {
		out = append(out, mp.Epoch())
	}
	return out
}

func newTestClient(t testing.TB, rec *mapRecorder, addrs ...string) *monclient.Client {
	t.Helper()
	o := monclient.Options{Addrs: addrs, Name: "client.test", Logger: testLogger().With("test", "monclient"), Timeout: 2 * time.Second}
	if rec != nil {
		o.OnMap = rec.onMap
	}
	c, err := monclient.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// bootOf is a boot request of OSD n (uuid "uuid-n", port 6800+n, host
// "host-n").
func bootOf(n int) *osdpb.MonBoot {
	return &osdpb.MonBoot{
		Uuid:       fmt.Sprintf("uuid-%d", n),
		PublicAddr: fmt.Sprintf("tcp://127.0.0.1:%d", 6800+n), ClusterAddr: fmt.Sprintf("tcp://127.0.0.1:%d", 7800+n),
		Host: fmt.Sprintf("host-%d", n),
	}
}

func mustBoot(t testing.TB, c *monclient.Client, b *osdpb.MonBoot) *osdpb.MonBootReply {
	t.Helper()
	rep, err := c.Boot(ctxFor(t, 20*time.Second), b)
	if err != nil {
		t.Fatalf("boot %s: %v", b.Uuid, err)
	}
	return rep
}

func mustCommand(t testing.TB, c *monclient.Client, cmd *osdpb.MonCommand) *osdpb.MonCommandReply {
	t.Helper()
	rep, err := c.Command(ctxFor(t, 20*time.Second), cmd)
	if err != nil {
		t.Fatalf("%s %v: %v", cmd.Prefix, cmd.Ids, err)
	}
	return rep
}

func statusOf(err error) osdpb.Status {
	var oe *ops.Error
	if errors.As(err, &oe) {
		return oe.Status
	}
	return osdpb.Status_OK
}

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func osdOf(t testing.TB, mp *placement.Map, id uint32) *osdpb.OSDInfo {
	t.Helper()
	o, ok := mp.OSD(id)
	if !ok {
		t.Fatalf("osd.%d is not in map epoch %d", id, mp.Epoch())
	}
	return o
}

// cleanMon starts a mon (testConfig) with three OSDs booted and every PG
// reported active+clean, and a client of it.
func cleanMon(t *testing.T) (*Mon, *monclient.Client) {
	t.Helper()
	e := startTestEtcd(t)
	m := startTestMon(t, testConfig(e, "a"))
	c := newTestClient(t, nil, m.Addr())
	for n := range 3 {
		mustBoot(t, c, bootOf(n))
	}
	beaconAll(t, c, m.Map(), "active+clean")
	return m, c
}
