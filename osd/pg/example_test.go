package pg_test

import (
	"fmt"

	"github.com/ospreystore/osprey/osd/pg"
)

// A newly added, empty OSD becomes the primary of a PG whose data is on
// the others. The loop below is what a daemon does, with the network and
// the store left out: the primary serves only after it pulled the log.
func Example() {
	id := pg.ID{Pool: 1, Seed: 0x1f}
	full := pg.PeerInfo{Last: pg.Version{Epoch: 1, Seq: 5}, LastEpochStarted: 1}
	osds := map[pg.OSDID]*pg.PG{
		1: pg.New(pg.Config{Self: 1, ID: id}), // new: no info
		2: pg.New(pg.Config{Self: 2, ID: id, Local: full}),
		3: pg.New(pg.Config{Self: 3, ID: id, Local: full}),
	}
	// Epoch 1: [2 3] held the PG. Epoch 2: osd.1 joined and ranks first.
	maps := [][]pg.OSDID{nil, {2, 3}, {1, 2, 3}}
	for _, m := range osds {
		for e := pg.Epoch(1); e < pg.Epoch(len(maps)); e++ {
			if err := m.Step(pg.AdvanceMap{Epoch: e, Acting: maps[e], Size: 3, MinSize: 2}); err != nil {
				panic(err)
			}
		}
	}
	primary := osds[1]
	for primary.HasReady() {
		rd := primary.Ready()
		for _, q := range rd.Queries {
			info, err := osds[q.To].AnswerQuery(1, q.Epoch)
			if err != nil {
				primary.Step(pg.Unreachable{From: q.To, Epoch: q.Epoch})
				continue
			}
			primary.Step(pg.Info{From: q.To, Epoch: q.Epoch, Info: info})
		}
		if r := rd.Recover; r != nil {
			fmt.Printf("pull %v..%v from osd.%d\n", r.Have, r.Want, r.From)
			primary.Step(pg.Recovered{From: r.From, Last: r.Want}) // the daemon copied the objects
		}
		if rd.LastEpochStarted != 0 {
			fmt.Printf("persist last_epoch_started=%d\n", rd.LastEpochStarted)
		}
		fmt.Printf("%s serving=%v\n", rd.State, rd.Serving)
	}
	fmt.Println(primary.CanServe() == nil, primary.NextVersion())
	// Output:
	// peering serving=false
	// pull 0'0..1'5 from osd.2
	// peering serving=false
	// persist last_epoch_started=2
	// active+clean serving=true
	// true 2'6
}
