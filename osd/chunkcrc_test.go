package osd_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/osd"
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

// TestGetNotChecksummedInOSD: a get of an object in a data file costs the
// OSD no CRC pass: its store reads the bytes without checking them
// (store.Stats.UncheckedReadBytes), and the client checks them once
// against the CRC32C the store recorded. With the read cache off every
// get reads the disk; with it on the first one does.
func TestGetNotChecksummedInOSD(t *testing.T) {
	for _, cacheMiB := range []int64{-1, 64} {
		t.Run(fmt.Sprintf("cache %d MiB", cacheMiB), func(t *testing.T) {
			const size = 4<<20 + 5
			cl, ctx, body, readBytes := oneStoredObject(t, cacheMiB, size)
			c0, u0 := readBytes()
			const gets = 3
			for range gets {
				got, _, err := osdtest.Get(ctx, cl, "once", "k", client.GetOptions{})
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("get: %d bytes of %d, %v", len(got), size, err)
				}
			}
			wantRead := int64(gets * size)
			if cacheMiB > 0 {
				wantRead = size
			}
			if c, u := readBytes(); c-c0 != 0 || u-u0 != wantRead {
				t.Fatalf("%d gets: the OSD checked %d bytes and read %d unchecked; want 0 and %d", gets, c-c0, u-u0, wantRead)
			}
		})
	}
}

// TestRangedGetWindowsAligned: a read from an offset inside a chunk cuts
// its first window back to the next 1 MiB boundary, so that the windows
// after it start on the store's chunks and come unchecked by the OSD (the
// client checks them); only the first window's chunks are checked there.
func TestRangedGetWindowsAligned(t *testing.T) {
	const size, off = 9<<20 + 5, 100
	cl, ctx, body, readBytes := oneStoredObject(t, -1, size)
	c0, u0 := readBytes()
	got, _, err := osdtest.Get(ctx, cl, "once", "k", client.GetOptions{Range: true, Offset: off, Length: -1})
	if err != nil || !bytes.Equal(got, body[off:]) {
		t.Fatalf("get from %d: %d bytes, %v", off, len(got), err)
	}
	// The first window, [100, 8 MiB), reads chunks 0-7, checked; the
	// second, [8 MiB, end), the rest, unchecked.
	if c, u := readBytes(); c-c0 != 8<<20 || u-u0 != size-8<<20 {
		t.Fatalf("the OSD checked %d bytes and read %d unchecked; want %d and %d", c-c0, u-u0, 8<<20, size-8<<20)
	}
}

// oneStoredObject starts one OSD with a read cache of cacheMiB (negative:
// off) and puts size bytes at once/k. readBytes sums the bytes of data
// files its store read checked and unchecked (store.Stats).
func oneStoredObject(t *testing.T, cacheMiB int64, size int) (cl *client.Client, ctx context.Context, body []byte, readBytes func() (checked, unchecked int64)) {
	t.Helper()
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8, Tweak: func(cfg *osd.Config) { cfg.Store.ReadCacheSize = cacheMiB << 20 }})
	cl = c.Client(t, nil)
	ctx = ctxT(t, time.Minute)
	if err := cl.MakeBucket(ctx, "once"); err != nil {
		t.Fatal(err)
	}
	body = osdtest.Payload(size, uint64(size))
	if _, err := osdtest.Put(ctx, cl, "once", "k", body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return cl, ctx, body, func() (int64, int64) {
		return storeStat(c, func(st store.Stats) int64 { return st.ReadCRCBytes }),
			storeStat(c, func(st store.Stats) int64 { return st.UncheckedReadBytes })
	}
}
