package placement_test

import (
	"fmt"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// A client finds an object's primary OSD from the map alone. When that OSD
// goes down, the next epoch's map promotes the first replica and appends
// one new OSD; the other replicas stay put.
func Example() {
	m, err := placement.NewLocal(placement.LocalOptions{
		PublicAddrs: []string{"tcp://127.0.0.1:6800", "tcp://127.0.0.1:6801", "tcp://127.0.0.1:6802", "tcp://127.0.0.1:6803"},
		FSID:        "example",
	})
	if err != nil {
		panic(err)
	}
	pool, _ := m.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "photos", "2024/cat.jpg")
	primary, _ := m.Primary(pool.Id, pg)
	addr, _ := m.PublicAddr(primary)
	fmt.Printf("epoch %d: PG %d, acting set %v, primary at %s\n", m.Epoch(), pg, m.ActingSet(pool.Id, pg), addr)

	next, err := m.With(func(pb *osdpb.ClusterMap) {
		for _, o := range pb.Osds {
			if o.Id == primary {
				o.Up = false
			}
		}
	})
	if err != nil {
		panic(err)
	}
	// A down OSD keeps its place: the PG runs undersized on the other two.
	fmt.Printf("epoch %d: PG %d, acting set %v\n", next.Epoch(), pg, next.ActingSet(pool.Id, pg))

	// Marked out, it is replaced by the next OSD in straw2's ranking.
	out, err := next.With(func(pb *osdpb.ClusterMap) {
		for _, o := range pb.Osds {
			if o.Id == primary {
				o.In = false
			}
		}
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("epoch %d: PG %d, acting set %v\n", out.Epoch(), pg, out.ActingSet(pool.Id, pg))
	// Output:
	// epoch 1: PG 98, acting set [3 2 0], primary at tcp://127.0.0.1:6803
	// epoch 2: PG 98, acting set [2 0]
	// epoch 3: PG 98, acting set [2 0 1]
}
