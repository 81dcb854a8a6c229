//go:build rdma

package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestGetOverRDMAKeepsRegisteredWindows: over an RDMA public network a
// large reply's window is kept in the registered buffer it arrived in, up
// to client.KeepExternal bytes over all open Objects (more is copied),
// and every registered buffer goes back to the transport on Close: the
// bytes are right for whole objects, objects of several windows, ranges
// and multipart objects, read every way, put from a reader or from bytes.
func TestGetOverRDMAKeepsRegisteredWindows(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8, Public: "rdma+tcp"})
	tr := rdma.NewTransport("tcp", rdma.Config{})
	t.Cleanup(func() { tr.Close() }) // after the client's Close
	cl := c.Client(t, func(o *client.Options) {
		o.Transports = []wire.Transport{tcp.Transport{}, tr}
		o.OpTimeout = 20 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	const win = 8 << 20                                  // the client's read window
	nOpen := int(client.KeepExternal/win) + 1            // one more than may be kept
	sizes := []int{1000, 100 << 10, 3<<20 + 1, 11 << 20} // the last multipart
	for range nOpen {
		sizes = append(sizes, win)
	}
	var objs [][]byte
	for i, n := range sizes {
		data := osdtest.Payload(n, uint64(i))
		part := int64(16 << 20)
		if i == 3 {
			part = 5 << 20
		}
		put := osdtest.Put
		if i%2 == 1 {
			put = putBytes // the link copies the caller's bytes into registered memory
		}
		if _, err := put(ctx, cl, "bkt", fmt.Sprintf("s%d", i), data, client.PutOptions{PartSize: part}); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, data)
	}
	idle := func(what string) {
		t.Helper()
		checkNothingHeld(t, cl)
		if in := tr.Stats().BuffersInUse; in != 0 {
			t.Fatalf("%s: %d registered buffers still in use", what, in)
		}
	}
	for i := range 4 {
		data := objs[i]
		for way := range 3 {
			o, err := cl.GetObject(ctx, "bkt", fmt.Sprintf("s%d", i), client.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			switch way {
			case 0:
				got, err = io.ReadAll(o)
			case 1:
				var b bytes.Buffer
				_, err = io.Copy(&b, o)
				got = b.Bytes()
			case 2: // a range across the end of a window or part
				off := max(0, len(data)-(5<<20)-7)
				got = make([]byte, len(data)-off)
				_, err = o.ReadAt(got, int64(off))
				data = data[off:]
			}
			o.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("s%d, way %d: %d bytes, %v", i, way, len(got), err)
			}
		}
		idle(fmt.Sprintf("s%d read", i))
	}
	var open []*client.Object
	for i := 4; i < len(sizes); i++ {
		o, err := cl.GetObject(ctx, "bkt", fmt.Sprintf("s%d", i), client.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, o)
	}
	if x, h := client.HeldExternal(cl), client.HeldBytes(cl); x != client.KeepExternal || h != int64(nOpen)*win {
		t.Fatalf("%d objects of %d bytes open: %d bytes kept, %d in registered memory; want %d, %d", nOpen, win, h, x, int64(nOpen)*win, client.KeepExternal)
	}
	for i, o := range open {
		got, err := io.ReadAll(o)
		o.Close()
		if err != nil || !bytes.Equal(got, objs[4+i]) {
			t.Fatalf("open object %d: %d bytes, %v", i, len(got), err)
		}
	}
	idle("all closed")
}

// TestLongPartListOverRDMA: a CompleteMultipartUpload naming 2000 parts
// over an RDMA public network is a request whose front (its list of
// parts) is far larger than an RDMA link's 16 KiB receive buffers. It must
// reach the OSD and be answered (here InvalidPart: no part was uploaded),
// where it ended the client's session ("connection lost"), as a completed
// object's reply listing its parts did.
func TestLongPartListOverRDMA(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8, Public: "rdma+tcp"})
	tr := rdma.NewTransport("tcp", rdma.Config{})
	t.Cleanup(func() { tr.Close() }) // after the client's Close
	cl := c.Client(t, func(o *client.Options) { o.Transports = []wire.Transport{tcp.Transport{}, tr} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	id, err := cl.NewMultipartUpload(ctx, "bkt", "k", client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	parts := make([]client.CompletePart, 2000)
	for i := range parts {
		parts[i] = client.CompletePart{PartNumber: i + 1, ETag: fmt.Sprintf("%032x", i)}
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "bkt", "k", id, parts); !errors.Is(err, client.ErrInvalidPart) {
		t.Fatalf("completing with 2000 parts never uploaded: %v, want InvalidPart", err)
	}
}

// TestLongListingOverRDMA: a page of a listing of 600 objects over an
// RDMA public network is a reply whose front (the entries) is far larger
// than an RDMA link's 16 KiB receive buffers; it must arrive whole.
func TestLongListingOverRDMA(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 4, Public: "rdma+tcp"})
	tr := rdma.NewTransport("tcp", rdma.Config{})
	t.Cleanup(func() { tr.Close() }) // after the client's Close
	cl := c.Client(t, func(o *client.Options) { o.Transports = []wire.Transport{tcp.Transport{}, tr} })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	const n = 600
	for i := range n {
		if _, err := cl.PutObjectBytes(ctx, "bkt", fmt.Sprintf("a-rather-long-key-name-for-a-listing/%04d", i), []byte{byte(i)}, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	for _, err := range cl.ListObjects(ctx, "bkt", client.ListOptions{}) {
		if err != nil {
			t.Fatalf("after %d entries: %v", got, err)
		}
		got++
	}
	if got != n {
		t.Fatalf("listed %d objects, want %d", got, n)
	}
}
