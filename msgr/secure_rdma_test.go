//go:build rdma

package msgr_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestSecureTamperedFrameRDMA: testTamperedFrame over rdma+tcp, with a
// message large enough that its sealed frame goes in two parts, its data
// part in registered memory moved by a rendezvous: altered in its data
// part or in its front and preamble part (inline beside the rendezvous
// descriptor), or, larger, in a record.
func TestSecureTamperedFrameRDMA(t *testing.T) {
	env := msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0", Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 }}
	t.Run("data-part", func(t *testing.T) { testTamperedFrame(t, env, 64<<10, tamperWhole) })
	t.Run("head-part", func(t *testing.T) { testTamperedFrame(t, env, 64<<10, tamperHead) })
	t.Run("records", func(t *testing.T) { testTamperedFrame(t, env, 1<<20, tamperWhole) })
}

// TestSecureReceivedDataAlignedRDMA: testSecureDataPlaced over rdma+tcp
// (16 KiB send buffers): a message whose sealed frame goes by rendezvous
// has its data on a wire.DataAlign boundary. Smaller ones lie where the
// receive put them, as in crc mode (msgr/rdma's recv.go says why). And
// every rendezvous payload, a sealed frame's data or a whole one-part
// sealed frame, is read from the registered buffer it was sealed into,
// never from a copy.
func TestSecureReceivedDataAlignedRDMA(t *testing.T) {
	var trs []*rdma.Transport
	env := msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0",
		Tweak: func(o *msgr.Options) { o.RecvWindowMsgs = 64 },
		Transports: func() []wire.Transport {
			tr := rdma.NewTransport("tcp", rdma.Config{})
			t.Cleanup(func() { tr.Close() })
			trs = append(trs, tr)
			return []wire.Transport{tr}
		}}
	testSecureDataPlaced(t, env, func(front, data int) bool { return data >= 64<<10 })
	var zero, copied uint64
	for _, tr := range trs {
		st := tr.Stats()
		zero, copied = zero+st.ZeroCopySends, copied+st.CopiedSends
	}
	// 20 messages have 16 KiB of data or more, sealed past the 16 KiB
	// send buffers whatever their front.
	if zero < 20 || copied != 0 {
		t.Fatalf("rendezvous sends: %d from the sealed buffer, %d from a copy", zero, copied)
	}
}
