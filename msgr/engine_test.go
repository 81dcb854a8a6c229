package msgr

import (
	"errors"
	"testing"

	"github.com/ospreystore/osprey/msgr/wire"
)

// FuzzEngineFrames feeds an engine whatever a peer might send, in any
// order, beside sends, releases, ticks and timers of its own: a frame
// that breaks the protocol is an error (the Conn then ends the link),
// never a panic, and whatever the engine collects stays within the
// credit the peer granted and acks only what arrived. Odd-length inputs
// run a link that agreed CONTROL_SLOTS, where the engine must also keep
// to one unanswered keepalive and answer only keepalives that came.
func FuzzEngineFrames(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 4, 1, 2, 3, 3})
	f.Add([]byte{1, 0, 0, 1, 0, 1, 1, 2, 0, 4, 5, 1, 2, 3, 3, 0, 0, 9, 200, 7, 7})
	f.Add([]byte{4, 4, 4, 4, 4, 5, 5, 6, 1, 2, 3, 0, 2, 1, 0, 30, 60})
	f.Fuzz(func(t *testing.T, in []byte) {
		var e engine
		e.init(4, 1000, simClock)
		ctl := len(in)%2 == 1
		e.startLink(4, 0, 0, 1000, 4, 1000, 0, ctl)
		answerable := false // a KEEPALIVE arrived that we have not answered
		next := func() byte {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return b
		}
		var held []int64
		var scratch []wire.Frame
		for len(in) > 0 {
			switch next() % 7 {
			case 0, 1: // a frame from the peer
				tag := []wire.Tag{wire.TagMessage, wire.TagAck, wire.TagKeepalive, wire.TagKeepaliveAck, wire.TagClose, wire.TagHello}[next()%6]
				fr := wire.Frame{
					Preamble: wire.Preamble{Tag: tag, Seq: uint64(next() % 8), Ack: uint64(next() % 8),
						GrantMsgs: uint32(next() % 16), GrantBytes: uint64(next()) * 8},
					Front: simPayload[:int(next())*4],
				}
				inSeq := e.sess.inSeq
				_, v, _, err := e.onFrame(&fr, next()%2 == 0, nil)
				if err != nil {
					if !errors.Is(err, wire.ErrProtocol) {
						t.Fatalf("%v frame: %v, want a protocol error", tag, err)
					}
					return // the link ends
				}
				if tag == wire.TagKeepalive {
					answerable = true
				}
				if v == rxDeliver {
					if fr.Seq != inSeq+1 {
						t.Fatalf("delivered seq %d after %d", fr.Seq, inSeq)
					}
					held = append(held, int64(len(fr.Front)))
				}
			case 2: // a send
				e.enqueue(&Message{Front: simPayload[:int(next())*4]})
			case 3: // the writer
				wasOut := e.kaOut
				fr, _ := e.collect(scratch, maxBatchFrames, maxBatchBytes)
				scratch = fr
				kas, answers := 0, 0
				for _, f := range fr {
					switch f.Tag {
					case wire.TagKeepalive:
						kas++
					case wire.TagKeepaliveAck:
						answers++
					}
				}
				if answers > 1 || answers == 1 && !answerable {
					t.Fatalf("%d KEEPALIVE_ACKs with a keepalive to answer %v", answers, answerable)
				}
				if answers > 0 {
					answerable = false
				}
				if ctl && (kas > 1 || kas == 1 && wasOut) {
					t.Fatalf("%d KEEPALIVEs sent, one unanswered before: %v", kas, wasOut)
				}
				if e.cw.sentMsgs > e.cw.limitMsgs {
					t.Fatalf("sent %d frames on a limit of %d", e.cw.sentMsgs, e.cw.limitMsgs)
				}
				for _, f := range fr {
					if f.Ack > e.sess.inSeq {
						t.Fatalf("acked %d with %d received", f.Ack, e.sess.inSeq)
					}
				}
			case 4: // the dispatcher releases
				if len(held) > 0 {
					e.onRelease(held[0])
					held = held[1:]
				}
			case 5:
				e.onAckTimer()
			case 6:
				e.onTick(0, 1, next()%2 == 0, false)
			}
		}
	})
}
