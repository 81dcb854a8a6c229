package osd_test

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestRollingRestartNoRepTimeouts: restarting each OSD in turn under
// writes (a rolling restart, each waiting for active+clean) fails no write
// for want of a replica's ack: every replica answers each RepOp, the
// resends' syncs too. A replica catching up after the restart used to
// drop a resend's sync folded into one already queued, and that client's
// write waited out the whole rep timeout (10 s by default).
func TestRollingRestartNoRepTimeouts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster with a mon")
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	lc := osdtest.StartLocal(t, local.Options{OSDs: 4, PGs: 32, Dir: t.TempDir(), Logger: logger, WithMon: true, NoAuth: true,
		// The default rep timeout: a loaded host's slow ack is no dropped
		// one (the count, not the latency, is what this test reads).
		RepTimeout: 10 * time.Second, HeartbeatGrace: 6 * time.Second,
		NearfullRatio: osdtest.IgnoreHostDisk, BackfillfullRatio: osdtest.IgnoreHostDisk, FullRatio: osdtest.IgnoreHostDisk,
		FailsafeFullRatio: osdtest.IgnoreHostDisk})
	ctx := ctxT(t, 5*time.Minute)
	cl, err := client.New(ctx, client.Options{Seeds: lc.Seeds(), OpTimeout: 30 * time.Second, RetryFor: time.Minute, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.MakeBucket(ctx, "roll"); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 64<<10)
	rand.Read(body)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var puts atomic.Int64
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if _, err := osdtest.Put(ctx, cl, "roll", fmt.Sprintf("w%d-%d", w, i), body, client.PutOptions{}); err != nil {
					errs <- err
					return
				}
				puts.Add(1)
			}
		})
	}
	clean := func() {
		t.Helper()
		osdtest.Eventually(t, time.Minute, "4 OSDs up, every PG active+clean", func() bool {
			s, err := lc.Mon.Status(ctx)
			return err == nil && s.OSDs.Up == 4 && s.PGs["active+clean"] == s.PGTotal
		})
	}
	var timeouts uint64
	for i := range lc.OSDs {
		clean()
		timeouts += lc.OSDs[i].Stats().RepTimeouts // its counters go with it
		if err := lc.RestartOSD(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	clean()
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a put: %v", err)
	}
	for _, o := range lc.OSDs {
		timeouts += o.Stats().RepTimeouts
	}
	t.Logf("%d puts through 4 restarts, %d rep timeouts", puts.Load(), timeouts)
	if timeouts != 0 {
		t.Fatalf("%d writes waited out the rep timeout for a replica during a clean rolling restart", timeouts)
	}
}
