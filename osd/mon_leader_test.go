package osd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/freeport"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/encoding/protojson"
)

// monProcSpec is what a mon child process is told (OSPREY_TEST_MON=JSON).
// mon.Config itself does not travel: it holds a logger.
type monProcSpec struct {
	Etcd                            []string
	Name, Listen                    string
	HeartbeatGrace, DownOutInterval time.Duration
	MinDownReporters                int
	NoAuth                          bool
	// KeyringDir, with auth, is where the mon writes client.admin's and
	// client.bootstrap-osd's keyrings before it says READY.
	KeyringDir string
	// Pool is the first map's pool (protojson), and the Ratios its
	// nearfull, backfillfull and full ratios, for a mon that creates the
	// cluster.
	Pool   json.RawMessage
	Ratios [3]float64
}

// TestMonProcess is not a test: it is the body of the mon child processes
// the process tests start (this test binary, re-executed with
// OSPREY_TEST_MON set). It runs a mon on the given etcd, prints READY once
// mon.Start returned, and serves until SIGTERM (graceful: it resigns) or
// SIGKILL (its etcd session is left to expire).
func TestMonProcess(t *testing.T) {
	spec := os.Getenv("OSPREY_TEST_MON")
	if spec == "" {
		t.Skip("helper process for the mon process tests")
	}
	var sp monProcSpec
	if err := json.Unmarshal([]byte(spec), &sp); err != nil {
		fmt.Fprintf(os.Stderr, "bad spec %q: %v\n", spec, err)
		os.Exit(2)
	}
	cfg := mon.Config{Name: sp.Name, Listen: sp.Listen, Etcd: sp.Etcd, HeartbeatGrace: sp.HeartbeatGrace,
		DownOutInterval: sp.DownOutInterval, MinDownReporters: sp.MinDownReporters, NoAuth: sp.NoAuth,
		NearfullRatio: sp.Ratios[0], BackfillfullRatio: sp.Ratios[1], FullRatio: sp.Ratios[2],
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if len(sp.Pool) > 0 {
		cfg.Pool = &osdpb.Pool{}
		if err := protojson.Unmarshal(sp.Pool, cfg.Pool); err != nil {
			fmt.Fprintf(os.Stderr, "bad pool %s: %v\n", sp.Pool, err)
			os.Exit(2)
		}
	}
	ctx := context.Background()
	m, err := mon.Start(ctx, cfg)
	if err == nil && sp.KeyringDir != "" {
		_, err = m.WriteKeyrings(ctx, sp.KeyringDir)
	}
	serveUntilSignal(err, func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		m.Close(cctx)
	})
}

// startMonB runs mon "b" as a child process on the cluster's etcd, with
// cfg's settings, and waits until "status" through it names it the
// leader: it is alone in the election, so it wins it.
func (mc *monCluster) startMonB(ctx context.Context, cfg mon.Config) {
	t := mc.t
	t.Helper()
	port, err := freeport.Port("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	sp := monProcSpec{Etcd: cfg.Etcd, Name: "b", Listen: fmt.Sprintf("tcp://127.0.0.1:%d", port),
		HeartbeatGrace: cfg.HeartbeatGrace, DownOutInterval: cfg.DownOutInterval, MinDownReporters: cfg.MinDownReporters,
		NoAuth: cfg.NoAuth, Ratios: [3]float64{cfg.NearfullRatio, cfg.BackfillfullRatio, cfg.FullRatio}}
	if !cfg.NoAuth {
		sp.KeyringDir = mc.dir
	}
	if cfg.Pool != nil {
		if sp.Pool, err = protojson.Marshal(cfg.Pool); err != nil {
			t.Fatal(err)
		}
	}
	spec, _ := json.Marshal(sp)
	cmd := exec.Command(os.Args[0], "-test.run=^TestMonProcess$")
	cmd.Env = append(os.Environ(), "OSPREY_TEST_MON="+string(spec))
	mc.monProc = runChild(t, cmd, mc.monLogs["b"], &mc.mu, "mon.b")
	mc.monAddrs = []string{sp.Listen}
	if !cfg.NoAuth {
		mc.loadKeyrings()
	}
	deadline, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	mc.waitCLIStatus(deadline, mc.monAddrs, "mon.b leading", func(s *mon.Status) bool {
		return leaderOf(s) == "b"
	})
}

// stopMon sends sig to mon "b"'s process and waits for it to exit.
func (mc *monCluster) stopMon(sig syscall.Signal) {
	if mc.monProc != nil {
		stopChild(mc.monProc, sig)
		mc.monProc = nil
	}
}

// monCommand runs an admin command through the mons, failing the test on
// an error.
func (mc *monCluster) monCommand(ctx context.Context, cmd *osdpb.MonCommand) *osdpb.MonCommandReply {
	mc.t.Helper()
	c, err := monclient.New(ctx, monclient.Options{Addrs: mc.monAddrs, Timeout: 2 * time.Second, Keyring: mc.admin,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		mc.t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Command(ctx, cmd)
	if err != nil {
		mc.t.Fatalf("%s: %v", cmd.Prefix, err)
	}
	return rep
}

// cliStatus is `osprey status` against the mons at addrs, as client.admin:
// the "status" command through a mon client, which moves on from a mon
// that does not answer.
func (mc *monCluster) cliStatus(ctx context.Context, addrs []string) (*mon.Status, error) {
	c, err := monclient.New(ctx, monclient.Options{Addrs: addrs, Timeout: 2 * time.Second, Keyring: mc.admin,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rep, err := c.Command(ctx, &osdpb.MonCommand{Prefix: "status"})
	if err != nil {
		return nil, err
	}
	var st mon.Status
	if err := json.Unmarshal([]byte(rep.Output), &st); err != nil {
		return nil, fmt.Errorf("status output %q: %w", rep.Output, err)
	}
	return &st, nil
}

// waitCLIStatus polls cliStatus until ok holds, failing the test when ctx
// ends first.
func (mc *monCluster) waitCLIStatus(ctx context.Context, addrs []string, what string, ok func(*mon.Status) bool) *mon.Status {
	t := mc.t
	t.Helper()
	for {
		st, err := mc.cliStatus(ctx, addrs)
		if err == nil && ok(st) {
			return st
		}
		select {
		case <-ctx.Done():
			b, _ := json.Marshal(st)
			t.Fatalf("waiting for %s in `osprey status` via %v: %s (last error: %v)%s", what, addrs, b, err, osdtest.HostDiskNote(mc.dir))
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
}

// leaderOf is the name of the mon the status marks the leader; "" if none
// ("+" between them if several).
func leaderOf(s *mon.Status) string {
	var names []string
	for _, m := range s.Mons {
		if m.Leader {
			names = append(names, m.Name)
		}
	}
	return strings.Join(names, "+")
}

// monNames are the registered mons' names in the status.
func monNames(s *mon.Status) []string {
	var names []string
	for _, m := range s.Mons {
		names = append(names, m.Name)
	}
	return names
}

// longestPause is the longest time between from, the puts acknowledged
// from then to to, and to.
func longestPause(w *workload, from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest time.Duration
	last := from
	for _, at := range w.puts {
		if at.Before(from) || at.After(to) {
			continue
		}
		longest = max(longest, at.Sub(last))
		last = at
	}
	return max(longest, to.Sub(last))
}

// TestMonLeaderKilled: two mons on one etcd, the leader (mon.b) a child
// process, the standby (mon.a) in the test process; 3 OSD processes, 3
// replicas, min_size 2; a writer and a reader run. The leader is
// SIGKILLed: the standby leads once the dead leader's etcd session
// expires, and "status" shows it the leader and the dead mon gone. Map
// changes go on under the new leader: a SIGKILLed OSD is marked down,
// puts resume, and once it is restarted every PG is active+clean and the
// health HEALTH_OK again. Nothing acknowledged is lost, in the stores.
func TestMonLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	// A grace of 6 s, twice the 3 s the mons' etcd sessions take to hand
	// over the lead: with 3 s, one OSD's beacon reached the new leader
	// just past its grace under CI load, and it was marked down.
	mc := startMonCluster(t, monClusterOptions{Mons: 2, OSDs: 3, Mon: mon.Config{HeartbeatGrace: 6 * time.Second, DownOutInterval: 10 * time.Minute,
		Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 3, MinSize: 2, PgCount: 16}}})
	ctx := ctxT(t, 2*time.Minute)
	// by bounds a phase: it ends d after t0.
	by := func(t0 time.Time, d time.Duration) context.Context {
		c, cancel := context.WithDeadline(ctx, t0.Add(d))
		t.Cleanup(cancel)
		return c
	}
	mc.waitStatus(ctx, "3 OSDs up, HEALTH_OK, mon.b leading", func(s *mon.Status) bool {
		return s.OSDs.Up == 3 && s.Health.Status == mon.HealthOK && leaderOf(s) == "b" && slices.Equal(monNames(s), []string{"a", "b"})
	})
	if mc.mon.IsLeader() {
		t.Fatal("mon.a, started second, leads")
	}
	cl := mc.client(t, time.Minute)
	if err := cl.MakeBucket(ctx, "leadertest"); err != nil {
		t.Fatal(err)
	}
	w := newWorkload(cl, "leadertest")
	w.write(ctx)
	w.read(ctx, 1)
	w.waitFlowing(ctx, t, 20, time.Now().Add(-time.Second))
	idle := mc.client(t, time.Minute)
	before := mc.status(ctx)

	// The leader dies without resigning: its etcd session (TTL 3 s) holds
	// the election until it expires.
	killed := time.Now()
	mc.stopMon(syscall.SIGKILL)
	for deadline := killed.Add(15 * time.Second); !mc.mon.IsLeader(); {
		if time.Now().After(deadline) {
			t.Fatalf("mon.a is not leading %v after mon.b's SIGKILL", time.Since(killed).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	t.Logf("mon.a leads %v after the SIGKILL of mon.b", time.Since(killed).Round(time.Millisecond))
	// `osprey status` given both mons, the dead one first, answers
	// through mon.a, leading, and lists mon.b down with Ceph's MON_DOWN:
	// the cluster remembers its mons. An operator retiring mon.b for good
	// removes it (mon rm), and the warning goes.
	st := mc.waitCLIStatus(by(killed, 15*time.Second), []string{mc.monAddrs[1], mc.monAddrs[0]}, "mon.a leading, mon.b down", func(s *mon.Status) bool {
		return leaderOf(s) == "a" && slices.Equal(monNames(s), []string{"a", "b"}) && s.Mons[0].Up && !s.Mons[1].Up
	})
	if st.Mons[0].Addr != mc.mon.Addr() {
		t.Fatalf("status lists mon.a at %s, it serves at %s", st.Mons[0].Addr, mc.mon.Addr())
	}
	if !slices.ContainsFunc(st.Health.Checks, func(c string) bool { return strings.Contains(c, "1/2 mons down") }) {
		t.Errorf("no MON_DOWN with mon.b dead: %q", st.Health.Checks)
	}
	t.Logf("status after the failover: %s %q, mons %+v, epoch %d (%d before), %d/%d OSDs up",
		st.Health.Status, st.Health.Checks, st.Mons, st.Epoch, before.Epoch, st.OSDs.Up, st.OSDs.Total)
	mc.monCommand(by(killed, 15*time.Second), &osdpb.MonCommand{Prefix: "mon rm", Var: "b"})
	w.waitFlowing(by(killed, 20*time.Second), t, 0, killed.Add(100*time.Millisecond))
	t.Logf("puts resumed %v after the SIGKILL of mon.b", w.resumed(killed, 100*time.Millisecond).Round(time.Millisecond))
	st = mc.waitStatus(by(killed, 20*time.Second), "3 OSDs up and HEALTH_OK under mon.a", func(s *mon.Status) bool {
		return s.OSDs.Up == 3 && s.Health.Status == mon.HealthOK
	})
	// The failover itself marks no OSD down: a lease (HeartbeatGrace, 6 s
	// here) that ran out while no mon led, nobody renewing it, is granted
	// again by the new leader rather than taken as a dead OSD.
	for o := range mc.mon.Map().OSDs() {
		if o.UpFrom > before.Epoch {
			t.Errorf("osd.%d was marked down by the mon failover and booted again (up from epoch %d, %d before the failover)", o.Id, o.UpFrom, before.Epoch)
		}
	}
	t.Logf("under mon.a: 3 OSDs up, HEALTH_OK at epoch %d %v after the SIGKILL; longest pause in acknowledged puts since the SIGKILL: %v",
		st.Epoch, time.Since(killed).Round(time.Millisecond), longestPause(w, killed, time.Now()).Round(time.Millisecond))

	// Map changes go on under the new leader: an OSD killed is marked
	// down (its peers report it), and the clients hear of it.
	victim := 1
	id := mc.idOf(victim)
	epoch := mc.mon.Map().Epoch()
	osdKilled := time.Now()
	mc.kill(victim, syscall.SIGKILL)
	st = mc.waitStatus(by(osdKilled, 10*time.Second), "the victim down", func(s *mon.Status) bool { return s.OSDs.Up == 2 })
	if o, ok := mc.mon.Map().OSD(id); !ok || o.Up {
		t.Fatalf("osd.%d (the victim) is not the one down: %+v", id, o)
	}
	if st.Epoch <= epoch || !mc.mon.IsLeader() {
		t.Fatalf("the victim down at epoch %d (%d before), mon.a leads: %v", st.Epoch, epoch, mc.mon.IsLeader())
	}
	t.Logf("osd.%d marked down by mon.a %v after its SIGKILL, epoch %d", id, time.Since(osdKilled).Round(time.Millisecond), st.Epoch)
	down := mc.mon.Map().Epoch()
	for deadline := time.Now().Add(2 * time.Second); idle.Map().Epoch() < down; {
		if time.Now().After(deadline) {
			t.Fatalf("an idle client is at epoch %d two seconds after the mon's %d", idle.Map().Epoch(), down)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	w.waitFlowing(by(osdKilled, 10*time.Second), t, 0, osdKilled.Add(100*time.Millisecond))
	t.Logf("puts resumed %v after the SIGKILL of osd.%d", w.resumed(osdKilled, 100*time.Millisecond).Round(time.Millisecond), id)
	if st.Health.Status == mon.HealthOK {
		t.Errorf("HEALTH_OK with an OSD down: %+v", st.Health)
	}

	// It boots again through mon.a and catches up.
	restarted := time.Now()
	mc.start(victim)
	st = mc.waitStatus(by(restarted, 30*time.Second), "all back, every PG active+clean, HEALTH_OK", func(s *mon.Status) bool {
		return s.OSDs.Up == 3 && s.PGs["active+clean"] == s.PGTotal && s.Health.Status == mon.HealthOK
	})
	if leaderOf(st) != "a" || !slices.Equal(monNames(st), []string{"a"}) {
		t.Fatalf("mons at the end: %+v", st.Mons)
	}
	t.Logf("osd.%d back: every PG active+clean, %s at epoch %d", id, st.Health.Status, st.Epoch)
	w.halt()
	w.verify(ctx, t)
	mc.verifyStores(ctx, w, []int{0, 1, 2})
}
