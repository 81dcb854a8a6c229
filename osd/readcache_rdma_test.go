//go:build rdma

package osd_test

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/osd"
	"golang.org/x/sync/errgroup"
)

// TestCachedGetsOverRDMAAreNotCopied: an OSD whose public network is
// rdma+tcp keeps its read cache in memory registered with that transport,
// so every get of an object in a data file is sent from where the cache
// holds it: a zero-copy rendezvous send each, and no copied one. With a
// cache of three objects and four readers of six, extents are evicted
// while replies from them are in flight, and every read is still right.
// Closing the OSD gives every region back, and the transports' Close
// leaves nothing registered and no goroutine.
func TestCachedGetsOverRDMAAreNotCopied(t *testing.T) {
	before := runtime.NumGoroutine()
	trOSD := rdma.NewTransport("tcp", rdma.Config{})
	trCli := rdma.NewTransport("tcp", rdma.Config{})
	closed := false
	t.Cleanup(func() {
		if !closed {
			trOSD.Close()
			trCli.Close()
		}
	})
	const size = 1 << 20 // in a data file, moved by rendezvous
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8, Public: "rdma+tcp", Tweak: func(cfg *osd.Config) {
		cfg.Transports = []wire.Transport{tcp.Transport{}, trOSD}
		cfg.Store.ReadCacheSize = 3*size + size/2
	}})
	cl := c.Client(t, func(o *client.Options) {
		o.Transports = []wire.Transport{tcp.Transport{}, trCli}
		o.OpTimeout = 20 * time.Second
	})
	ctx := ctxT(t, 2*time.Minute)
	if err := cl.MakeBucket(ctx, "rcache"); err != nil {
		t.Fatal(err)
	}
	bodies := make([][]byte, 6)
	for i := range bodies {
		bodies[i] = osdtest.Payload(size, uint64(i))
		if _, err := osdtest.Put(ctx, cl, "rcache", fmt.Sprint(i), bodies[i], client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(i int) error {
		got, _, err := osdtest.Get(ctx, cl, "rcache", fmt.Sprint(i), client.GetOptions{})
		if err == nil && !bytes.Equal(got, bodies[i]) {
			err = fmt.Errorf("object %d: %d bytes, not the ones put", i, len(got))
		}
		return err
	}
	st0 := trOSD.Stats()
	// One object read twice: the second get is served from the cache.
	for range 2 {
		if err := get(0); err != nil {
			t.Fatal(err)
		}
	}
	o := c.OSDs[0]
	if rc := o.Store().ReadCacheStats(); rc.Hits == 0 || rc.AllocFailures != 0 {
		t.Fatalf("read cache %+v: want a hit, and no allocator failure", rc)
	}
	st := trOSD.Stats()
	if z, cp := st.ZeroCopySends-st0.ZeroCopySends, st.CopiedSends-st0.CopiedSends; z < 2 || cp != 0 {
		t.Fatalf("two gets sent %d payloads with no copy and copied %d, want 2 (more if one was retried) and 0", z, cp)
	}
	if st.LentRegions == 0 || st.LentBytes < size {
		t.Fatalf("the cache holds no registered memory: %+v", st)
	}

	const readers, each = 4, 30
	var wg sync.WaitGroup
	for w := range readers {
		wg.Go(func() {
			for j := range each {
				if err := get((w + j) % len(bodies)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	rc := o.Store().ReadCacheStats()
	st1 := trOSD.Stats()
	gets := uint64(2 + readers*each)
	if z, cp := st1.ZeroCopySends-st0.ZeroCopySends, st1.CopiedSends-st0.CopiedSends; z < gets || cp != 0 {
		t.Fatalf("%d gets sent %d payloads with no copy and copied %d (read cache %+v)", gets, z, cp, rc)
	}
	if rc.Extents > 3 || rc.Misses <= int64(len(bodies)) {
		t.Fatalf("read cache %+v: want at most 3 extents, and evictions", rc)
	}

	c.StopOSD(0)
	cl.Close()
	if st := trOSD.Stats(); st.LentRegions != 0 {
		t.Fatalf("%d registered regions still out after the OSD closed", st.LentRegions)
	}
	trOSD.Close()
	trCli.Close()
	closed = true
	for _, tr := range []*rdma.Transport{trOSD, trCli} {
		if st := tr.Stats(); st.RegisteredBytes != 0 {
			t.Fatalf("%d bytes registered after Close", st.RegisteredBytes)
		}
	}
	osdtest.Eventually(t, 10*time.Second, fmt.Sprintf("goroutines back to %d", before), func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// TestReadCacheGivesWayOverRDMA: an OSD and its client on one RDMA domain
// (as in osprey up and bench obj's local cluster) whose budget the read
// cache's half, the links and the copies of payloads being sent nearly
// fill. A get whose reply finds no room to land asks the cache for its
// memory back (store.ReclaimReadCache), and lands once the cache's
// extents are let go, where it used to wait 2 s, fail its link and replay
// (MemGiveUps): gets of 4 MiB objects under a 48 MiB budget collapsed
// so to a few MB/s. Every get is right, none gave up, and the cache gave
// some back.
func TestReadCacheGivesWayOverRDMA(t *testing.T) {
	tr := rdma.NewTransport("tcp", rdma.Config{MemBudget: 48 << 20})
	t.Cleanup(func() { tr.Close() }) // after the cluster's
	const size = 4 << 20
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8, Public: "rdma+tcp", Tweak: func(cfg *osd.Config) {
		cfg.Transports = []wire.Transport{tcp.Transport{}, tr}
	}})
	cl := c.Client(t, func(o *client.Options) {
		o.Transports = []wire.Transport{tcp.Transport{}, tr}
		o.OpTimeout = time.Minute
	})
	ctx := ctxT(t, 3*time.Minute)
	if err := cl.MakeBucket(ctx, "giveway"); err != nil {
		t.Fatal(err)
	}
	bodies := make([][]byte, 12)
	for i := range bodies {
		bodies[i] = osdtest.Payload(size, uint64(i))
		if _, err := osdtest.Put(ctx, cl, "giveway", fmt.Sprint(i), bodies[i], client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var g errgroup.Group
	for w := range 8 {
		g.Go(func() error {
			for j := range 2 * len(bodies) {
				i := (w*5 + j) % len(bodies)
				got, _, err := osdtest.Get(ctx, cl, "giveway", fmt.Sprint(i), client.GetOptions{})
				if err == nil && !bytes.Equal(got, bodies[i]) {
					err = fmt.Errorf("object %d: %d bytes, not the ones put", i, len(got))
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("%v (%+v)", err, tr.Stats())
	}
	st, rc := tr.Stats(), c.OSDs[0].Store().ReadCacheStats()
	if st.MemGiveUps != 0 || rc.Reclaimed == 0 {
		t.Fatalf("%d waits for registered memory gave up, the cache gave back %d objects; want none, and some (%+v, %+v)", st.MemGiveUps, rc.Reclaimed, st, rc)
	}
	// Every wait ended: the cache may have registered memory again
	// (a wait counted and never ended would keep it off for good).
	if st.MemWaiting != 0 {
		t.Fatalf("%d transfers still count as waiting for registered memory with none in flight", st.MemWaiting)
	}
	lent := tr.Stats().LentRegions
	if _, err := osdtest.Put(ctx, cl, "giveway", "after", bodies[0], client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := osdtest.Get(ctx, cl, "giveway", "after", client.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := tr.Stats().LentRegions; got <= lent {
		t.Fatalf("an object read once the pressure was over was not cached in registered memory (%d lent regions, %d before)", got, lent)
	}
}
