package client_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// benchCluster is a one-OSD, one-replica cluster in this process with a
// bucket, so a benchmark's CPU is the client's, one loopback transfer and
// one store write or read (cpu-s/GB counts all of them).
func benchCluster(b *testing.B) (*client.Client, context.Context) {
	c := osdtest.Start(b, osdtest.Options{OSDs: 1, PGs: 8})
	cl := c.Client(b, nil)
	ctx := b.Context()
	if err := cl.MakeBucket(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	return cl, ctx
}

// benchOps runs op with 8 in flight on 2 CPUs (osdtest.BenchOps).
func benchOps(b *testing.B, size int64, op func(i int) error) { osdtest.BenchOps(b, size, 4, op) }

// BenchmarkPut4MiB puts 4 MiB objects from a bytes.Reader (reader: the
// SDK reads it into the messenger's send buffer) and with PutObjectBytes
// (bytes: sent from where they lie).
func BenchmarkPut4MiB(b *testing.B) {
	const size = 4 << 20
	data := osdtest.Payload(size, 1)
	for _, in := range []string{"reader", "bytes"} {
		b.Run(in, func(b *testing.B) {
			cl, ctx := benchCluster(b)
			benchOps(b, size, func(i int) error {
				key := fmt.Sprintf("k%d", i%16)
				if in == "bytes" {
					_, err := cl.PutObjectBytes(ctx, "bench", key, data, client.PutOptions{})
					return err
				}
				_, err := cl.PutObject(ctx, "bench", key, bytes.NewReader(data), size, client.PutOptions{})
				return err
			})
		})
	}
}

// BenchmarkPut4KiB puts 4 KiB objects, each to a fresh key as `osprey
// bench obj` does: a small put's CPU is mostly per op, not per byte.
func BenchmarkPut4KiB(b *testing.B) {
	cl, ctx := benchCluster(b)
	const size = 4 << 10
	data := osdtest.Payload(size, 1)
	var n atomic.Int64
	benchOps(b, size, func(int) error {
		_, err := cl.PutObject(ctx, "bench", fmt.Sprintf("k%d", n.Add(1)), bytes.NewReader(data), size, client.PutOptions{})
		return err
	})
}

// BenchmarkGet4MiB reads 4 MiB objects whole as io.Copy does (bench obj
// reads them so).
func BenchmarkGet4MiB(b *testing.B) {
	cl, ctx := benchCluster(b)
	const size = 4 << 20
	for i := range 16 {
		if _, err := osdtest.Put(ctx, cl, "bench", fmt.Sprintf("k%d", i), osdtest.Payload(size, uint64(i)), client.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	benchOps(b, size, func(i int) error { return discardObject(ctx, cl, "bench", fmt.Sprintf("k%d", i%16), size) })
}

// discardObject reads an object of size bytes whole into io.Discard.
func discardObject(ctx context.Context, cl *client.Client, bucket, key string, size int64) error {
	obj, err := cl.GetObject(ctx, bucket, key, client.GetOptions{})
	if err != nil {
		return err
	}
	defer obj.Close()
	n, err := io.Copy(io.Discard, obj)
	if err == nil && n != size {
		err = fmt.Errorf("%s/%s: read %d bytes of %d", bucket, key, n, size)
	}
	return err
}
