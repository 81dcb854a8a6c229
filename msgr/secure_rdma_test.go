//go:build rdma

package msgr_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// TestSecureTamperedFrameRDMA: testTamperedFrame over rdma+tcp, with a
// message large enough that its sealed frame goes in two parts, its data
// part in registered memory moved by a rendezvous: altered in its data
// part or in its front and preamble part (inline beside the rendezvous
// descriptor).
func TestSecureTamperedFrameRDMA(t *testing.T) {
	env := msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0", Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 }}
	t.Run("data-part", func(t *testing.T) { testTamperedFrame(t, env, 64<<10, tamperWhole) })
	t.Run("head-part", func(t *testing.T) { testTamperedFrame(t, env, 64<<10, tamperHead) })
}

// TestSecureReceivedDataAlignedRDMA: testSecureDataPlaced over rdma+tcp
// (16 KiB send buffers): a message whose sealed frame goes by rendezvous
// has its data on a wire.DataAlign boundary. Smaller ones lie where the
// receive put them, as in crc mode (msgr/rdma's recv.go says why).
func TestSecureReceivedDataAlignedRDMA(t *testing.T) {
	env := msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0", Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 }}
	testSecureDataPlaced(t, env, func(front, data int) bool { return data >= 64<<10 })
}
