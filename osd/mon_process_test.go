package osd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/local"
	"github.com/ospreystore/osprey/osd/osdtest"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// monOSDProcess is the body of an OSD child that boots through a mon:
// spec is "MONADDR,DATADIR,PUBLIC,CLUSTER".
func monOSDProcess(spec string) {
	parts := strings.Split(spec, ",")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := osd.Config{Mon: []string{parts[0]}, DataDir: parts[1], PublicListen: parts[2], ClusterListen: parts[3],
		RepTimeout: 10 * time.Second, HeartbeatInterval: 200 * time.Millisecond, HeartbeatGrace: 2 * time.Second,
		BeaconInterval: 500 * time.Millisecond, Logger: log}
	cfg.Store.CacheSize, cfg.Store.MemTableSize = 16<<20, 8<<20
	ctx := context.Background()
	o, err := osd.Start(ctx, cfg)
	serveChild(ctx, o, err)
}

// monCluster is a mon (on an embedded etcd) in the test process and OSD
// child processes that boot through it.
type monCluster struct {
	t     *testing.T
	etcd  *mon.Etcd
	mon   *mon.Mon
	dir   string
	mu    sync.Mutex
	procs map[int]*osdProc
	logs  map[int]*bytes.Buffer
}

func startMonCluster(t *testing.T, osds int, cfg mon.Config) *monCluster {
	ctx := ctxT(t, time.Minute)
	mc := &monCluster{t: t, dir: t.TempDir(), procs: map[int]*osdProc{}, logs: map[int]*bytes.Buffer{}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var err error
	if mc.etcd, err = mon.StartEtcd(ctx, filepath.Join(mc.dir, "etcd"), quiet); err != nil {
		t.Fatal(err)
	}
	cfg.Etcd, cfg.Listen, cfg.Logger = mc.etcd.Endpoints(), "tcp://127.0.0.1:0", quiet
	if mc.mon, err = mon.Start(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := range mc.procs {
			mc.kill(i, syscall.SIGKILL)
		}
		mc.mon.Close(context.Background())
		mc.etcd.Close()
		if t.Failed() {
			for i, b := range mc.logs {
				t.Logf("osd process %d log (tail):\n%s", i, tail(b.String(), 4000))
			}
		}
	})
	for i := range osds {
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
	if _, err := os.Stat(data); err != nil {
		p1, _ := local.FreePort("127.0.0.1")
		p2, _ := local.FreePort("127.0.0.1")
		pub, clu = fmt.Sprintf("tcp://127.0.0.1:%d", p1), fmt.Sprintf("tcp://127.0.0.1:%d", p2)
	} else {
		pub, clu = "", "" // the map's
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOSDProcess$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("OSPREY_TEST_OSD=mon:%s,%s,%s,%s", mc.mon.Addr(), data, pub, clu))
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

// status is the mon's "status".
func (mc *monCluster) status(ctx context.Context) *mon.Status {
	st, err := mc.mon.Status(ctx)
	if err != nil {
		mc.t.Fatal(err)
	}
	return st
}

// waitStatus polls the mon's status until ok holds.
func (mc *monCluster) waitStatus(ctx context.Context, what string, ok func(*mon.Status) bool) *mon.Status {
	mc.t.Helper()
	for {
		st := mc.status(ctx)
		if ok(st) {
			return st
		}
		select {
		case <-ctx.Done():
			b, _ := json.Marshal(st)
			mc.t.Fatalf("waiting for %s: %s", what, b)
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
}

func (mc *monCluster) client(t *testing.T) *client.Client {
	var seeds []string
	for info := range mc.mon.Map().OSDs() {
		if info.Up {
			seeds = append(seeds, info.PublicAddr)
		}
	}
	cl, err := client.New(context.Background(), client.Options{Seeds: seeds, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryFor: 60 * time.Second, OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestMonKillOSD: 4 OSD processes, 3 replicas, min_size 2, booted through a
// mon; a writer runs. One OSD is SIGKILLed and left down: its peers' refused
// connections mark it down at once, puts resume (degraded), and after the
// down-out interval every PG is active+clean again on the 3 survivors.
// Every acknowledged write reads back intact.
func TestMonKillOSD(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	mc := startMonCluster(t, 4, mon.Config{HeartbeatGrace: 3 * time.Second, DownOutInterval: 4 * time.Second,
		Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 3, MinSize: 2, PgCount: 16}})
	ctx := ctxT(t, 3*time.Minute)
	mc.waitStatus(ctx, "4 OSDs up, HEALTH_OK", func(s *mon.Status) bool { return s.OSDs.Up == 4 && s.Health.Status == "HEALTH_OK" })
	cl := mc.client(t)
	if err := cl.MakeBucket(ctx, "killtest"); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		acked = map[string][]byte{}
		puts  []time.Time // when each put was acknowledged
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("k%05d", n)
			body := content(key, 0)
			if _, err := osdtest.Put(ctx, cl, "killtest", key, body, client.PutOptions{}); err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			mu.Lock()
			acked[key] = body
			puts = append(puts, time.Now())
			mu.Unlock()
		}
	})
	ackedSince := func(t0 time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		return len(puts) > 0 && puts[len(puts)-1].After(t0)
	}
	enough := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 20
	}
	for !ackedSince(time.Now().Add(-time.Second)) || !enough() {
		time.Sleep(50 * time.Millisecond) // polling interval: the writer's progress
		if ctx.Err() != nil {
			t.Fatal("the writer made no progress")
		}
	}
	victim := 1
	killed := time.Now()
	mc.kill(victim, syscall.SIGKILL)
	for !ackedSince(killed.Add(100 * time.Millisecond)) {
		time.Sleep(10 * time.Millisecond) // polling interval: the writer's progress
		if ctx.Err() != nil {
			t.Fatal("puts never resumed after the kill")
		}
	}
	// The first put acknowledged after the kill (one in flight at the
	// kill may have finished just after it).
	mu.Lock()
	var resumed time.Duration
	for _, at := range puts {
		if at.After(killed.Add(100 * time.Millisecond)) {
			resumed = at.Sub(killed)
			break
		}
	}
	mu.Unlock()
	t.Logf("puts resumed %v after the SIGKILL", resumed.Round(time.Millisecond))
	st := mc.waitStatus(ctx, "the victim down", func(s *mon.Status) bool { return s.OSDs.Up == 3 })
	if st.Health.Status == "HEALTH_OK" {
		t.Errorf("HEALTH_OK with an OSD down: %+v", st.Health)
	}
	mc.waitStatus(ctx, "out, then every PG active+clean", func(s *mon.Status) bool {
		return s.OSDs.In == 3 && s.PGs["active+clean"] == s.PGTotal && s.Health.Status == "HEALTH_OK"
	})
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for key, want := range acked {
		got, _, err := osdtest.Get(ctx, cl, "killtest", key, client.GetOptions{})
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("acknowledged %s lost: %v (%d bytes, want %d)", key, err, len(got), len(want))
		}
	}
	t.Logf("%d acknowledged writes, all read back", len(acked))
}
