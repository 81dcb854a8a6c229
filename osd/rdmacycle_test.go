//go:build rdma

package osd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/osd"
)

// TestReplicationCycleSmallRDMABudget: two OSDs, each the primary of
// some PGs and the replica of the others, both networks over rdma+tcp,
// each on a registered-memory budget (64 MiB) that holds a few large
// bodies only. A primary holds a client's body in registered memory until
// its replica has read it; were client bodies free to take the whole
// budget, each OSD would hold bodies it forwards to the other while it
// waits for room to receive the other's, a cycle no release ends (a
// stress probe wedged a cluster so, for good). The client messages an OSD
// holds are bounded by its receive budget, an eighth of the RDMA budget
// (osd.Config.ClientMessageBytes), charged before a body takes registered
// memory and held until its write is done, so the rest always has room
// for what replicas receive: every put completes, no transfer waits for
// memory, and every replica has its body.
func TestReplicationCycleSmallRDMABudget(t *testing.T) {
	const budget = 64 << 20
	trs := make([]*rdma.Transport, 2)
	for i := range trs {
		trs[i] = rdma.NewTransport("tcp", rdma.Config{MemBudget: budget})
		t.Cleanup(func() { trs[i].Close() }) // after the cluster's
	}
	c := osdtest.Start(t, osdtest.Options{OSDs: 2, Size: 2, PGs: 8, Public: "rdma+tcp", Cluster: "rdma+tcp",
		Tweak: func(cfg *osd.Config) { cfg.Transports = []wire.Transport{tcp.Transport{}, trs[cfg.ID]} }})
	ctr := rdma.NewTransport("tcp", rdma.Config{})
	t.Cleanup(func() { ctr.Close() })
	cl := c.Client(t, func(o *client.Options) { o.Transports = []wire.Transport{tcp.Transport{}, ctr} })
	ctx := ctxT(t, 3*time.Minute)
	if err := cl.MakeBucket(ctx, "cycle"); err != nil {
		t.Fatal(err)
	}
	putConcurrently(ctx, t, c, cl, "cycle", 12, 3, func(w, i int) []byte { return osdtest.Payload(10<<20+w, uint64(w*3+i)) }, func() string {
		return fmt.Sprintf("osd.0 %+v; osd.1 %+v", trs[0].Stats(), trs[1].Stats())
	})
	// Nothing waited for registered memory: the client bodies held (one
	// at a time here, each over the 8 MiB receive budget) and what the
	// replicas received fit beside each other.
	for i, tr := range trs {
		if st := tr.Stats(); st.MemWaits != 0 {
			t.Errorf("osd.%d: %d transfers waited for registered memory (%+v)", i, st.MemWaits, st)
		}
	}
}
