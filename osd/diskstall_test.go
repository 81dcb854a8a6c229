package osd_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/internal/stallfs"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
)

// inData: the data files (under data/).
func inData(name string) bool { return strings.Contains(name, "/data/") }

// sickCluster is a cluster with a mon and 3 OSDs, osd.sick's store on a
// filesystem the test can stall, a bucket "stall", a client, and a key
// osd.sick leads.
type sickCluster struct {
	ctx  context.Context
	lc   *local.Cluster
	cl   *client.Client
	sick uint32
	key  string
}

func startSickCluster(t *testing.T, fs vfs.FS) sickCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster with a mon")
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	const sick = 1
	lc := osdtest.StartLocal(t, local.Options{OSDs: 3, PGs: 8, Dir: t.TempDir(), Logger: logger, WithMon: true, NoAuth: true,
		NearfullRatio: osdtest.IgnoreHostDisk, BackfillfullRatio: osdtest.IgnoreHostDisk, FullRatio: osdtest.IgnoreHostDisk,
		FailsafeFullRatio: osdtest.IgnoreHostDisk,
		OSDConfig: func(id uint32, cfg *osd.Config) {
			cfg.DiskStallTimeout = 1500 * time.Millisecond
			cfg.Store.DiskSlowThreshold = 300 * time.Millisecond
			if id == sick {
				cfg.Store = store.WithFSForTest(cfg.Store, fs)
				cfg.Store.ReadCacheSize = -1 // every get reads the disk
			}
		}})
	ctx := ctxT(t, 3*time.Minute)
	cl, err := client.New(ctx, client.Options{Seeds: lc.Seeds(), OpTimeout: 5 * time.Second, RetryFor: time.Minute, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if err := cl.MakeBucket(ctx, "stall"); err != nil {
		t.Fatal(err)
	}
	mp := lc.Mon.Map()
	pool, _ := mp.PoolByName(placement.DefaultPoolName)
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		if mp.ActingSet(pool.Id, placement.PGOf(pool, "stall", k))[0] == sick {
			key = k
		}
	}
	return sickCluster{ctx: ctx, lc: lc, cl: cl, sick: sick, key: key}
}

// TestDiskStallMarksDown: an OSD whose data disk stops answering (every
// write and sync held) asks to be marked down once a write has been stuck
// past its DiskStallTimeout, instead of staying up with its heartbeats
// answered and every op on its PGs stuck behind the disk: the PGs it led
// move on, a put stuck there is retried by the client on the new primary
// and acknowledged, and once the disk answers the OSD boots again by
// itself and everything acknowledged reads back.
func TestDiskStallMarksDown(t *testing.T) {
	gate := stallfs.NewGate()
	defer gate.Release()
	sc := startSickCluster(t, stallfs.FS{FS: vfs.Default, Gate: gate, Ops: stallfs.Writes | stallfs.Syncs})
	ctx, cl, lc, sick, key := sc.ctx, sc.cl, sc.lc, sc.sick, sc.key
	acked := map[string]string{}
	for i := range 10 {
		k, v := fmt.Sprintf("before%d", i), fmt.Sprintf("value %d", i)
		if _, err := osdtest.Put(ctx, cl, "stall", k, []byte(v), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		acked[k] = v
	}

	gate.Hold()
	stalled := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := osdtest.Put(ctx, cl, "stall", key, []byte("through the stall"), client.PutOptions{})
		done <- err
	}()
	osdtest.Eventually(t, 30*time.Second, fmt.Sprintf("osd.%d marked down with its disk stuck", sick), func() bool {
		info, _ := lc.Mon.Map().OSD(sick)
		return !info.Up
	})
	t.Logf("osd.%d marked down %v after its disk stalled", sick, time.Since(stalled).Round(time.Millisecond))
	if byID := lc.OSDs[sick]; byID.ID() != sick || byID.ServesReadsForTest() {
		t.Errorf("osd.%d serves reads after asking to be marked dead", sick)
	}
	downInfo, _ := lc.Mon.Map().OSD(sick)
	if !downInfo.Dead {
		t.Errorf("osd.%d down but not dead: it asked, so its successors need not wait out its read leases", sick)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the put stuck at osd.%d: %v", sick, err)
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("the put stuck at osd.%d not acknowledged 45 s after it was marked down", sick)
	}
	acked[key] = "through the stall"
	t.Logf("the put stuck at osd.%d acknowledged %v after the stall began", sick, time.Since(stalled).Round(time.Millisecond))

	// Still stalled, seconds and beacons later: it has not booted since.
	if info, _ := lc.Mon.Map().OSD(sick); info.Up || info.UpFrom != downInfo.UpFrom {
		t.Fatalf("osd.%d booted with its disk still stuck: up %v, up from %d (was %d)", sick, info.Up, info.UpFrom, downInfo.UpFrom)
	}

	gate.Release()
	osdtest.Eventually(t, 60*time.Second, fmt.Sprintf("osd.%d up again once its disk answers", sick), func() bool {
		info, _ := lc.Mon.Map().OSD(sick)
		return info.Up
	})
	osdtest.Eventually(t, 10*time.Second, fmt.Sprintf("osd.%d serving reads again after its boot", sick), lc.OSDs[sick].ServesReadsForTest)
	for k, v := range acked {
		got, _, err := osdtest.Get(ctx, cl, "stall", k, client.GetOptions{})
		if err != nil || string(got) != v {
			t.Errorf("%s: %q, %v; want %q", k, got, err, v)
		}
	}
}

// TestDiskReadStallMarksDown: an OSD whose disk still takes writes but
// hangs reads asks to be marked down once a read has been stuck past its
// DiskStallTimeout, as one whose writes hang: Pebble's health checks time
// no reads, the store does. A get stuck there is retried by the client on
// the PG's next member and answered, and once the disk answers the OSD
// boots again by itself.
func TestDiskReadStallMarksDown(t *testing.T) {
	gate := stallfs.NewGate()
	defer gate.Release()
	sc := startSickCluster(t, stallfs.FS{FS: vfs.Default, Gate: gate, Ops: stallfs.Reads, Match: inData})
	body := bytes.Repeat([]byte("read stall "), 100<<10) // 1.1 MB: a data file of its own
	if _, err := osdtest.Put(sc.ctx, sc.cl, "stall", sc.key, body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	gate.Hold()
	stalled := time.Now()
	got, _, err := osdtest.Get(sc.ctx, sc.cl, "stall", sc.key, client.GetOptions{})
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the get stuck at osd.%d: %d bytes, %v", sc.sick, len(got), err)
	}
	t.Logf("the get stuck at osd.%d answered %v after the stall began", sc.sick, time.Since(stalled).Round(time.Millisecond))
	if info, _ := sc.lc.Mon.Map().OSD(sc.sick); info.Up || !info.Dead {
		t.Fatalf("osd.%d with its reads stuck: up %v, dead %v; want marked down at its own request", sc.sick, info.Up, info.Dead)
	}
	gate.Release()
	osdtest.Eventually(t, 60*time.Second, fmt.Sprintf("osd.%d up again once its disk answers", sc.sick), func() bool {
		info, _ := sc.lc.Mon.Map().OSD(sc.sick)
		return info.Up
	})
}
