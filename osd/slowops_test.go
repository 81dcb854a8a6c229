package osd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/osd"
)

// TestSlowOpsInStatus: what holds the cluster back while every OSD is up
// shows in the status as Ceph's SLOW_OPS, naming the OSD to look at:
//   - a client op stuck at its primary past the op complaint time (a
//     stalled disk) is a slow op of that OSD, with its type and age, and the
//     warning goes once it ends;
//   - a replica that does not ack a write within the rep timeout (its
//     disk stalled) fails the write at its primary, and the status names
//     the replica, not only the primary whose ops failed.
func TestSlowOpsInStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster with a mon")
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	lc := osdtest.StartLocal(t, local.Options{OSDs: 3, PGs: 8, Dir: t.TempDir(), Logger: logger, WithMon: true, NoAuth: true,
		RepTimeout: time.Second, OpComplaintTime: 500 * time.Millisecond,
		NearfullRatio: osdtest.IgnoreHostDisk, BackfillfullRatio: osdtest.IgnoreHostDisk, FullRatio: osdtest.IgnoreHostDisk,
		FailsafeFullRatio: osdtest.IgnoreHostDisk})
	ctx := ctxT(t, 2*time.Minute)
	cl, err := client.New(ctx, client.Options{Seeds: lc.Seeds(), OpTimeout: time.Minute, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.MakeBucket(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	byID := func(id uint32) *osd.OSD {
		for _, o := range lc.OSDs {
			if o.ID() == id {
				return o
			}
		}
		t.Fatalf("no osd.%d", id)
		return nil
	}
	slowOps := func(s *mon.Status) *mon.HealthCheck {
		for i := range s.Health.Detail {
			if s.Health.Detail[i].Code == "SLOW_OPS" {
				return &s.Health.Detail[i]
			}
		}
		return nil
	}
	var last *mon.Status
	waitStatus := func(what string, ok func(*mon.Status) bool) *mon.Status {
		t.Helper()
		osdtest.Eventually(t, 30*time.Second, what, func() bool {
			s, err := lc.Mon.StatusDetail(ctx)
			if err != nil {
				return false
			}
			last = s
			return ok(s)
		})
		return last
	}
	waitStatus("HEALTH_OK", func(s *mon.Status) bool { return s.Health.Status == mon.HealthOK })

	// A client op held at its primary.
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	held := make(chan uint32, 1)
	osd.UploadCreating.Set(func(id uint32, bucket, key string) {
		if key == "stuck" {
			select {
			case held <- id:
			default:
			}
			<-release
		}
	})
	defer osd.UploadCreating.Set(nil)
	done := make(chan error, 1)
	go func() {
		_, err := cl.NewMultipartUpload(ctx, "slow", "stuck", client.PutOptions{})
		done <- err
	}()
	primary := <-held
	st := waitStatus("SLOW_OPS for the held op", func(s *mon.Status) bool { return slowOps(s) != nil })
	c := slowOps(st)
	if !strings.Contains(c.Summary, "1 slow ops") || !strings.Contains(c.Summary, fmt.Sprintf("daemons [osd.%d] have slow ops", primary)) {
		t.Errorf("summary %q: want 1 slow op of osd.%d", c.Summary, primary)
	}
	if len(c.Detail) != 1 || !strings.Contains(c.Detail[0], fmt.Sprintf("osd.%d: 1 ops in flight for more than 500ms, the oldest (create_upload)", primary)) {
		t.Errorf("detail %q: want osd.%d's create_upload", c.Detail, primary)
	}
	if st.Health.Status != mon.HealthWarn {
		t.Errorf("health %s with a slow op", st.Health.Status)
	}
	if s := byID(primary).Stats(); s.SlowOps != 1 || s.OldestSlowOp < 500*time.Millisecond {
		t.Errorf("osd.%d's stats: %d slow ops, the oldest %v; want 1, past 500ms", primary, s.SlowOps, s.OldestSlowOp)
	}
	free()
	if err := <-done; err != nil {
		t.Fatalf("the held upload, let go: %v", err)
	}
	waitStatus("HEALTH_OK once the op ended", func(s *mon.Status) bool { return s.Health.Status == mon.HealthOK })

	// A replica that does not ack: its shard of the PG held.
	mp := lc.Mon.Map()
	pool, _ := mp.PoolByName(placement.DefaultPoolName)
	pgn := placement.PGOf(pool, "slow", "late")
	acting := mp.ActingSet(pool.Id, pgn)
	sid, _ := placement.PGID{Pool: pool.Id, Seed: pgn}.StoreID()
	replica := acting[1]
	stall := make(chan struct{})
	var stallOnce sync.Once
	unstall := func() { stallOnce.Do(func() { close(stall) }) }
	defer unstall()
	osd.RepOpApplying.Set(func(id, s uint32) {
		if id == replica && s == sid {
			<-stall
		}
	})
	defer osd.RepOpApplying.Set(nil)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = osdtest.Put(pctx, cl, "slow", "late", []byte("v"), client.PutOptions{})
	cancel()
	if err == nil {
		t.Fatal("a put acknowledged while its replica held every write")
	}
	st = waitStatus("SLOW_OPS naming the replica", func(s *mon.Status) bool {
		c := slowOps(s)
		return c != nil && strings.Contains(c.Summary, "waiting for replica acks")
	})
	c = slowOps(st)
	if !strings.Contains(c.Summary, fmt.Sprintf("from [osd.%d]", replica)) {
		t.Errorf("summary %q: want osd.%d named", c.Summary, replica)
	}
	want := fmt.Sprintf("osd.%d: ", acting[0])
	if !strings.Contains(strings.Join(c.Detail, "\n"), want) || !strings.Contains(strings.Join(c.Detail, "\n"), fmt.Sprintf("waiting 1s for osd.%d's ack", replica)) {
		t.Errorf("detail %q: want the primary osd.%d waiting for osd.%d", c.Detail, acting[0], replica)
	}
	if n := byID(acting[0]).Stats().RepTimeouts; n == 0 {
		t.Errorf("osd.%d counts no rep timeouts", acting[0])
	}
	unstall()
	t.Logf("SLOW_OPS: %s; %q", c.Summary, c.Detail)
}
