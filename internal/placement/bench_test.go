package placement

import (
	"fmt"
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
)

func BenchmarkPGOf(b *testing.B) {
	pool := &osdpb.Pool{PgCount: 128}
	for _, n := range []int{16, 64, 256} {
		key := string(make([]byte, n))
		b.Run(fmt.Sprintf("key=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len("bucket") + n))
			for b.Loop() {
				PGOf(pool, "bucket", key)
			}
		})
	}
}

// BenchmarkActingSet is the per-op lookup once the pool's table exists.
func BenchmarkActingSet(b *testing.B) {
	m := mustMap(b, testProto(equalWeights(10), &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 1024}))
	m.ActingSet(1, 0)
	b.Run("Append", func(b *testing.B) {
		b.ReportAllocs()
		dst := make([]uint32, 0, 3)
		pg := uint32(0)
		for b.Loop() {
			dst = m.AppendActingSet(dst[:0], 1, pg)
			pg = (pg + 1) & 1023
		}
	})
	b.Run("Clone", func(b *testing.B) {
		b.ReportAllocs()
		pg := uint32(0)
		for b.Loop() {
			m.ActingSet(1, pg)
			pg = (pg + 1) & 1023
		}
	})
	b.Run("Primary", func(b *testing.B) {
		b.ReportAllocs()
		pg := uint32(0)
		for b.Loop() {
			m.Primary(1, pg)
			pg = (pg + 1) & 1023
		}
	})
}

// BenchmarkPlacementTable is the first use of a pool in a new map: every
// PG's straw2 over every OSD.
func BenchmarkPlacementTable(b *testing.B) {
	for _, c := range []struct{ osds, pgs int }{{10, 1024}, {100, 4096}} {
		pb := testProto(equalWeights(c.osds), &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: uint32(c.pgs)})
		b.Run(fmt.Sprintf("osds=%d/pgs=%d", c.osds, c.pgs), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m, _ := FromProto(pb)
				m.Primary(1, 0)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(c.osds*c.pgs), "ns/draw")
		})
	}
}

func BenchmarkDrawCost(b *testing.B) {
	osd := uint32(0)
	var sink uint64
	for b.Loop() {
		sink += drawCost(1, 7, osd)
		osd++
	}
	_ = sink
}
