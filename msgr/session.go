package msgr

import (
	"fmt"

	"github.com/ospreystore/osprey/msgr/internal/invariants"
	"github.com/ospreystore/osprey/msgr/wire"
)

// session is the sequencing state of one lossless (or lossy) session, a
// state machine with no I/O in the style of etcd-io/raft: the conn calls it
// under its lock and moves the bytes itself.
//
// Outgoing messages get consecutive sequence numbers and stay in a ring
// until the peer acks them: [0, sent) went out on some link, [sent, n) wait
// for a link or for credit. After a reconnect the peer says what it has
// received (its in_seq); everything up to that is released and the rest is
// sent again (rewind). Incoming messages are delivered only in order, and
// one at or below inSeq is a duplicate from such a replay and dropped, so
// the dispatcher sees every message exactly once.
//
// A message no link has had yet may be withdrawn (Conn.Withdraw): it
// leaves the ring and the messages behind it, which no link has had
// either, move up one seq each, so the seqs on the wire stay gap-free.
type session struct {
	outSeq uint64 // last sequence number assigned
	ring   []*Message
	head   int // index of the oldest unacked message
	n      int // messages in the ring
	sent   int // of those, how many went out on the current link
	// sentSeq is the highest seq ever handed to a link. After a rewind the
	// peer may still ack messages that went out on the old link and
	// arrived: any ack up to sentSeq is legitimate.
	sentSeq uint64

	queuedBytes int64

	// lastID is the last ticket id given (Message.out.id). It survives a
	// reset, so that a ticket never names a later message.
	lastID uint64

	inSeq     uint64 // last message received in order
	ackedSent uint64 // last ack value we sent
}

func (s *session) at(i int) *Message { return s.ring[(s.head+i)&(len(s.ring)-1)] }

// enqueue assigns the next sequence number and queues m.
func (s *session) enqueue(m *Message) {
	if s.n == len(s.ring) {
		s.grow()
	}
	s.outSeq++
	s.lastID++
	m.out.seq, m.out.id = s.outSeq, s.lastID
	s.ring[(s.head+s.n)&(len(s.ring)-1)] = m
	s.n++
	s.queuedBytes += m.Len()
}

func (s *session) grow() {
	ring := make([]*Message, max(64, 2*len(s.ring)))
	for i := range s.n {
		ring[i] = s.at(i)
	}
	s.ring, s.head = ring, 0
}

// queued is the number of messages not yet acked.
func (s *session) queued() int { return s.n }

// nextUnsent returns the next message to send, or nil.
func (s *session) nextUnsent() *Message {
	if s.sent == s.n {
		return nil
	}
	return s.at(s.sent)
}

// markSent records that nextUnsent went out.
func (s *session) markSent() {
	seq := s.at(s.sent).out.seq
	if invariants.Enabled && seq > s.sentSeq+1 {
		panic(fmt.Sprintf("msgr: invariant: writing seq %d after %d: a gap on the wire", seq, s.sentSeq))
	}
	s.sentSeq = max(s.sentSeq, seq)
	s.sent++
}

// withdraw takes the message of ticket id out of the ring if no link has
// had it (seq beyond sentSeq) and returns it; nil if it was written (a
// link may have delivered it, and a replay must carry the same message
// under the same seq), acked, dropped or withdrawn already.
func (s *session) withdraw(id uint64) *Message {
	// Ids and seqs grow along the ring, and what links had is a prefix
	// of it: search back from the newest.
	for i := s.n - 1; i >= s.sent; i-- {
		m := s.at(i)
		if m.out.seq <= s.sentSeq || m.out.id < id {
			return nil
		}
		if m.out.id != id {
			continue
		}
		mask := len(s.ring) - 1
		for j := i; j < s.n-1; j++ {
			next := s.at(j + 1)
			next.out.seq--
			s.ring[(s.head+j)&mask] = next
		}
		s.ring[(s.head+s.n-1)&mask] = nil
		s.n--
		s.outSeq--
		s.queuedBytes -= m.Len()
		if invariants.Enabled {
			s.checkSeqs()
		}
		return m
	}
	return nil
}

// checkSeqs panics unless the ring holds consecutive seqs up to outSeq
// (invariants build).
func (s *session) checkSeqs() {
	for i := range s.n {
		if want := s.outSeq - uint64(s.n-1-i); s.at(i).out.seq != want {
			panic(fmt.Sprintf("msgr: invariant: queued message %d of %d has seq %d, want %d", i, s.n, s.at(i).out.seq, want))
		}
	}
}

// onAck releases every message up to ack into released and returns it.
// Acking a message that never went out is a protocol violation.
func (s *session) onAck(ack uint64, released []*Message) ([]*Message, error) {
	if err := checkAck(ack, s.sentSeq); err != nil {
		return released, err
	}
	for s.n > 0 {
		m := s.at(0)
		if m.out.seq > ack {
			break
		}
		s.ring[s.head] = nil
		s.head = (s.head + 1) & (len(s.ring) - 1)
		s.n--
		if s.sent > 0 {
			s.sent--
		}
		s.queuedBytes -= m.Len()
		released = append(released, m)
	}
	return released, nil
}

// checkAck refuses an ack of messages never sent.
func checkAck(ack, sentSeq uint64) error {
	if ack > sentSeq {
		return wire.Protocolf("peer acked seq %d beyond the last sent %d", ack, sentSeq)
	}
	return nil
}

// checkRewind reports whether a new link whose peer has received up to
// peerInSeq could be attached: reset, the session will start over first.
func (s *session) checkRewind(peerInSeq uint64, reset bool) error {
	if reset {
		return checkAck(peerInSeq, 0)
	}
	return checkAck(peerInSeq, s.sentSeq)
}

// rewind starts a new link: the peer has received up to peerInSeq; what
// it has not is sent again. It returns the released messages and how
// many will be resent.
func (s *session) rewind(peerInSeq uint64, released []*Message) ([]*Message, int, error) {
	released, err := s.onAck(peerInSeq, released)
	if err != nil {
		return released, 0, err
	}
	replay := s.sent
	s.sent = 0
	// The new link has heard no ack from us yet.
	s.ackedSent = 0
	return released, replay, nil
}

// onMessage sequences a received message: deliver reports whether it is
// the next one; an old seq is a duplicate (deliver false, no error), a gap
// means the peer broke the protocol.
func (s *session) onMessage(seq uint64) (deliver bool, err error) {
	switch {
	case seq == s.inSeq+1:
		s.inSeq = seq
		return true, nil
	case seq <= s.inSeq:
		return false, nil
	default:
		return false, wire.Protocolf("message seq %d after %d: a message is missing", seq, s.inSeq)
	}
}

// ackOwed reports whether the peer has not heard of messages we received.
func (s *session) ackOwed() bool { return s.inSeq != s.ackedSent }

// stampAck puts the current ack on an outgoing frame.
func (s *session) stampAck(p *wire.Preamble) {
	p.Ack = s.inSeq
	s.ackedSent = s.inSeq
}

// reset forgets the session (the peer lost it, or a lossy fault): every
// queued message is released and sequence numbers start over.
func (s *session) reset(released []*Message) []*Message {
	for s.n > 0 {
		released = append(released, s.at(0))
		s.ring[s.head] = nil
		s.head = (s.head + 1) & (len(s.ring) - 1)
		s.n--
	}
	*s = session{ring: s.ring, lastID: s.lastID}
	return released
}
