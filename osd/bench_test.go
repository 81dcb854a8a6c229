package osd_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// BenchmarkClusterPut4KiB: 4 KiB puts, 16 in flight, three in-process OSDs
// with three replicas. `osprey bench obj` is the full benchmark; this one
// is for profiling (-cpuprofile, -blockprofile).
func BenchmarkClusterPut4KiB(b *testing.B) {
	c := osdtest.Start(b, osdtest.Options{OSDs: 3, PGs: 128})
	cl := c.Client(b, nil)
	ctx := ctxT(b, 10*time.Minute)
	if err := cl.MakeBucket(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	body := osdtest.Payload(4<<10, 1)
	var n atomic.Int64
	osdtest.BenchOps(b, int64(len(body)), 8, func(int) error {
		_, err := osdtest.Put(ctx, cl, "bench", fmt.Sprintf("k%d", n.Add(1)), body, client.PutOptions{})
		return err
	})
}
