//go:build rdma

package msgr_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/transports"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestDataChunkCRCsRDMA: testDataChunkCRCs over rdma+tcp, where every
// payload it sends goes by rendezvous and is checksummed in one pass: as
// its pieces land, where the receiver reads it (pieces that do not fall
// on chunk boundaries), or once the sender wrote it all.
func TestDataChunkCRCsRDMA(t *testing.T) {
	for _, mode := range []string{"read", "write"} {
		t.Run(mode, func(t *testing.T) {
			var trs []*rdma.Transport
			env := msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0", Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 }}
			env.Transports = func() []wire.Transport {
				set, err := transports.New(transports.Config{RDMARendezvous: mode})
				if err != nil {
					t.Fatal(err)
				}
				// Registered before the messenger's shutdown, so run after it.
				t.Cleanup(func() { set.Close() })
				for _, tr := range set {
					if r, ok := tr.(*rdma.Transport); ok {
						trs = append(trs, r)
					}
				}
				return set
			}
			testDataChunkCRCs(t, env)
			var reads, writes uint64
			for _, tr := range trs {
				st := tr.Stats()
				reads, writes = reads+st.ReadPieces, writes+st.RendezvousWrites
			}
			// Two clients send 100 KiB, 1 MiB and 4 MiB + 1 each: read
			// in 1, 4 and 4 pieces, or written in one write apiece.
			if mode == "read" && (reads != 18 || writes != 0) || mode == "write" && (reads != 0 || writes != 6) {
				t.Fatalf("%s rendezvous: %d read pieces and %d writes", mode, reads, writes)
			}
		})
	}
}
