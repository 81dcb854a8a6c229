package osd_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestListingWithAPGDown: a listing that meets a PG with no OSD up fails
// ServiceUnavailable, naming the PG, once the client's retries are spent;
// it never answers with the other PGs' objects alone, which what trusts a
// listing (gc, sync, a recursive copy or delete) would take for all there
// is.
func TestListingWithAPGDown(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, Size: 2, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = time.Second })
	if err := cl.MakeBucket(ctx, "listdown"); err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		if _, err := osdtest.Put(ctx, cl, "listdown", fmt.Sprintf("k%02d", i), []byte("x"), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// osd.1 and osd.2 stop; the map says they are down (still in), so the
	// PGs that only they serve have no OSD up.
	down, err := c.Map.With(func(pb *osdpb.ClusterMap) { pb.Epoch++; pb.Osds[1].Up, pb.Osds[2].Up = false, false })
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := down.PoolByName(placement.DefaultPoolName)
	var orphan []string
	for pg := range pool.PgCount {
		if len(down.ActingSet(pool.Id, pg)) == 0 {
			orphan = append(orphan, placement.PGID{Pool: pool.Id, Seed: pg}.String())
		}
	}
	if len(orphan) == 0 {
		t.Fatal("no PG is served by osd.1 and osd.2 alone in this placement")
	}
	c.StopOSD(1)
	c.StopOSD(2)
	adoptAll(t, c, down)
	osdtest.Eventually(t, 10*time.Second, "the client has the map with osd.1 and osd.2 down", func() bool {
		_, _ = cl.BucketExists(ctx, "listdown") // a reply from osd.0 carries its newer epoch
		return cl.Map().Epoch() >= down.Epoch()
	})
	n := 0
	var listErr error
	for _, err := range cl.ListObjects(ctx, "listdown", client.ListOptions{}) {
		if err != nil {
			listErr = err
			break
		}
		n++
	}
	if !errors.Is(listErr, client.ErrServiceUnavailable) || !strings.Contains(listErr.Error(), "has no OSD up") {
		t.Fatalf("a listing with pgs %v down: %d objects, err %v; want ServiceUnavailable naming a PG", orphan, n, listErr)
	}
	if n != 0 {
		t.Errorf("a listing with pgs %v down yielded %d objects before failing", orphan, n)
	}
}

// TestListingRegroupsAfterAMapChange: a listing sends one op per primary
// for the PGs it leads under the client's map; when the map changed under
// it between two rounds (here pg_temp hands one of those PGs to its other
// member, no data moving), that primary answers WrongPrimary for the PG
// it no longer leads, and the listing groups the PGs again under the
// newer map rather than send the same group elsewhere until RetryFor ends.
func TestListingRegroupsAfterAMapChange(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, Size: 2, PGs: 8})
	ctx := ctxT(t, 2*time.Minute)
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = 5 * time.Second })
	if err := cl.MakeBucket(ctx, "regroup"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	var led []uint32 // by osd.0
	for pg := range pool.PgCount {
		if p, _ := c.Map.Primary(pool.Id, pg); p == 0 {
			led = append(led, pg)
		}
	}
	if len(led) < 2 {
		t.Fatalf("osd.0 leads pgs %v: this placement needs two", led)
	}
	// More than one round of 1000 from osd.0: keys of the PGs it leads.
	var keys []string
	for i := 0; len(keys) < 1100; i++ {
		if key := fmt.Sprintf("k%05d", i); slices.Contains(led, placement.PGOf(pool, "regroup", key)) {
			keys = append(keys, key)
		}
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(keys); i += 8 {
				if _, err := osdtest.Put(ctx, cl, "regroup", keys[i], nil, client.PutOptions{}); err != nil {
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
	// The last PG osd.0 leads goes to its other member; the first, by
	// which the client routes the group, stays.
	moved := led[len(led)-1]
	acting := c.Map.ActingSet(pool.Id, moved)
	next, err := c.Map.With(func(pb *osdpb.ClusterMap) {
		pb.Epoch++
		pb.PgTemp = append(pb.PgTemp, &osdpb.PGTemp{Pool: pool.Id, Pg: moved, Osds: []uint32{acting[1], acting[0]}})
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, err := range cl.ListObjects(ctx, "regroup", client.ListOptions{}) {
		if err != nil {
			t.Fatalf("a listing across a change of primary: %v after %d objects", err, n)
		}
		if n == 0 {
			// The first round is in; the next groups by the client's
			// map, older than the OSDs' from now on.
			adoptAll(t, c, next)
		}
		n++
	}
	if n != len(keys) {
		t.Fatalf("listed %d objects, want %d", n, len(keys))
	}
	if cl.Map().Epoch() < next.Epoch() {
		t.Fatal("the listing never met the new map")
	}
}
