package osd_test

import (
	"errors"
	"fmt"
	"strings"
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
