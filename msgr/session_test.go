package msgr

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/ospreystore/osprey/msgr/wire"
)

// Step tests of session, the seq/ack/replay state machine.

func testMsg(size int) *Message { return &Message{Front: make([]byte, size)} }

func seqs(ms []*Message) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.out.seq
	}
	return out
}

func wantSeqs(t *testing.T, what string, got []*Message, want ...uint64) {
	t.Helper()
	g := seqs(got)
	if len(g) != len(want) {
		t.Fatalf("%s: got seqs %v, want %v", what, g, want)
	}
	for i := range g {
		if g[i] != want[i] {
			t.Fatalf("%s: got seqs %v, want %v", what, g, want)
		}
	}
}

// sendAll marks every queued message sent and returns their seqs.
func sendAll(s *session) []uint64 {
	var out []uint64
	for m := s.nextUnsent(); m != nil; m = s.nextUnsent() {
		out = append(out, m.out.seq)
		s.markSent()
	}
	return out
}

func sendN(t *testing.T, s *session, n int) {
	t.Helper()
	for range n {
		if s.nextUnsent() == nil {
			t.Fatal("nothing to send")
		}
		s.markSent()
	}
}

func TestSessionEnqueueSendAck(t *testing.T) {
	var s session
	if s.nextUnsent() != nil || s.queued() != 0 {
		t.Fatal("empty session has work")
	}
	for i := range 5 {
		s.enqueue(testMsg(10 * (i + 1)))
	}
	if s.queued() != 5 || s.queuedBytes != 150 || s.outSeq != 5 {
		t.Fatalf("queued %d bytes %d outSeq %d", s.queued(), s.queuedBytes, s.outSeq)
	}
	if m := s.nextUnsent(); m == nil || m.out.seq != 1 {
		t.Fatalf("next %v", m)
	}
	// nextUnsent does not advance by itself.
	if s.nextUnsent().out.seq != 1 {
		t.Fatal("nextUnsent advanced")
	}
	sendN(t, &s, 3)
	if s.nextUnsent().out.seq != 4 || s.sentSeq != 3 {
		t.Fatalf("next %d sentSeq %d", s.nextUnsent().out.seq, s.sentSeq)
	}
	released, err := s.onAck(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, "ack 2", released, 1, 2)
	if s.queued() != 3 || s.queuedBytes != 120 || s.sent != 1 {
		t.Fatalf("after ack: queued %d bytes %d sent %d", s.queued(), s.queuedBytes, s.sent)
	}
	// Repeated and old acks release nothing.
	for _, ack := range []uint64{0, 1, 2} {
		released, err = s.onAck(ack, released[:0])
		if err != nil || len(released) != 0 {
			t.Fatalf("ack %d again: %v, %v", ack, seqs(released), err)
		}
	}
	released, err = s.onAck(3, released[:0])
	if err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, "ack 3", released, 3)
	if s.sent != 0 || s.nextUnsent().out.seq != 4 {
		t.Fatalf("sent %d", s.sent)
	}
	// The released slice is appended to, not replaced.
	prefix := []*Message{testMsg(0)}
	sendAll(&s)
	released, err = s.onAck(5, prefix)
	if err != nil || len(released) != 3 || released[0] != prefix[0] {
		t.Fatalf("append: %d, %v", len(released), err)
	}
	if s.queued() != 0 || s.queuedBytes != 0 || s.nextUnsent() != nil {
		t.Fatalf("not empty: %d %d", s.queued(), s.queuedBytes)
	}
}

func TestSessionAckErrors(t *testing.T) {
	var s session
	// An ack on a fresh session, before anything was sent.
	if _, err := s.onAck(1, nil); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("ack 1 of nothing: %v", err)
	}
	for range 4 {
		s.enqueue(testMsg(1))
	}
	sendN(t, &s, 2)
	// Acking a message that is queued but never went out.
	released, err := s.onAck(3, nil)
	if !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("ack of an unsent message: %v", err)
	}
	if len(released) != 0 || s.queued() != 4 || s.sent != 2 {
		t.Fatalf("a refused ack changed the session: released %v, queued %d, sent %d", seqs(released), s.queued(), s.sent)
	}
	// Beyond anything ever assigned.
	if _, err := s.onAck(100, nil); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("ack beyond outSeq: %v", err)
	}
	if _, err := s.onAck(^uint64(0), nil); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("ack 2^64-1: %v", err)
	}
	// The legitimate one still works.
	released, err = s.onAck(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, "ack 2", released, 1, 2)
}

func TestSessionRewindResendsExactlyTheUnacked(t *testing.T) {
	var s session
	for range 6 {
		s.enqueue(testMsg(5))
	}
	sendN(t, &s, 5) // 1..5 went out; 6 waits for credit
	// The link fails; the peer had received 1 and 2.
	released, replay, err := s.rewind(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, "rewind", released, 1, 2)
	if replay != 3 {
		t.Fatalf("replay %d, want 3", replay)
	}
	if got := sendAll(&s); len(got) != 4 || got[0] != 3 || got[3] != 6 {
		t.Fatalf("resent %v, want [3 4 5 6]", got)
	}

	// The peer received nothing: everything sent is replayed.
	var s2 session
	for range 3 {
		s2.enqueue(testMsg(1))
	}
	sendN(t, &s2, 3)
	released, replay, err = s2.rewind(0, nil)
	if err != nil || len(released) != 0 || replay != 3 {
		t.Fatalf("rewind 0: %v %d %v", seqs(released), replay, err)
	}
	// Rewind twice (a handshake that failed after attaching): still all.
	sendN(t, &s2, 1)
	if _, replay, err = s2.rewind(0, nil); err != nil || replay != 1 {
		t.Fatalf("second rewind: %d %v", replay, err)
	}
	if s2.nextUnsent().out.seq != 1 {
		t.Fatal("not replaying from 1")
	}

	// The peer claims to have received more than was ever sent.
	var s3 session
	for range 3 {
		s3.enqueue(testMsg(1))
	}
	sendN(t, &s3, 1)
	if _, _, err := s3.rewind(2, nil); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("rewind beyond sent: %v", err)
	}
}

func TestSessionAckFromOldLinkAfterRewind(t *testing.T) {
	// Messages that went out on the old link may still be acked on the
	// new one (the peer's in_seq in the handshake was taken before they
	// arrived). They are released, not sent again.
	var s session
	for range 5 {
		s.enqueue(testMsg(1))
	}
	sendN(t, &s, 5)
	if _, _, err := s.rewind(1, nil); err != nil {
		t.Fatal(err)
	}
	sendN(t, &s, 1) // 2 resent
	released, err := s.onAck(4, nil)
	if err != nil {
		t.Fatalf("ack of old-link messages: %v", err)
	}
	wantSeqs(t, "ack 4", released, 2, 3, 4)
	if s.sent != 0 || s.nextUnsent().out.seq != 5 {
		t.Fatalf("sent %d next %v", s.sent, seqs([]*Message{s.nextUnsent()}))
	}
	// Still bounded by what ever went out.
	s.enqueue(testMsg(1)) // 6, never sent
	if _, err := s.onAck(6, nil); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("ack of never-sent after rewind: %v", err)
	}
}

func TestSessionOnMessage(t *testing.T) {
	var s session
	for seq := uint64(1); seq <= 3; seq++ {
		deliver, err := s.onMessage(seq)
		if !deliver || err != nil {
			t.Fatalf("seq %d: %v %v", seq, deliver, err)
		}
	}
	// Duplicates from a replay: dropped, no error.
	for _, seq := range []uint64{1, 2, 3} {
		deliver, err := s.onMessage(seq)
		if deliver || err != nil {
			t.Fatalf("duplicate %d: %v %v", seq, deliver, err)
		}
	}
	// A gap is a protocol violation and changes nothing.
	deliver, err := s.onMessage(5)
	if deliver || !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("gap: %v %v", deliver, err)
	}
	if s.inSeq != 3 {
		t.Fatalf("inSeq %d after a gap", s.inSeq)
	}
	if deliver, err := s.onMessage(4); !deliver || err != nil {
		t.Fatalf("seq 4: %v %v", deliver, err)
	}
	// Seq 0 is never valid after the first message, and is a duplicate.
	if deliver, err := s.onMessage(0); deliver || err != nil {
		t.Fatalf("seq 0: %v %v", deliver, err)
	}
}

func TestSessionAckOwed(t *testing.T) {
	var s session
	if s.ackOwed() {
		t.Fatal("fresh session owes an ack")
	}
	s.onMessage(1)
	s.onMessage(2)
	if !s.ackOwed() {
		t.Fatal("no ack owed after receiving")
	}
	var p wire.Preamble
	s.stampAck(&p)
	if p.Ack != 2 || s.ackOwed() {
		t.Fatalf("stamped %d, owed %v", p.Ack, s.ackOwed())
	}
	s.onMessage(2) // duplicate
	if s.ackOwed() {
		t.Fatal("a duplicate makes an ack owed")
	}
	// A new link has heard no ack yet.
	if _, _, err := s.rewind(0, nil); err != nil {
		t.Fatal(err)
	}
	if !s.ackOwed() {
		t.Fatal("no ack owed on a new link")
	}
	s.stampAck(&p)
	if s.ackOwed() {
		t.Fatal("still owed")
	}
}

func TestSessionReset(t *testing.T) {
	var s session
	for range 100 {
		s.enqueue(testMsg(3))
	}
	sendN(t, &s, 70)
	if _, err := s.onAck(30, nil); err != nil {
		t.Fatal(err)
	}
	s.onMessage(1)
	ring := len(s.ring)
	released := s.reset(nil)
	if len(released) != 70 || released[0].out.seq != 31 || released[69].out.seq != 100 {
		t.Fatalf("reset released %d messages (%v...)", len(released), seqs(released[:1]))
	}
	if s.queued() != 0 || s.queuedBytes != 0 || s.outSeq != 0 || s.inSeq != 0 || s.sentSeq != 0 || s.sent != 0 || s.ackOwed() {
		t.Fatalf("state after reset: %+v", s)
	}
	if len(s.ring) != ring {
		t.Fatal("reset dropped the ring")
	}
	for i, m := range s.ring {
		if m != nil {
			t.Fatalf("ring[%d] still holds a message", i)
		}
	}
	// Sequence numbers start over.
	s.enqueue(testMsg(1))
	if s.nextUnsent().out.seq != 1 {
		t.Fatalf("first seq after reset %d", s.nextUnsent().out.seq)
	}
	if _, err := s.onAck(1, nil); !errors.Is(err, wire.ErrProtocol) {
		t.Fatal("an ack from the old session is accepted after reset")
	}
}

func TestSessionRingGrowthAndWrap(t *testing.T) {
	var s session
	next := uint64(1) // next seq expected from nextUnsent
	acked := uint64(0)
	enq := func(n int) {
		for range n {
			s.enqueue(testMsg(int(s.outSeq % 7)))
		}
	}
	check := func() {
		t.Helper()
		if s.queued() != int(s.outSeq-acked) {
			t.Fatalf("queued %d, want %d", s.queued(), s.outSeq-acked)
		}
		var bytes int64
		for i := range s.n {
			m := s.at(i)
			if m.out.seq != acked+uint64(i)+1 {
				t.Fatalf("ring position %d holds seq %d, want %d", i, m.out.seq, acked+uint64(i)+1)
			}
			bytes += m.Len()
		}
		if bytes != s.queuedBytes {
			t.Fatalf("queuedBytes %d, counted %d", s.queuedBytes, bytes)
		}
		if len(s.ring)&(len(s.ring)-1) != 0 {
			t.Fatalf("ring of %d is not a power of two", len(s.ring))
		}
	}
	// Fill past the first ring, move the head, then wrap around and grow
	// with the head in the middle.
	for round, plan := range []struct{ enq, send, ack int }{
		{50, 50, 40}, {60, 30, 40}, {100, 80, 70}, {5, 45, 55}, {300, 300, 290}, {0, 10, 20},
	} {
		enq(plan.enq)
		for range plan.send {
			m := s.nextUnsent()
			if m == nil || m.out.seq != next {
				t.Fatalf("round %d: next unsent %v, want seq %d", round, m, next)
			}
			s.markSent()
			next++
		}
		released, err := s.onAck(acked+uint64(plan.ack), nil)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(released) != plan.ack {
			t.Fatalf("round %d: released %d, want %d", round, len(released), plan.ack)
		}
		for i, m := range released {
			if m.out.seq != acked+uint64(i)+1 {
				t.Fatalf("round %d: released seq %d at %d", round, m.out.seq, i)
			}
		}
		acked += uint64(plan.ack)
		check()
	}
	if s.queued() != 0 || len(s.ring) < 256 {
		t.Fatalf("queued %d, ring %d", s.queued(), len(s.ring))
	}
}

// TestSessionRandomized runs random enqueue/send/ack/rewind steps against a
// plain model of what the session must do.
func TestSessionRandomized(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var s session
		var (
			queue    []uint64 // unacked seqs, in order (the model)
			sentHere int      // of queue, how many went out on this link
			everSent uint64
			outSeq   uint64
		)
		for step := range 2000 {
			switch op := rng.IntN(10); {
			case op < 4:
				s.enqueue(testMsg(rng.IntN(100)))
				outSeq++
				queue = append(queue, outSeq)
			case op < 7:
				for n := rng.IntN(5); n > 0 && sentHere < len(queue); n-- {
					m := s.nextUnsent()
					if m == nil || m.out.seq != queue[sentHere] {
						t.Fatalf("seed %d step %d: next %v, model %d", seed, step, m, queue[sentHere])
					}
					s.markSent()
					sentHere++
					everSent = max(everSent, queue[sentHere-1])
				}
				if sentHere == len(queue) && s.nextUnsent() != nil {
					t.Fatalf("seed %d step %d: unsent message beyond the model", seed, step)
				}
			case op < 9:
				// Any ack up to what ever went out is legal.
				lo := outSeq - uint64(len(queue))
				ack := lo + uint64(rng.IntN(int(everSent-lo)+1)) // acks never pass everSent
				released, err := s.onAck(ack, nil)
				if err != nil {
					t.Fatalf("seed %d step %d: ack %d (sent up to %d): %v", seed, step, ack, everSent, err)
				}
				k := 0
				for k < len(queue) && queue[k] <= ack {
					if released[k].out.seq != queue[k] {
						t.Fatalf("seed %d step %d: released %d, model %d", seed, step, released[k].out.seq, queue[k])
					}
					k++
				}
				if len(released) != k {
					t.Fatalf("seed %d step %d: released %d, model %d", seed, step, len(released), k)
				}
				queue = queue[k:]
				sentHere = max(0, sentHere-k)
				// An ack beyond what went out is refused.
				if _, err := s.onAck(everSent+1+uint64(rng.IntN(3)), nil); !errors.Is(err, wire.ErrProtocol) {
					t.Fatalf("seed %d step %d: ack beyond %d accepted", seed, step, everSent)
				}
			default:
				lo := outSeq - uint64(len(queue))
				peer := lo
				if everSent > lo {
					peer += uint64(rng.IntN(int(everSent-lo) + 1))
				}
				released, replay, err := s.rewind(peer, nil)
				if err != nil {
					t.Fatalf("seed %d step %d: rewind %d: %v", seed, step, peer, err)
				}
				k := int(peer - lo)
				if len(released) != k || replay != max(0, sentHere-k) {
					t.Fatalf("seed %d step %d: rewind released %d replay %d, model %d %d", seed, step, len(released), replay, k, max(0, sentHere-k))
				}
				queue = queue[k:]
				sentHere = 0
			}
			if s.queued() != len(queue) || s.sent != sentHere {
				t.Fatalf("seed %d step %d: queued %d sent %d, model %d %d", seed, step, s.queued(), s.sent, len(queue), sentHere)
			}
		}
	}
}
