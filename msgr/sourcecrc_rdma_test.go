//go:build rdma

package msgr_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// TestSourceCRCDeliveredRDMA: testSourceCRC over rdma+tcp, where the
// larger messages go by rendezvous, in crc and in secure mode.
func TestSourceCRCDeliveredRDMA(t *testing.T) {
	env := msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0", Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 }}
	t.Run("crc", func(t *testing.T) { testSourceCRC(t, env, false) })
	t.Run("secure", func(t *testing.T) { testSourceCRC(t, msgrtest.WithSecure(t, env, msgrtest.NewTestCA(t)), true) })
}
