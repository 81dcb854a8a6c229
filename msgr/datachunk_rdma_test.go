//go:build rdma

package msgr_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// TestDataChunkCRCsRDMA: testDataChunkCRCs over rdma+tcp, where every
// payload it sends goes by rendezvous and is checksummed in one pass once
// the NIC placed it.
func TestDataChunkCRCsRDMA(t *testing.T) {
	testDataChunkCRCs(t, msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0", Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 }})
}
