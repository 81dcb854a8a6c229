//go:build rdma

package msgr_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// TestSecureTamperedFrameRDMA: testTamperedFrame over rdma+tcp, with a
// message large enough that its sealed frame, in registered memory, is
// moved by a rendezvous.
func TestSecureTamperedFrameRDMA(t *testing.T) {
	env := msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0", Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 }}
	testTamperedFrame(t, env, 64<<10)
}
