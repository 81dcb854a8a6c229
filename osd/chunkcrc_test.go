package osd_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/osd/store"
)

// TestPutBodyChecksummedByLink: the body of a put is checksummed once
// per OSD, by the link it arrived on, on the
// primary and the replicas alike: no store computes a CRC over it again
// (store.Stats.BodyCRCBytes), and it reads back whole.
func TestPutBodyChecksummedByLink(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	cl := c.Client(t, nil)
	ctx := ctxT(t, time.Minute)
	if err := cl.MakeBucket(ctx, "once"); err != nil {
		t.Fatal(err)
	}
	summed := func() int64 { return storeStat(c, func(st store.Stats) int64 { return st.BodyCRCBytes }) }
	before := summed()
	for i, size := range []int{1000, 100 << 10, 300 << 10, 1 << 20, 4<<20 + 5} {
		body := osdtest.Payload(size, uint64(i))
		if _, err := osdtest.Put(ctx, cl, "once", fmt.Sprint(i), body, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		got, _, err := osdtest.Get(ctx, cl, "once", fmt.Sprint(i), client.GetOptions{})
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("get %d: %d bytes of %d, %v", i, len(got), size, err)
		}
	}
	if n := summed() - before; n != 0 {
		t.Fatalf("the stores checksummed %d bytes of bodies their links had checksummed", n)
	}
}

// storeStat sums a store counter over the cluster's OSDs.
func storeStat(c *osdtest.Cluster, stat func(store.Stats) int64) (n int64) {
	for _, o := range c.OSDs {
		n += stat(o.Store().Stats())
	}
	return n
}
