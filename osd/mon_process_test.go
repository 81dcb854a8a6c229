package osd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/freeport"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/internal/smallfs"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// monChildSpec is what an OSD child that boots through a mon is told
// (OSPREY_TEST_OSD=mon:JSON).
type monChildSpec struct {
	// Mons are every mon's address: the OSD's mon client moves over them.
	Mons                  []string
	Data, Public, Cluster string
	RecoveryBytesPerSec   int64
	// Defaults runs the OSD at its default heartbeat settings (the
	// failover figures) instead of the tests' fast ones.
	Defaults bool
	// SmallDisk: the data directory is a small filesystem; the store
	// sizes its memtable to it.
	SmallDisk bool
	// Keyring is client.bootstrap-osd's keyring file, with which a new
	// OSD gets its own; none: auth is off.
	Keyring string
	// FailsafeFullRatio is the OSD's (osd.Config); 0: the default.
	FailsafeFullRatio float64
}

// monOSDProcess is the body of an OSD child that boots through a mon.
func monOSDProcess(spec string) {
	var sp monChildSpec
	if err := json.Unmarshal([]byte(spec), &sp); err != nil {
		fmt.Fprintf(os.Stderr, "bad spec %q: %v\n", spec, err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := osd.Config{Mon: sp.Mons, DataDir: sp.Data, PublicListen: sp.Public, ClusterListen: sp.Cluster,
		RecoveryBytesPerSec: sp.RecoveryBytesPerSec, Logger: log, NoAuth: sp.Keyring == "", FailsafeFullRatio: sp.FailsafeFullRatio}
	if sp.Keyring != "" {
		var err error
		if cfg.Keyring, err = auth.LoadKeyring(sp.Keyring); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	if !sp.Defaults {
		cfg.HeartbeatInterval, cfg.HeartbeatGrace, cfg.BeaconInterval = 200*time.Millisecond, 2*time.Second, 500*time.Millisecond
	}
	cfg.Store.CacheSize = 16 << 20
	if !sp.SmallDisk {
		cfg.Store.MemTableSize = 8 << 20
	}
	ctx := context.Background()
	o, err := osd.Start(ctx, cfg)
	serveChild(ctx, o, err)
}

// monCluster is a mon (on an embedded etcd) in the test process and OSD
// child processes that boot through it; with Mons: 2, a second mon runs as
// a child process too and leads, the in-process one its standby.
type monCluster struct {
	t     *testing.T
	etcd  *mon.Etcd
	mon   *mon.Mon // mon "a", in the test process
	dir   string
	mu    sync.Mutex
	procs map[int]*osdProc
	logs  map[int]*bytes.Buffer
	opts  monClusterOptions
	// monAddrs are every mon's address, mon "a" first: what the OSDs and
	// clients are given.
	monAddrs []string
	// monProc is mon "b", a child process (Mons: 2); nil once stopped.
	monProc *osdProc
	// monLogs hold the mons' logs (Mons: 2): mon.b's stderr, mon.a's
	// slog output.
	monLogs map[string]*bytes.Buffer
	// admin is client.admin's keyring, which the test's clients use;
	// bootstrap is client.bootstrap-osd's keyring file, which new OSDs
	// start with. Both unset with Mon.NoAuth.
	admin     *auth.Keyring
	bootstrap string
}

// monClusterOptions shape a monCluster.
type monClusterOptions struct {
	OSDs int
	// Mons is how many mons run: 0 or 1, mon "a" in the test process; 2
	// adds mon "b" as a child process, started first so that it leads,
	// with mon "a" its standby.
	Mons int
	Mon  mon.Config
	// RecoveryBytesPerSec throttles every OSD's recovery (0: unthrottled).
	RecoveryBytesPerSec int64
	// Defaults runs the OSDs at their default heartbeat settings.
	Defaults bool
	// SmallDisks gives OSD process i a data directory on a tmpfs of
	// SmallDisks[i] bytes, to fill up (unless the test mounted one there
	// already).
	SmallDisks map[int]int64
	// DefaultFullRatios keeps the default full ratios, for a test about
	// full disks; every OSD must then have a SmallDisk, so that the host's
	// disk plays no part. Otherwise every ratio is osdtest.IgnoreHostDisk.
	DefaultFullRatios bool
}

func startMonCluster(t *testing.T, opts monClusterOptions) *monCluster {
	ctx := ctxT(t, time.Minute)
	cfg := opts.Mon
	if !opts.DefaultFullRatios {
		cfg.NearfullRatio, cfg.BackfillfullRatio, cfg.FullRatio = osdtest.IgnoreHostDisk, osdtest.IgnoreHostDisk, osdtest.IgnoreHostDisk
	}
	mc := &monCluster{t: t, dir: t.TempDir(), procs: map[int]*osdProc{}, logs: map[int]*bytes.Buffer{}, opts: opts}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if opts.Mons > 2 {
		t.Fatalf("%d mons: at most 2", opts.Mons)
	}
	var err error
	if mc.etcd, err = mon.StartEtcd(ctx, filepath.Join(mc.dir, "etcd"), quiet); err != nil {
		t.Fatal(err)
	}
	cfg.Etcd, cfg.Listen, cfg.Logger = mc.etcd.Endpoints(), "tcp://127.0.0.1:0", quiet
	// Auth is on, as in any cluster: the mon writes the admin and
	// bootstrap keyrings, OSDs boot with the bootstrap key and keep their
	// own, clients are client.admin.
	if opts.Mons == 2 {
		t.Cleanup(func() { mc.stopMon(syscall.SIGKILL) }) // if mon "a" does not start
		mc.monLogs = map[string]*bytes.Buffer{"a": {}, "b": {}}
		mc.startMonB(ctx, cfg)
		cfg.Name = "a"
		cfg.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: mc.monLogs["a"], mu: &mc.mu}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if mc.mon, err = mon.Start(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	mc.monAddrs = append([]string{mc.mon.Addr()}, mc.monAddrs...)
	if !cfg.NoAuth && mc.admin == nil {
		if _, err := mc.mon.WriteKeyrings(ctx, mc.dir); err != nil {
			t.Fatal(err)
		}
		mc.loadKeyrings()
	}
	t.Cleanup(func() {
		for i := range mc.procs {
			mc.kill(i, syscall.SIGKILL)
		}
		mc.stopMon(syscall.SIGKILL)
		mc.mon.Close(context.Background())
		mc.etcd.Close()
		if t.Failed() {
			for i, b := range mc.logs {
				t.Logf("osd process %d log (tail):\n%s", i, tail(b.String(), 4000))
			}
			mc.mu.Lock()
			for name, b := range mc.monLogs {
				t.Logf("mon.%s log (tail):\n%s", name, tail(b.String(), 4000))
			}
			mc.mu.Unlock()
		}
	})
	for i := range opts.OSDs {
		mc.start(i)
	}
	return mc
}

// start runs OSD process i (its data in DIR/osd-i) and waits until it
// serves; a restart keeps its ports.
func (mc *monCluster) start(i int) {
	mc.t.Helper()
	data := filepath.Join(mc.dir, fmt.Sprintf("osd-%d", i))
	pub, clu := "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"
	small := mc.opts.SmallDisks[i]
	failsafe := osdtest.IgnoreHostDisk
	if mc.opts.DefaultFullRatios {
		failsafe = 0
		if small == 0 {
			mc.t.Fatalf("osd process %d at the default full ratios on the host's disk: give it a SmallDisk", i)
		}
	}
	if _, err := os.Stat(filepath.Join(data, "identity.json")); err != nil {
		if _, err := os.Stat(data); err != nil && small > 0 {
			smallfs.MountAt(mc.t, data, small)
		}
		p1, _ := freeport.Port("127.0.0.1")
		p2, _ := freeport.Port("127.0.0.1")
		pub, clu = fmt.Sprintf("tcp://127.0.0.1:%d", p1), fmt.Sprintf("tcp://127.0.0.1:%d", p2)
	} else {
		pub, clu = "", "" // the map's
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOSDProcess$")
	spec, _ := json.Marshal(monChildSpec{Mons: mc.monAddrs, Data: data, Public: pub, Cluster: clu,
		RecoveryBytesPerSec: mc.opts.RecoveryBytesPerSec, Defaults: mc.opts.Defaults, SmallDisk: small > 0,
		Keyring: mc.bootstrap, FailsafeFullRatio: failsafe})
	cmd.Env = append(os.Environ(), "OSPREY_TEST_OSD=mon:"+string(spec))
	mc.mu.Lock()
	logs := mc.logs[i]
	if logs == nil {
		logs = &bytes.Buffer{}
		mc.logs[i] = logs
	}
	mc.mu.Unlock()
	mc.procs[i] = runChild(mc.t, cmd, logs, &mc.mu, fmt.Sprintf("osd process %d", i))
}

func (mc *monCluster) kill(i int, sig syscall.Signal) {
	if p := mc.procs[i]; p != nil {
		stopChild(p, sig)
		delete(mc.procs, i)
	}
}

// loadKeyrings reads the keyrings the mon wrote into the cluster's
// directory.
func (mc *monCluster) loadKeyrings() {
	mc.t.Helper()
	var err error
	if mc.admin, err = auth.LoadKeyring(mon.KeyringPath(mc.dir, "client.admin")); err != nil {
		mc.t.Fatal(err)
	}
	mc.bootstrap = mon.KeyringPath(mc.dir, "client.bootstrap-osd")
}

// status is the mon's "status".
func (mc *monCluster) status(ctx context.Context) *mon.Status {
	st, err := mc.mon.Status(ctx)
	if err != nil {
		mc.t.Fatal(err)
	}
	return st
}

// waitStatus polls the mon's status until ok holds. A status call cut
// short by ctx's end fails as the wait does, with the last status.
func (mc *monCluster) waitStatus(ctx context.Context, what string, ok func(*mon.Status) bool) *mon.Status {
	mc.t.Helper()
	var last *mon.Status
	for {
		st, err := mc.mon.Status(ctx)
		switch {
		case err == nil && ok(st):
			return st
		case err == nil:
			last = st
		case ctx.Err() == nil:
			mc.t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			b, _ := json.Marshal(last)
			mc.t.Fatalf("waiting for %s: %s%s", what, b, osdtest.HostDiskNote(mc.dir))
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
}

// client is a client of the cluster that retries a failing op for
// retryFor.
func (mc *monCluster) client(t *testing.T, retryFor time.Duration) *client.Client {
	cl, err := client.New(context.Background(), client.Options{Mon: mc.monAddrs, Keyring: mc.admin, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryFor: retryFor, OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// healthyClient waits until all of mc's OSDs are up and its health is
// HEALTH_OK, then makes bucket with a client that retries for retryFor
// and returns the client.
func (mc *monCluster) healthyClient(ctx context.Context, retryFor time.Duration, bucket string) *client.Client {
	mc.t.Helper()
	n := mc.opts.OSDs
	mc.waitStatus(ctx, fmt.Sprintf("%d OSDs up, HEALTH_OK", n), func(s *mon.Status) bool { return s.OSDs.Up == n && s.Health.Status == mon.HealthOK })
	cl := mc.client(mc.t, retryFor)
	if err := cl.MakeBucket(ctx, bucket); err != nil {
		mc.t.Fatal(err)
	}
	return cl
}

// idOf is the OSD id process i got from the mon at its first boot.
func (mc *monCluster) idOf(i int) uint32 {
	mc.t.Helper()
	b, err := os.ReadFile(filepath.Join(mc.dir, fmt.Sprintf("osd-%d", i), "identity.json"))
	if err != nil {
		mc.t.Fatal(err)
	}
	var ident struct{ ID *uint32 }
	if err := json.Unmarshal(b, &ident); err != nil || ident.ID == nil {
		mc.t.Fatalf("osd process %d identity %s: %v", i, b, err)
	}
	return *ident.ID
}

// verifyStores stops every OSD process and checks, in the stores
// themselves, that every member of each object's acting set in the
// mon's final map holds its acknowledged bytes.
func (mc *monCluster) verifyStores(ctx context.Context, w *workload, procs []int) {
	mc.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	copies := mc.checkStores(ctx, procs, w.bucket, slices.Collect(maps.Keys(w.acked)), func(key string, got []byte) bool {
		return bytes.Equal(got, w.acked[key])
	}, w.failed)
	mc.t.Logf("copies per OSD in the stores: %v; %d puts failed, each on all members or none", copies, len(w.failed))
}

// checkStoredCopies stops the OSD processes procs and checks, in their
// stores, every member of each key's acting set in the mon's final map:
// the set is full and ok accepts each copy. It returns the copies per OSD.
func (mc *monCluster) checkStoredCopies(ctx context.Context, procs []int, bucket string, keys []string, ok func(key string, got []byte) bool) map[uint32]int {
	return mc.checkStores(ctx, procs, bucket, keys, ok, nil)
}

// checkStores is checkStoredCopies, and for each key of maybe (a put
// that failed, and so may or may not have been applied) that either every
// member of its acting set holds its bytes or none holds the key: never
// half there.
func (mc *monCluster) checkStores(ctx context.Context, procs []int, bucket string, keys []string, ok func(key string, got []byte) bool, maybe map[string][]byte) map[uint32]int {
	t := mc.t
	t.Helper()
	mp := mc.mon.Map()
	pool, found := mp.PoolByName("default")
	if !found {
		t.Fatal("no default pool")
	}
	stores := map[uint32]*store.Store{}
	for _, i := range procs {
		id := mc.idOf(i)
		mc.kill(i, syscall.SIGTERM)
		s, err := store.Open(ctx, store.Options{Dir: filepath.Join(mc.dir, fmt.Sprintf("osd-%d", i), "store"),
			CacheSize: 16 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[id] = s
	}
	copies := map[uint32]int{}
	var buf []byte
	for _, key := range keys {
		set := mp.ActingSet(pool.Id, placement.PGOf(pool, bucket, key))
		if len(set) != int(pool.Size) {
			t.Fatalf("%s: acting set %v in the final map", key, set)
		}
		for _, id := range set {
			s := stores[id]
			if s == nil {
				t.Fatalf("%s: acting set %v names osd.%d, not checked", key, set, id)
			}
			var err error
			_, buf, err = s.ReadRange(ctx, bucket, key, 0, -1, buf[:0])
			if err != nil || !ok(key, buf) {
				t.Fatalf("osd.%d's copy of %s: %v (%d bytes)", id, key, err, len(buf))
			}
			copies[id]++
		}
	}
	for key, want := range maybe {
		set := mp.ActingSet(pool.Id, placement.PGOf(pool, bucket, key))
		var have []uint32
		for _, id := range set {
			s := stores[id]
			if s == nil {
				t.Fatalf("%s: acting set %v names osd.%d, not checked", key, set, id)
			}
			var err error
			_, buf, err = s.ReadRange(ctx, bucket, key, 0, -1, buf[:0])
			switch {
			case err == nil && bytes.Equal(buf, want):
				have = append(have, id)
			case err == nil:
				t.Fatalf("osd.%d's copy of %s (a failed put): %d wrong bytes", id, key, len(buf))
			case !errors.Is(err, store.ErrNoSuchKey):
				t.Fatalf("osd.%d's copy of %s (a failed put): %v", id, key, err)
			}
		}
		if len(have) != 0 && len(have) != len(set) {
			t.Fatalf("%s, a put that failed, is half there: on %v of %v", key, have, set)
		}
	}
	return copies
}

// TestMonKillOSD: 4 OSD processes, 3 replicas, min_size 2, booted through a
// mon; a writer and readers run. One OSD is SIGKILLed and left down: its
// peers' refused connections mark it down at once, puts resume (degraded),
// and after the down-out interval every PG is active+clean again with 3
// copies on the 3 survivors, checked in their stores. Every acknowledged
// write reads back intact, and no read of one ever answers NoSuchKey.
func TestMonKillOSD(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	mc := startMonCluster(t, monClusterOptions{OSDs: 4, Mon: mon.Config{HeartbeatGrace: 3 * time.Second, DownOutInterval: 4 * time.Second,
		Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 3, MinSize: 2, PgCount: 16}}})
	ctx := ctxT(t, 3*time.Minute)
	cl := mc.healthyClient(ctx, time.Minute, "killtest")
	w := newWorkload(cl, "killtest")
	w.write(ctx)
	w.read(ctx, 1)
	w.waitFlowing(ctx, t, 20, time.Now().Add(-time.Second))
	idle := mc.client(t, time.Minute)
	victim := 1
	killed := time.Now()
	mc.kill(victim, syscall.SIGKILL)
	w.waitFlowing(ctx, t, 0, killed.Add(100*time.Millisecond))
	t.Logf("puts resumed %v after the SIGKILL", w.resumed(killed, 100*time.Millisecond).Round(time.Millisecond))
	st := mc.waitStatus(ctx, "the victim down", func(s *mon.Status) bool { return s.OSDs.Up == 3 })
	// A client that sent nothing since before the kill hears of the new
	// map from the mon within a second.
	down := mc.mon.Map().Epoch()
	for deadline := time.Now().Add(time.Second); idle.Map().Epoch() < down; {
		if time.Now().After(deadline) {
			t.Fatalf("an idle client is at epoch %d a second after the mon's %d", idle.Map().Epoch(), down)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	if st.Health.Status == "HEALTH_OK" {
		t.Errorf("HEALTH_OK with an OSD down: %+v", st.Health)
	}
	mc.waitStatus(ctx, "out, then every PG active+clean", func(s *mon.Status) bool {
		return s.OSDs.In == 3 && s.PGs["active+clean"] == s.PGTotal && s.Health.Status == "HEALTH_OK"
	})
	w.halt()
	w.verify(ctx, t)
	mc.verifyStores(ctx, w, []int{0, 2, 3})
}

// TestMonKillRestartOSD: as TestMonKillOSD, but the SIGKILLed OSD comes
// back before it is marked out. It was the primary of some PGs and died in
// the middle of their writes, which a primary sends to its replicas while
// it applies them itself: some members may have applied such a write and
// others not. The new primaries roll each forward (a member that has it
// is the authoritative log) or the returning OSD rolls its own back (a
// write only it applied, which the PG went on without): every write that
// failed ends on all members or on none, and every acknowledged one on
// all, checked in the stores once every PG is active+clean.
func TestMonKillRestartOSD(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	mc := startMonCluster(t, monClusterOptions{OSDs: 4, Mon: mon.Config{HeartbeatGrace: 3 * time.Second, DownOutInterval: time.Hour,
		Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 3, MinSize: 2, PgCount: 16}}})
	ctx := ctxT(t, 3*time.Minute)
	mc.healthyClient(ctx, time.Minute, "midwrite")
	// One attempt per put: a retry would finish what the SIGKILL cut
	// short, and the failed puts are what this test is about.
	w := newWorkload(mc.client(t, time.Nanosecond), "midwrite")
	// Several writers, so that writes are in flight at every PG's
	// primary when the SIGKILL lands.
	for range 4 {
		w.write(ctx)
	}
	w.waitFlowing(ctx, t, 40, time.Now().Add(-time.Second))
	victim := 2
	killed := time.Now()
	mc.kill(victim, syscall.SIGKILL)
	mc.waitStatus(ctx, "the victim down", func(s *mon.Status) bool { return s.OSDs.Up == 3 })
	w.waitFlowing(ctx, t, 0, killed.Add(100*time.Millisecond))
	w.waitFlowing(ctx, t, w.count()+40, killed) // writes go on without it a while
	mc.start(victim)
	mc.waitStatus(ctx, "the victim back, every PG active+clean", func(s *mon.Status) bool {
		return s.OSDs.Up == 4 && s.PGs["active+clean"] == s.PGTotal && s.Health.Status == "HEALTH_OK"
	})
	w.halt()
	w.mu.Lock()
	failed := len(w.failed)
	w.mu.Unlock()
	t.Logf("%d puts acknowledged, %d failed", w.count(), failed)
	mc.verifyStores(ctx, w, []int{0, 1, 2, 3})
}

// TestMonAddOSD: a fifth OSD boots into a loaded 4-OSD cluster while a
// writer and readers run. Placement makes it a member, and the primary of
// some, of PGs whose objects it does not have yet; their old acting sets
// serve on (pg_temp) while it is filled, and no read of an acknowledged
// object may answer NoSuchKey or wrong bytes meanwhile. The cluster ends
// active+clean with the up sets acting and the new OSD holding its share,
// checked in the stores.
func TestMonAddOSD(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	// Recovery throttled to 4 MiB/s per OSD, so that the backfill takes
	// seconds and the health must show it.
	mc := startMonCluster(t, monClusterOptions{OSDs: 4, RecoveryBytesPerSec: 4 << 20,
		Mon: mon.Config{HeartbeatGrace: 3 * time.Second, DownOutInterval: time.Minute,
			Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 3, MinSize: 2, PgCount: 16}}})
	ctx := ctxT(t, 3*time.Minute)
	cl := mc.healthyClient(ctx, time.Minute, "addtest")
	w := newWorkload(cl, "addtest")
	w.write(ctx)
	w.read(ctx, 1)
	w.read(ctx, 2)
	// Enough data that the newcomer's backfill overlaps the readers.
	w.waitFlowing(ctx, t, 150, time.Now().Add(-time.Second))
	// From now on writes go on at a pace the throttled backfill outruns
	// (about 1 MiB/s of new objects, a third of it for the newcomer).
	w.setPace(200 * time.Millisecond)
	before := mc.status(ctx).Epoch
	// The status's recovery rate, watched all along: the backfill may
	// come and go between the waits below on a busy machine.
	var peak atomic.Uint64 // math.Float64bits of bytes/s
	watched := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if s, err := mc.mon.Status(ctx); err == nil && s.RecoveryBytesPerSec > math.Float64frombits(peak.Load()) {
				peak.Store(math.Float64bits(s.RecoveryBytesPerSec))
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(50 * time.Millisecond): // polling the mon
			}
		}
	}()
	mc.start(4)
	added := mc.idOf(4)
	mc.waitStatus(ctx, "the fifth OSD up and in", func(s *mon.Status) bool { return s.OSDs.Up == 5 && s.OSDs.In == 5 })
	if mp := mc.mon.Map(); mp.Epoch() <= before {
		t.Fatalf("map epoch %d after the add, %d before", mp.Epoch(), before)
	}
	led := 0
	mp := mc.mon.Map()
	for _, role := range mp.PGsOf(1, added) {
		if role.IsPrimary() {
			led++
		}
	}
	t.Logf("osd.%d joined at epoch %d and leads %d PGs", added, mp.Epoch(), led)
	// The health shows the backfill (the new OSD holds nothing yet), and
	// writes go on meanwhile. The PGs moved onto it keep their old acting
	// sets (pg_temp) until it holds them: remapped, their copies to make
	// misplaced, none degraded.
	if n := len(mc.mon.Map().Proto().PgTemp); n == 0 {
		t.Error("the map that brought the OSD in kept no old acting set in pg_temp")
	}
	st := mc.waitStatus(ctx, "the backfill in the health", func(s *mon.Status) bool {
		backfilling := 0
		for state, n := range s.PGs {
			if strings.Contains(state, "backfilling") && strings.Contains(state, "remapped") {
				backfilling += n
			}
		}
		return backfilling > 0 && s.MisplacedObjects > 0 && s.DegradedObjects == 0 && s.Health.Status != "HEALTH_OK"
	})
	t.Logf("during the backfill: %s %q, %d objects misplaced, pgs %v", st.Health.Status, st.Health.Checks, st.MisplacedObjects, st.PGs)
	w.waitFlowing(ctx, t, 0, time.Now())
	mc.waitStatus(ctx, "every PG active+clean with five OSDs", func(s *mon.Status) bool {
		return s.OSDs.Up == 5 && s.PGs["active+clean"] == s.PGTotal && s.Health.Status == "HEALTH_OK" && s.DegradedObjects == 0 &&
			s.MisplacedObjects == 0
	})
	if tmp := mc.mon.Map().Proto().PgTemp; len(tmp) != 0 {
		t.Errorf("every PG clean, but the map keeps %d pg_temp entries: %v", len(tmp), tmp)
	}
	close(stopWatch)
	<-watched
	// The cluster's sum: each OSD's backfills are capped, a new
	// primary's catch-up is not (TestRecoveryThrottle checks the cap).
	peakRate := math.Float64frombits(peak.Load())
	t.Logf("recovery peaked at %.1f MiB/s in the status (each OSD's backfill capped at 4 MiB/s)", peakRate/(1<<20))
	if peakRate == 0 {
		t.Error("the status never showed recovery bytes/s")
	}
	w.halt()
	w.verify(ctx, t)
	mc.verifyStores(ctx, w, []int{0, 1, 2, 3, 4})
}

// TestMonBelowMinSize: 3 OSDs, 3 replicas, min_size 2. Two are SIGKILLed
// and stay down (not out): every PG is left with one member. Writes fail
// with a retriable error that names min_size, the health is an error,
// reads of the survivor go on, and once the two return every PG is
// active+clean again, writes succeed, and nothing acknowledged is lost.
func TestMonBelowMinSize(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	mc := startMonCluster(t, monClusterOptions{OSDs: 3, Mon: mon.Config{HeartbeatGrace: 3 * time.Second, DownOutInterval: 10 * time.Minute,
		Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 3, MinSize: 2, PgCount: 16}}})
	ctx := ctxT(t, 3*time.Minute)
	cl := mc.healthyClient(ctx, time.Minute, "minsize")
	w := newWorkload(cl, "minsize")
	w.write(ctx)
	w.waitFlowing(ctx, t, 30, time.Now().Add(-time.Second))
	w.halt()

	mc.kill(1, syscall.SIGKILL)
	mc.kill(2, syscall.SIGKILL)
	st := mc.waitStatus(ctx, "two OSDs down", func(s *mon.Status) bool { return s.OSDs.Up == 1 && s.OSDs.In == 3 })
	st = mc.waitStatus(ctx, "every PG below min_size", func(s *mon.Status) bool { return s.PGs["undersized+degraded+peered"] == s.PGTotal })
	if st.Health.Status != mon.HealthErr {
		t.Errorf("health %s with every PG below min_size: %q", st.Health.Status, st.Health.Checks)
	}
	t.Logf("two down: %s %q", st.Health.Status, st.Health.Checks)

	impatient := mc.client(t, 2*time.Second)
	_, err := osdtest.Put(ctx, impatient, "minsize", "refused", []byte("below min_size"), client.PutOptions{})
	var oe *ops.Error
	if !errors.As(err, &oe) || !oe.Retriable() || !strings.Contains(err.Error(), "min_size") {
		t.Fatalf("put below min_size: %v, want a retriable error naming min_size", err)
	}
	t.Logf("put below min_size: %v", err)
	w.mu.Lock()
	for key, want := range w.acked {
		got, _, err := osdtest.Get(ctx, impatient, "minsize", key, client.GetOptions{})
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read of %s from the survivor: %v", key, err)
		}
	}
	w.mu.Unlock()

	mc.start(1)
	mc.start(2)
	mc.waitStatus(ctx, "all back, every PG active+clean", func(s *mon.Status) bool {
		return s.OSDs.Up == 3 && s.PGs["active+clean"] == s.PGTotal && s.Health.Status == "HEALTH_OK"
	})
	if _, err := osdtest.Put(ctx, cl, "minsize", "after", []byte("back"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	w.verify(ctx, t)
	mc.verifyStores(ctx, w, []int{0, 1, 2})
}
