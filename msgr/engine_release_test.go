package msgr

import (
	"testing"

	"github.com/ospreystore/osprey/msgr/wire"
)

// TestCreditAfterBufferBack: a received frame that spends a credit but
// is no message to dispatch (an ACK, a KEEPALIVE or its answer, a
// duplicate) has its buffer back before its credit returns. On RDMA the
// buffer is a posted receive: a grant sent in between (the writer
// collects under the same lock the instant it is dropped) would let the
// peer send into a receive not yet posted again, a receiver-not-ready
// error on verbs (the invariants build's checkGrant caught it).
func TestCreditAfterBufferBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    wire.Preamble
	}{
		{"ack", wire.Preamble{Tag: wire.TagAck}},
		{"keepalive", wire.Preamble{Tag: wire.TagKeepalive, Seq: 1}},
		{"keepalive ack", wire.Preamble{Tag: wire.TagKeepaliveAck}},
		{"duplicate", wire.Preamble{Tag: wire.TagMessage, Seq: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e engine
			e.init(4, 1000, simClock)
			e.startLink(4, 0, 0, 1000, 4, 1000, 0, false)
			if tc.p.Tag == wire.TagMessage {
				// Seq 1 arrives once and is consumed; the test sends it again.
				first := wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 1}}
				if _, v, _, err := e.onFrame(&first, false, nil); err != nil || v != rxDeliver {
					t.Fatalf("first copy: verdict %v, %v", v, err)
				}
				e.onRelease(0)
			}
			before := e.cw.consumedMsgs.Load()
			freed, consumedAtFree := false, int64(0)
			fr := wire.Frame{Preamble: tc.p, Buf: wire.NewExternalBuffer(make([]byte, 64), func(*wire.Buffer) {
				freed, consumedAtFree = true, e.cw.consumedMsgs.Load()
			})}
			if _, _, _, err := e.onFrame(&fr, false, nil); err != nil {
				t.Fatal(err)
			}
			if e.cw.consumedMsgs.Load() != before+1 {
				t.Fatalf("consumed %d, want %d: the frame's credit did not return", e.cw.consumedMsgs.Load(), before+1)
			}
			if !freed {
				t.Fatal("the frame's buffer was still held when its credit returned")
			}
			if consumedAtFree != before {
				t.Fatalf("the buffer came back after the credit (consumed %d at its release, %d before)", consumedAtFree, before)
			}
			fr.Release() // the reader's own release after handleFrame: a no-op now
		})
	}
}
