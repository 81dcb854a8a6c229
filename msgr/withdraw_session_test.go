package msgr

import (
	"math/rand/v2"
	"testing"
)

// Step tests of session.withdraw.

func TestSessionWithdraw(t *testing.T) {
	var s session
	ms := make([]*Message, 6)
	for i := range ms {
		ms[i] = testMsg(10 * (i + 1))
		s.enqueue(ms[i])
	}
	sendN(t, &s, 2) // seqs 1 and 2 are on the link

	// Written: refused, whether acked yet or not.
	if s.withdraw(ms[0].out.id) != nil || s.withdraw(ms[1].out.id) != nil {
		t.Fatal("withdrew a message a link had")
	}
	// In the middle of the unsent part: the rest move up one seq.
	if m := s.withdraw(ms[3].out.id); m != ms[3] {
		t.Fatalf("withdraw of the 4th: %v", m)
	}
	if s.queued() != 5 || s.queuedBytes != 210-40 || s.outSeq != 5 {
		t.Fatalf("after withdrawal: queued %d bytes %d outSeq %d", s.queued(), s.queuedBytes, s.outSeq)
	}
	if s.withdraw(ms[3].out.id) != nil {
		t.Fatal("withdrew a message twice")
	}
	// The next unsent one, and the last one.
	if s.withdraw(ms[2].out.id) != ms[2] || s.withdraw(ms[5].out.id) != ms[5] {
		t.Fatal("withdraw of the 3rd or 6th failed")
	}
	if got := sendAll(&s); len(got) != 1 || got[0] != 3 || s.at(2) != ms[4] {
		t.Fatalf("sent %v after withdrawals, want the 5th message as seq 3", got)
	}
	if s.queuedBytes != 10+20+50 {
		t.Fatalf("queued bytes %d", s.queuedBytes)
	}

	// After a fault what the old link had is replayed, so it is still not
	// withdrawable though no link of now has it.
	released, replay, err := s.rewind(1, nil)
	if err != nil || replay != 2 {
		t.Fatalf("rewind: replay %d, %v", replay, err)
	}
	wantSeqs(t, "rewind", released, 1)
	if s.withdraw(ms[1].out.id) != nil || s.withdraw(ms[4].out.id) != nil {
		t.Fatal("withdrew a message to replay")
	}
	late := testMsg(7)
	s.enqueue(late)
	if s.withdraw(late.out.id) != late || s.outSeq != 3 {
		t.Fatalf("withdraw after rewind: outSeq %d", s.outSeq)
	}

	// A reset drops everything; a ticket from before it names nothing
	// after it, though seqs start over.
	old := testMsg(1)
	s.enqueue(old)
	oldID := old.out.id
	s.reset(nil)
	fresh := testMsg(1)
	s.enqueue(fresh)
	if fresh.out.seq != 1 || fresh.out.id == oldID || s.withdraw(oldID) != nil {
		t.Fatalf("after reset: seq %d id %d (old %d)", fresh.out.seq, fresh.out.id, oldID)
	}
	if s.withdraw(0) != nil {
		t.Fatal("id 0 withdrew something")
	}
}

// TestSessionWithdrawRandomized runs random enqueue/send/ack/rewind/withdraw
// steps and checks what a peer would see on the wire: every seq is a new
// one, next after the last, or a replay of the message first written under
// it; what is withdrawn never went out; the queue counts stay exact.
func TestSessionWithdrawRandomized(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 2))
		var s session
		var (
			queue    []*Message              // unacked, in order (the model)
			sentHere int                     // of queue, how many went out on this link
			acked    uint64                  // the highest seq released
			wire     = map[uint64]*Message{} // seq -> the message first written under it
			maxSeq   uint64                  // the highest seq written
			bytes    int64
			gone     []uint64 // ids acked or withdrawn
		)
		for step := range 3000 {
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d step %d: "+format, append([]any{seed, step}, args...)...)
			}
			switch op := rng.IntN(12); {
			case op < 4:
				m := testMsg(rng.IntN(100))
				s.enqueue(m)
				queue = append(queue, m)
				bytes += m.Len()
			case op < 6:
				for n := rng.IntN(5); n > 0 && sentHere < len(queue); n-- {
					m := s.nextUnsent()
					if m != queue[sentHere] {
						fail("next %v, model %v", m, queue[sentHere])
					}
					switch seq := m.out.seq; {
					case seq <= maxSeq && wire[seq] != m:
						fail("seq %d replayed with another message", seq)
					case seq > maxSeq+1:
						fail("seq %d written after %d: a gap", seq, maxSeq)
					case seq == maxSeq+1:
						wire[seq], maxSeq = m, seq
					}
					s.markSent()
					sentHere++
				}
			case op < 8:
				ack := acked + uint64(rng.IntN(int(maxSeq-acked)+1))
				released, err := s.onAck(ack, nil)
				if err != nil {
					fail("ack %d: %v", ack, err)
				}
				k := int(ack - acked)
				if len(released) != k {
					fail("ack %d released %d, model %d", ack, len(released), k)
				}
				for i, m := range released {
					if m != queue[i] || m.out.seq != acked+uint64(i)+1 {
						fail("released %d (seq %d) out of order", i, m.out.seq)
					}
					bytes -= m.Len()
					gone = append(gone, m.out.id)
				}
				queue, acked, sentHere = queue[k:], ack, max(0, sentHere-k)
			case op < 9:
				peer := acked + uint64(rng.IntN(int(maxSeq-acked)+1))
				released, _, err := s.rewind(peer, nil)
				if err != nil {
					fail("rewind %d: %v", peer, err)
				}
				for _, m := range released {
					bytes -= m.Len()
					gone = append(gone, m.out.id)
				}
				queue, acked, sentHere = queue[len(released):], peer, 0
			default:
				var id uint64
				want := -1 // index in queue of a withdrawable message
				switch {
				case len(queue) > 0 && rng.IntN(4) > 0:
					i := rng.IntN(len(queue))
					id = queue[i].out.id
					if queue[i].out.seq > maxSeq {
						want = i
					}
				case len(gone) > 0:
					id = gone[rng.IntN(len(gone))]
				}
				m := s.withdraw(id)
				switch {
				case want < 0 && m != nil:
					fail("withdrew id %d (seq %d), written up to %d", id, m.out.seq, maxSeq)
				case want >= 0 && m != queue[want]:
					fail("withdraw of id %d: %v", id, m)
				case m != nil:
					queue = append(queue[:want], queue[want+1:]...)
					bytes -= m.Len()
					gone = append(gone, id)
				}
			}
			if s.queued() != len(queue) || s.sent != sentHere || s.queuedBytes != bytes || s.outSeq != acked+uint64(len(queue)) {
				fail("queued %d sent %d bytes %d outSeq %d, model %d %d %d %d",
					s.queued(), s.sent, s.queuedBytes, s.outSeq, len(queue), sentHere, bytes, acked+uint64(len(queue)))
			}
			for i, m := range queue {
				if s.at(i) != m || m.out.seq != acked+uint64(i)+1 {
					fail("queue[%d] has seq %d, want %d", i, m.out.seq, acked+uint64(i)+1)
				}
			}
		}
	}
}
