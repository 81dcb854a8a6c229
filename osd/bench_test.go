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
	b.SetBytes(int64(len(body)))
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := osdtest.ProcessCPU()
	defer osdtest.ReportCPU(b, cpu0)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := osdtest.Put(ctx, cl, "bench", fmt.Sprintf("k%d", n.Add(1)), body, client.PutOptions{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
