//go:build rdma

package msgr_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestSideSessionBesideLosslessRDMA: testSideSessionBesideLossless over
// rdma+tcp, where the side session's smaller window is fewer posted
// receives.
func TestSideSessionBesideLosslessRDMA(t *testing.T) {
	testSideSessionBesideLossless(t, msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0", Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 }})
}

// TestSideSessionSmallWindowRDMA: testSideSessionSmallWindow over
// rdma+tcp, where the acceptor posts only as many receives as the side
// session's dialer asks for (wire.LinkOptions.SmallWindow) and the 3 for
// the session's control frames, not the 64 of the server's window and the
// write rendezvous's control receives.
func TestSideSessionSmallWindowRDMA(t *testing.T) {
	noGoroutineLeak(t)
	tr := rdma.NewTransport("tcp", rdma.Config{NoSharedRecv: true}) // receives counted per link
	t.Cleanup(func() { tr.Close() })                                // after the server's shutdown
	env := msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0", Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 }}
	testSideSessionSmallWindow(t, env, func(o *msgr.Options) { o.Transports = []wire.Transport{tr} },
		func() int64 { return tr.Stats().RecvsPosted })
}

// TestForwardUnchangedReturnsTheCreditRDMA: testForwardUnchanged over
// rdma+tcp, where the message forwarded holds a posted receive's buffer.
func TestForwardUnchangedReturnsTheCreditRDMA(t *testing.T) {
	testForwardUnchanged(t, msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0"})
}
