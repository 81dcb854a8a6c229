package osd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/smallfs"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestCloseDuringMapPushes: OSDs close, one after another, while the mon
// pushes them a new map as fast as it can make one. A closed OSD's map
// stays where it was, and, run with the race detector (as CI runs it),
// no map arriving meanwhile touches what Close tears down: CI's
// TestDaemonMetrics once saw a pushed map adopted after Close had waited
// for the OSD's goroutines, which started another (sync.WaitGroup's Add
// racing with its Wait). On a tmpfs, where etcd has no fsync to wait
// for, pushes come faster: with the mon client closed last, about 6 runs
// in 10 were flagged there, 2 in 10 on a disk.
func TestCloseDuringMapPushes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster with a mon")
	}
	ctx := t.Context()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc := osdtest.StartLocal(t, local.Options{OSDs: 5, PGs: 16, Dir: smallfs.TryMount(t, 1<<30), Logger: logger, WithMon: true, NoAuth: true,
		NearfullRatio: osdtest.IgnoreHostDisk, BackfillfullRatio: osdtest.IgnoreHostDisk, FullRatio: osdtest.IgnoreHostDisk,
		FailsafeFullRatio: osdtest.IgnoreHostDisk})
	mc, err := monclient.New(ctx, monclient.Options{Addrs: []string{lc.Mon.Addr()}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()

	// Each command is a new epoch, pushed to every OSD; the ratio only
	// moves a health threshold, so the OSDs have nothing else to do.
	churnCtx, stopChurn := context.WithCancel(ctx)
	var churn sync.WaitGroup
	defer func() { stopChurn(); churn.Wait() }()
	churn.Go(func() {
		for i := 0; churnCtx.Err() == nil; i++ {
			ratio := 0.98 + 0.01*float64(i%2)
			if _, err := mc.Command(churnCtx, &osdpb.MonCommand{Prefix: "osd set-nearfull-ratio", Ratio: ratio}); err != nil && churnCtx.Err() == nil {
				t.Errorf("osd set-nearfull-ratio %v: %v", ratio, err)
				return
			}
		}
	})

	for _, o := range lc.OSDs {
		// The pushes reach this OSD before it closes.
		start := lc.Mon.Map().Epoch()
		osdtest.Eventually(t, 10*time.Second, fmt.Sprintf("osd.%d to adopt a map past epoch %d", o.ID(), start+2), func() bool {
			return o.Map().Epoch() > start+2
		})
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := o.Close(cctx)
		cancel()
		if err != nil {
			t.Fatalf("osd.%d: close: %v", o.ID(), err)
		}
		// The mon goes on; the closed OSD's map stays where it was.
		closed := o.Map().Epoch()
		osdtest.Eventually(t, 10*time.Second, fmt.Sprintf("the mon's map to pass epoch %d", closed+2), func() bool {
			return lc.Mon.Map().Epoch() > closed+2
		})
		if e := o.Map().Epoch(); e != closed {
			t.Errorf("osd.%d adopted epoch %d after Close returned at epoch %d", o.ID(), e, closed)
		}
	}
}

// TestCloseMarksDown: an OSD that closes cleanly asks the mon to mark it
// down, and the mon does at once, though its heartbeat grace is a minute.
// The OSD is alone, so no peer finds its connections refused and reports
// it: only its own request can explain its going down within seconds.
// With no mon to answer, the request holds Close up for about a second,
// not for Close's whole deadline.
func TestCloseMarksDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster with a mon")
	}
	ctx := t.Context()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	const grace = time.Minute
	lc := osdtest.StartLocal(t, local.Options{OSDs: 1, Replicas: 1, PGs: 8, Dir: t.TempDir(), Logger: logger, WithMon: true,
		HeartbeatGrace: grace, DownOutInterval: time.Hour,
		NearfullRatio: osdtest.IgnoreHostDisk, BackfillfullRatio: osdtest.IgnoreHostDisk, FullRatio: osdtest.IgnoreHostDisk,
		FailsafeFullRatio: osdtest.IgnoreHostDisk})
	o := lc.OSDs[0]
	upEpoch := lc.Mon.Map().Epoch()
	if info, ok := lc.Mon.Map().OSD(o.ID()); !ok || !info.Up {
		t.Fatalf("osd.%d is not up at epoch %d", o.ID(), upEpoch)
	}

	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := o.Close(cctx)
	cancel()
	if err != nil {
		t.Fatalf("close: %v", err)
	}
	osdtest.Eventually(t, 10*time.Second, fmt.Sprintf("the mon to mark osd.%d down (its grace is %v)", o.ID(), grace), func() bool {
		info, _ := lc.Mon.Map().OSD(o.ID())
		return !info.Up
	})
	downEpoch := lc.Mon.Map().Epoch()
	t.Logf("osd.%d down %v after Close began, at epoch %d (it was up at %d)", o.ID(), time.Since(start).Round(time.Millisecond),
		downEpoch, upEpoch)
	if downEpoch <= upEpoch {
		t.Fatalf("osd.%d marked down without a new epoch: %d", o.ID(), downEpoch)
	}

	// Back up, then stopped with the mon gone. The restart's boot is the
	// one map change in between: a boot of the closing OSD's, sent as
	// the map that had it down arrived, would have made another.
	if err := lc.RestartOSD(ctx, 0); err != nil {
		t.Fatal(err)
	}
	o = lc.OSDs[0]
	if info, _ := o.Map().OSD(o.ID()); !info.Up {
		t.Fatalf("osd.%d is not up after its restart", o.ID())
	}
	if e := lc.Mon.Map().Epoch(); e != downEpoch+1 {
		t.Fatalf("the mon's map is at epoch %d after the restart's boot, want %d: osd.%d booted again while it closed", e, downEpoch+1, o.ID())
	}
	if err := lc.Mon.Close(ctx); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	cctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	err = o.Close(cctx)
	cancel()
	took := time.Since(start)
	t.Logf("Close with no mon took %v", took.Round(time.Millisecond))
	if err != nil {
		t.Fatalf("close with no mon: %v", err)
	}
	if took > 5*time.Second {
		t.Fatalf("Close with no mon took %v: the mark-me-down should give up after about a second", took)
	}
}
