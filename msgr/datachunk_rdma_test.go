//go:build rdma

package msgr_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// TestDataChunkCRCsRDMA: testDataChunkCRCs over rdma+tcp, where every
// payload it sends goes by rendezvous and is checksummed in one pass: as
// its pieces land, where the receiver reads it (pieces that do not fall
// on chunk boundaries), or once the sender wrote it all.
func TestDataChunkCRCsRDMA(t *testing.T) {
	for _, mode := range []string{"read", "write"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv("OSPREY_RDMA_RENDEZVOUS", mode)
			testDataChunkCRCs(t, msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0", Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 }})
		})
	}
}
