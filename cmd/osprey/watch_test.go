package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestMapChanges: each kind of map change is one line, in the words of
// Ceph's cluster log.
func TestMapChanges(t *testing.T) {
	pb := &osdpb.ClusterMap{Epoch: 5, Fsid: "f", Pools: []*osdpb.Pool{{Id: 1, Name: "default", Size: 3, PgCount: 8}}}
	for i := range 4 {
		pb.Osds = append(pb.Osds, &osdpb.OSDInfo{Id: uint32(i), PublicAddr: "tcp://127.0.0.1:6800", ClusterAddr: "tcp://127.0.0.1:6801",
			Weight: 1, Up: i != 3, In: true, UpFrom: 2})
	}
	prev, err := placement.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	next, err := prev.With(func(pb *osdpb.ClusterMap) {
		pb.Epoch = 6
		pb.Osds[0].Up = false                           // down
		pb.Osds[1].In, pb.Osds[1].AutoOut = false, true // out by the mon
		pb.Osds[2].Weight = 2
		pb.Osds[2].Fullness = osdpb.Fullness_FULLNESS_NEARFULL
		pb.Osds[3].Up, pb.Osds[3].UpFrom, pb.Osds[3].Born = true, 6, 6 // boot, on a new store
		pb.Osds = append(pb.Osds, &osdpb.OSDInfo{Id: 4, PublicAddr: "mem://osd-not-booted", ClusterAddr: "mem://osd-not-booted", Weight: 1})
		pb.Pools[0].Size, pb.Pools[0].MinSize = 2, 1
		pb.NearfullRatio = 0.8
		pb.Flags = []string{"noout"}
	})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(mapChanges(prev, next), "\n")
	want := strings.Join([]string{
		"osd.0 marked down",
		"osd.1 marked out (down for longer than the down-out interval)",
		"osd.2 weight 1 -> 2",
		"osd.2 disk nearfull (was ok)",
		"osd.3 boot on a new store (tcp://127.0.0.1:6800): what only its old store held is gone",
		"osd.4 created",
		"pool 'default' size 3 -> 2",
		"pool 'default' min_size 2 -> 1",
		"noout flag set",
		"nearfull_ratio 0.85 -> 0.8",
	}, "\n")
	if got != want {
		t.Errorf("changes:\n%s\nwant:\n%s", got, want)
	}
	back := mapChanges(next, prev)
	for _, w := range []string{"osd.0 boot (tcp://127.0.0.1:6800)", "osd.1 marked in", "osd.3 marked down", "osd.4 removed", "noout flag unset"} {
		if !strings.Contains(strings.Join(back, "\n"), w) {
			t.Errorf("back: no %q in %q", w, back)
		}
	}
	if c := mapChanges(prev, prev); len(c) != 0 {
		t.Errorf("no change: %q", c)
	}
}

// lockedBuffer is a bytes.Buffer a command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStatusWatch: status --watch prints the status, then a map change
// at once and the health it leads to, until its context ends.
func TestStatusWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	_, monArgs := monCluster(t, 3, 3)
	cli := mustCLI(t, monArgs)
	ctx, cancel := context.WithCancel(t.Context())
	var out lockedBuffer
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"status", "--watch", "--watch-interval", "100ms"}, monArgs...))
		done <- cmd.ExecuteContext(ctx)
	}()
	// waitFor waits for what, a regular expression, in the output
	// written after from bytes.
	waitFor := func(from int, what string) {
		t.Helper()
		re := regexp.MustCompile(what)
		deadline := time.Now().Add(20 * time.Second)
		for !re.MatchString(out.String()[from:]) {
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("status --watch never printed %q:\n%s", what, out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor(0, "  services:")
	waitFor(0, "health:? HEALTH_OK") // the new cluster's PGs all reported, in the status or a line since
	at := len(out.String())
	cli("osd", "out", "2")
	waitFor(at, ": osd.2 marked out")
	// Nothing can replace it (3 OSDs, size 3): it stays acting, remapped.
	waitFor(at, `pgs: 8 active\+clean\+remapped;`)
	at = len(out.String())
	cli("osd", "in", "2")
	waitFor(at, ": osd.2 marked in")
	waitFor(at, `pgs: 8 active\+clean;`)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("status --watch ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("status --watch did not end with its context")
	}
	if _, _, err := run(t, "status", "--watch", "--json", "--mon", "tcp://127.0.0.1:1"); exitCode(err) != exitUsage {
		t.Errorf("--watch --json: %v, want a usage error", err)
	}
}

// TestStatusChanges: a poll prints health and PG lines only when they
// changed.
func TestStatusChanges(t *testing.T) {
	a := &mon.Status{Health: mon.Health{Status: mon.HealthOK}, PGs: map[string]int{"active+clean": 8}}
	if c := statusChanges(a, a); len(c) != 0 {
		t.Errorf("unchanged: %q", c)
	}
	b := &mon.Status{Health: mon.Health{Status: mon.HealthWarn, Checks: []string{"1 osds down"}},
		PGs: map[string]int{"active+clean": 5, "active+undersized+degraded": 3}, Objects: 7, DegradedObjects: 2}
	got := strings.Join(statusChanges(a, b), "\n")
	want := "health HEALTH_WARN: 1 osds down\npgs: 5 active+clean, 3 active+undersized+degraded; 7 objects, 2 degraded, 0 misplaced"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// The mons: one down and the leader moved, then back up; then none
	// leads, then one does.
	mons := func(up string, leader string) *mon.Status {
		s := &mon.Status{Health: a.Health, PGs: a.PGs}
		for _, n := range []string{"a", "b", "c"} {
			s.Mons = append(s.Mons, mon.MonStatus{Name: n, Addr: "tcp://h" + n + ":3300", Up: strings.Contains(up, n), Leader: n == leader})
		}
		return s
	}
	for _, c := range []struct {
		last, now *mon.Status
		want      string
	}{
		{mons("abc", "b"), mons("abc", "b"), ""},
		{mons("abc", "b"), mons("ac", "c"), "mon.b down\nmon.c leads (was mon.b)"},
		{mons("ac", "c"), mons("abc", "c"), "mon.b up (tcp://hb:3300)"},
		{mons("abc", "c"), mons("abc", ""), "no mon leads (mon.c did): an election is under way"},
		{mons("abc", ""), mons("abc", "a"), "mon.a leads"},
	} {
		if got := strings.Join(statusChanges(c.last, c.now), "\n"); got != c.want {
			t.Errorf("mons from %+v to %+v: got\n%s\nwant\n%s", c.last.Mons, c.now.Mons, got, c.want)
		}
	}
}
