package osd_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
)

// TestOSDProcess is not a test: it is the body of the OSD child processes
// the process tests start (this test binary, re-executed with
// OSPREY_TEST_OSD set). It serves until SIGTERM (graceful) or SIGKILL.
func TestOSDProcess(t *testing.T) {
	spec := os.Getenv("OSPREY_TEST_OSD")
	if spec == "" {
		t.Skip("helper process for the OSD process tests")
	}
	if rest, ok := strings.CutPrefix(spec, "mon:"); ok {
		monOSDProcess(rest)
		return
	}
	parts := strings.Split(spec, ",") // id,map path,data dir
	id, _ := strconv.Atoi(parts[0])
	m, err := placement.Load(parts[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := osd.Config{ID: uint32(id), Map: m, DataDir: parts[2], RepTimeout: 2 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatGrace: time.Second, Logger: log}
	cfg.Store.CacheSize, cfg.Store.MemTableSize = 16<<20, 8<<20
	ctx := context.Background()
	var o *osd.OSD
	for range 100 { // the previous incarnation's port may linger a moment
		if o, err = osd.Start(ctx, cfg); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // waiting for the port
	}
	serveChild(ctx, o, err)
}

// serveChild ends an OSD child process's body: it exits 2 if the OSD did
// not start, else prints READY and serves until SIGTERM or SIGINT.
func serveChild(ctx context.Context, o *osd.OSD, err error) {
	serveUntilSignal(err, func() { o.Close(ctx) })
}

// serveUntilSignal ends a child process's body (an OSD, a mon): it exits
// 2 if the daemon did not start (err), else prints READY, waits for
// SIGTERM or SIGINT, stops the daemon and exits 0.
func serveUntilSignal(err error, stop func()) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println("READY")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	stop()
	os.Exit(0)
}

// osdProc is one OSD child process.
type osdProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	logs *bytes.Buffer
}

type procCluster struct {
	t     *testing.T
	m     *placement.Map
	path  string
	dir   string
	mu    sync.Mutex
	procs map[uint32]*osdProc
	logs  map[uint32]*bytes.Buffer
}

func startProcCluster(t *testing.T, opts osdtest.Options) *procCluster {
	pc := &procCluster{t: t, m: osdtest.NewMap(t, opts), dir: t.TempDir(), procs: map[uint32]*osdProc{}, logs: map[uint32]*bytes.Buffer{}}
	pc.path = filepath.Join(pc.dir, "map.json")
	if err := pc.m.Save(pc.path); err != nil {
		t.Fatal(err)
	}
	for info := range pc.m.OSDs() {
		pc.start(info.Id)
	}
	t.Cleanup(func() {
		for id := range pc.procs {
			pc.kill(id, syscall.SIGKILL)
		}
		if t.Failed() {
			for id, b := range pc.logs {
				t.Logf("osd.%d log (tail):\n%s", id, tail(b.String(), 3000))
			}
		}
	})
	return pc
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func (pc *procCluster) dataDir(id uint32) string {
	return filepath.Join(pc.dir, fmt.Sprintf("osd.%d", id))
}

// start runs OSD id and waits until it serves.
func (pc *procCluster) start(id uint32) {
	pc.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOSDProcess$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("OSPREY_TEST_OSD=%d,%s,%s", id, pc.path, pc.dataDir(id)))
	pc.mu.Lock()
	logs := pc.logs[id]
	if logs == nil {
		logs = &bytes.Buffer{}
		pc.logs[id] = logs
	}
	pc.mu.Unlock()
	pc.procs[id] = runChild(pc.t, cmd, logs, &pc.mu, fmt.Sprintf("osd.%d", id))
}

// runChild starts cmd, its stderr into logs, and waits until it prints
// READY.
func runChild(t *testing.T, cmd *exec.Cmd, logs *bytes.Buffer, mu *sync.Mutex, name string) *osdProc {
	t.Helper()
	cmd.Stderr = &lockedWriter{w: logs, mu: mu}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &osdProc{cmd: cmd, done: make(chan struct{}), logs: logs}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if sc.Text() == "READY" && !ok {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
		cmd.Wait()
		close(p.done)
	}()
	select {
	case ok := <-ready:
		if !ok {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%s exited before serving:\n%s", name, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not serving after 30s", name)
	}
	return p
}

// kill sends sig to OSD id and waits for it to exit.
func (pc *procCluster) kill(id uint32, sig syscall.Signal) {
	if p := pc.procs[id]; p != nil {
		stopChild(p, sig)
		delete(pc.procs, id)
	}
}

// stopChild sends sig to p and waits for it to exit (SIGKILL after 20 s).
func stopChild(p *osdProc, sig syscall.Signal) {
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// content is generation gen of key: its size and bytes follow from both.
func content(key string, gen int) []byte {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", key, gen)
	s := h.Sum64()
	n := []int{1, 100, 4 << 10, 70 << 10, 1 << 20}[s%5]
	return osdtest.Payload(n, s)
}

// keyState is what a writer knows of one key: the last generation the
// cluster acknowledged, and every generation it tried since (an op that
// failed may still have been applied).
type keyState struct {
	acked int // -1: none
	tried []int
}

// TestClusterProcessesSurviveKills runs three OSDs as separate processes,
// three replicas, and concurrent writers; it SIGKILLs a replica and later
// a primary while the writes run, restarts each, and then checks that every
// acknowledged write reads back with the right bytes and that every
// replica of every object holds the same bytes as its primary.
func TestClusterProcessesSurviveKills(t *testing.T) { survivesKills(t, "tcp") }

func survivesKills(t *testing.T, clusterNet string) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	pc := startProcCluster(t, osdtest.Options{OSDs: 3, PGs: 16, Cluster: clusterNet})
	seeds := []string{}
	for info := range pc.m.OSDs() {
		seeds = append(seeds, info.PublicAddr)
	}
	ctx := ctxT(t, 3*time.Minute)
	cl, err := client.New(ctx, client.Options{Seeds: seeds, RetryFor: 3 * time.Second, OpTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}

	const writers, keysPer = 4, 12
	states := make([]map[string]*keyState, writers)
	var stop atomic.Bool
	var acked, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		states[w] = map[string]*keyState{}
		wg.Go(func() {
			gen := 0
			for !stop.Load() {
				key := fmt.Sprintf("w%d/k%02d", w, gen%keysPer)
				st := states[w][key]
				if st == nil {
					st = &keyState{acked: -1}
					states[w][key] = st
				}
				st.tried = append(st.tried, gen)
				if _, err := osdtest.Put(ctx, cl, "bkt", key, content(key, gen), client.PutOptions{}); err == nil {
					st.acked, st.tried = gen, st.tried[:0]
					acked.Add(1)
				} else {
					failed.Add(1)
				}
				gen++
			}
		})
	}
	waitAcks := func(n int64) {
		t.Helper()
		target := acked.Load() + n
		deadline := time.Now().Add(60 * time.Second)
		for acked.Load() < target {
			if time.Now().After(deadline) {
				t.Fatalf("writes stalled: %d acked, %d failed", acked.Load(), failed.Load())
			}
			time.Sleep(10 * time.Millisecond) // polling the writers' progress
		}
	}
	waitAcks(100)
	// Which OSD is primary of which PG does not matter with 3 OSDs and 3
	// replicas: each is primary of some PGs and replica of the others.
	t.Log("SIGKILL osd.2")
	pc.kill(2, syscall.SIGKILL)
	time.Sleep(1500 * time.Millisecond) // writes run against the hole for a while
	pc.start(2)
	waitAcks(100)
	t.Log("SIGKILL osd.0")
	pc.kill(0, syscall.SIGKILL)
	time.Sleep(1500 * time.Millisecond) // again
	pc.start(0)
	waitAcks(100)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d writes acknowledged, %d failed", acked.Load(), failed.Load())

	// A write to every PG succeeds only once each replica has caught up
	// (a replica applies nothing past a gap before it recovered).
	pool, _ := pc.m.PoolByName(placement.DefaultPoolName)
	covered := map[uint32]bool{}
	for i := 0; len(covered) < int(pool.PgCount); i++ {
		key := fmt.Sprintf("marker-%d", i)
		if pg := placement.PGOf(pool, "bkt", key); !covered[pg] {
			covered[pg] = true
			if _, err := osdtest.Put(ctx, cl, "bkt", key, []byte("m"), client.PutOptions{}); err != nil {
				t.Fatalf("marker write to pg %d: %v", pg, err)
			}
		}
	}

	// Every acknowledged write reads back (or a later attempt of it).
	check := func(key string, st *keyState, got []byte) error {
		for _, g := range append([]int{st.acked}, st.tried...) {
			if g >= 0 && bytes.Equal(got, content(key, g)) {
				return nil
			}
		}
		return fmt.Errorf("%s: %d bytes match neither the acked generation %d nor the tried %v", key, len(got), st.acked, st.tried)
	}
	for _, m := range states {
		for key, st := range m {
			got, _, err := osdtest.Get(ctx, cl, "bkt", key, client.GetOptions{})
			if st.acked < 0 && err != nil {
				continue
			}
			if err != nil {
				t.Fatalf("get %s: %v", key, err)
			}
			if err := check(key, st, got); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Stop everything and compare the replicas' stores directly.
	for id := range pc.m.OSDs() {
		pc.kill(id.Id, syscall.SIGTERM)
	}
	stores := map[uint32]*store.Store{}
	for info := range pc.m.OSDs() {
		s, err := store.Open(ctx, store.Options{Dir: filepath.Join(pc.dataDir(info.Id), "store"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[info.Id] = s
	}
	for _, m := range states {
		for key, st := range m {
			pg := placement.PGOf(pool, "bkt", key)
			var first []byte
			for i, id := range pc.m.ActingSet(pool.Id, pg) {
				_, got, err := stores[id].ReadRange(ctx, "bkt", key, 0, -1, nil)
				if err != nil {
					if st.acked < 0 {
						continue
					}
					t.Fatalf("osd.%d: %s: %v", id, key, err)
				}
				if err := check(key, st, got); err != nil {
					t.Fatalf("osd.%d: %v", id, err)
				}
				if i == 0 {
					first = got
				} else if !bytes.Equal(got, first) {
					t.Fatalf("osd.%d: %s differs from the primary's copy", id, key)
				}
			}
		}
	}
}
