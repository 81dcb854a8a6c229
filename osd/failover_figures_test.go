package osd_test

import (
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestMonFailoverFigures measures how long writes stall when an OSD dies
// (SIGKILL) or hangs (SIGSTOP), at the default settings (mon grace 20 s,
// OSD heartbeats every 500 ms) and with a short grace; docs/osd.md quotes
// its output. It takes minutes, so it runs only when asked:
//
//	OSPREY_FAILOVER_FIGURES=1 go test ./osd -run TestMonFailoverFigures -v -timeout 30m
//
// OSPREY_FAILOVER_KILLS (default 10) and OSPREY_FAILOVER_STOPS (default 3)
// set the number of rounds. The goals are the issue's: writes flow again
// within 3 s of a SIGKILL, and within grace + 5 s of a SIGSTOP.
func TestMonFailoverFigures(t *testing.T) {
	if os.Getenv("OSPREY_FAILOVER_FIGURES") == "" {
		t.Skip("minutes long: set OSPREY_FAILOVER_FIGURES=1")
	}
	kills, stops := envInt("OSPREY_FAILOVER_KILLS", 10), envInt("OSPREY_FAILOVER_STOPS", 3)
	t.Run("sigkill/default", func(t *testing.T) { failover(t, mon.Config{}, syscall.SIGKILL, kills, 3*time.Second) })
	t.Run("sigstop/default-grace-20s", func(t *testing.T) {
		failover(t, mon.Config{}, syscall.SIGSTOP, stops, 25*time.Second)
	})
	t.Run("sigstop/grace-6s", func(t *testing.T) {
		failover(t, mon.Config{HeartbeatGrace: 6 * time.Second}, syscall.SIGSTOP, stops, 11*time.Second)
	})
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// failover runs rounds of: writes flowing, sig to one OSD (a different one
// each round), time until a put is acknowledged again, then the OSD back
// (restarted, or SIGCONT) and the cluster HEALTH_OK again.
func failover(t *testing.T, cfg mon.Config, sig syscall.Signal, rounds int, goal time.Duration) {
	cfg.Pool = &osdpb.Pool{Id: 1, Name: "default", Size: 3, MinSize: 2, PgCount: 32}
	mc := startMonCluster(t, monClusterOptions{OSDs: 4, Mon: cfg, Defaults: true})
	ctx := ctxT(t, time.Duration(rounds)*2*time.Minute)
	healthy := func(s *mon.Status) bool {
		return s.OSDs.Up == 4 && s.PGs["active+clean"] == s.PGTotal && s.Health.Status == mon.HealthOK
	}
	mc.waitStatus(ctx, "HEALTH_OK", healthy)
	cl := mc.client(t, 5*time.Minute)
	if err := cl.MakeBucket(ctx, "failover"); err != nil {
		t.Fatal(err)
	}
	w := newWorkload(cl, "failover")
	w.size = func(key string) []byte { return content(key, 0)[:min(4096, len(content(key, 0)))] }
	w.write(ctx)
	var stalls []time.Duration
	for round := range rounds {
		victim := round % 4
		w.waitFlowing(ctx, t, 20, time.Now().Add(-time.Second))
		// Only the puts to PGs the victim served measure the stall: the
		// others never waited for it.
		id, mp := mc.idOf(victim), mc.mon.Map()
		pool, _ := mp.Pool(1)
		served := func(key string) bool {
			return slices.Contains(mp.ActingSet(pool.Id, placement.PGOf(pool, w.bucket, key)), id)
		}
		at := time.Now()
		p := mc.procs[victim]
		p.cmd.Process.Signal(sig)
		d := time.Duration(-1)
		for d < 0 {
			time.Sleep(20 * time.Millisecond) // polling interval: the writer's progress
			if ctx.Err() != nil {
				t.Fatalf("round %d: no put to osd.%d's PGs acknowledged after the %v", round, id, sig)
			}
			d = w.resumedFor(at, 100*time.Millisecond, served)
		}
		stalls = append(stalls, d)
		t.Logf("round %d: %v to osd.%d; puts to its PGs flowed again after %v", round, sig, id, d.Round(time.Millisecond))
		if sig == syscall.SIGSTOP {
			p.cmd.Process.Signal(syscall.SIGCONT)
		} else {
			<-p.done
			delete(mc.procs, victim)
			mc.start(victim)
		}
		mc.waitStatus(ctx, "HEALTH_OK again", healthy)
	}
	w.halt()
	w.verify(ctx, t)
	slices.Sort(stalls)
	p50, worst := stalls[len(stalls)/2], stalls[len(stalls)-1]
	t.Logf("%v, %d rounds: writes flowing again after p50 %v, max %v (goal %v)", sig, rounds, p50.Round(time.Millisecond), worst.Round(time.Millisecond), goal)
	if worst > goal {
		t.Errorf("max %v over the goal %v", worst, goal)
	}
}
