package msgr

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/ospreystore/osprey/msgr/wire"
)

// HandshakeReason classifies why a handshake failed, for the counters in
// Stats.HandshakeFailures: a small fixed set, so that a monitoring system
// can label by it (internal/metrics).
type HandshakeReason uint8

const (
	HandshakeOther     HandshakeReason = iota // anything not below (a reset, our own name, ...)
	HandshakeAuth                             // authentication refused, either way (ErrAuth)
	HandshakeTimeout                          // HandshakeTimeout ran out
	HandshakeClosed                           // the link closed under the handshake (EOF, reset)
	HandshakeMalformed                        // wire: structurally invalid
	HandshakeCRC                              // wire: checksum mismatch
	HandshakeTooLarge                         // wire: a size above the limits
	HandshakeBanner                           // wire: bad magic, version or features
	HandshakeProtocol                         // wire: a valid frame at the wrong time
	NumHandshakeReasons
)

var handshakeReasonNames = [NumHandshakeReasons]string{
	"other", "auth", "timeout", "closed", "malformed", "crc", "too_large", "banner", "protocol",
}

func (r HandshakeReason) String() string {
	if r < NumHandshakeReasons {
		return handshakeReasonNames[r]
	}
	return "other"
}

// handshakeReason classifies a handshake's error.
func handshakeReason(err error) HandshakeReason {
	var we *wire.Error
	switch {
	case errors.Is(err, ErrAuth):
		return HandshakeAuth
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return HandshakeTimeout
	case errors.As(err, &we):
		switch we.Kind {
		case wire.ErrKindMalformed:
			return HandshakeMalformed
		case wire.ErrKindCRC:
			return HandshakeCRC
		case wire.ErrKindTooLarge:
			return HandshakeTooLarge
		case wire.ErrKindShort:
			return HandshakeClosed
		case wire.ErrKindBanner:
			return HandshakeBanner
		case wire.ErrKindProtocol:
			return HandshakeProtocol
		}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return HandshakeClosed
	}
	return HandshakeOther
}

// countHandshakeFailure counts a failed handshake (dialed or accepted);
// errWait, the losing side of a simultaneous connect, is no failure, nor
// errAttached, a dial that the peer's made needless, nor ErrClosedByPeer,
// a dial told that the peer closed the session (its CLOSE lost).
func (m *Messenger) countHandshakeFailure(err error) {
	if err == nil || errors.Is(err, errWait) || errors.Is(err, errAttached) || errors.Is(err, ErrClosedByPeer) {
		return
	}
	m.hsFailures[handshakeReason(err)].Add(1)
}

// TransportStats are the counters of a messenger's sessions over one
// transport: those open now and, for the cumulative counters, those closed
// before (so that they never go down). The window fields are those of the
// open sessions, summed.
type TransportStats struct {
	Sessions int
	ConnStats
}

// TransportStats sums the sessions' counters by transport scheme ("tcp",
// "rdma+verbs", ...): for a scrape, not for a hot path. It holds the
// registry's lock only to copy the closed sessions' totals and the list of
// open ones, and takes each session's lock after: a session's lock can be
// held for long (an RDMA link draining its sends as it closes), and a
// scrape waiting on it must not stall Connect, accepts and closes, which
// need the registry. A session that closes meanwhile is counted once, as
// open: the copied totals predate its retirement.
func (m *Messenger) TransportStats() map[string]TransportStats {
	m.mu.Lock()
	out := make(map[string]TransportStats, len(m.retired)+1)
	for scheme, st := range m.retired {
		out[scheme] = TransportStats{ConnStats: st}
	}
	open := m.openLocked()
	m.mu.Unlock()
	for _, c := range open {
		ts := out[c.scheme]
		ts.Sessions++
		st := c.Stats()
		ts.addCounters(&st)
		ts.SendCredits += st.SendCredits
		ts.SendBytesCredit += st.SendBytesCredit
		ts.RecvWindowMsgs += st.RecvWindowMsgs
		ts.QueuedMsgs += st.QueuedMsgs
		ts.QueuedBytes += st.QueuedBytes
		out[c.scheme] = ts
	}
	return out
}

// retireLocked keeps the cumulative counters of c, which leaves the
// registry, in its transport's totals. REQUIRES: m.mu held.
func (m *Messenger) retireLocked(c *Conn) {
	if m.retired == nil {
		m.retired = map[string]ConnStats{}
	}
	st := c.Stats()
	total := m.retired[c.scheme]
	total.addCounters(&st)
	m.retired[c.scheme] = total
}

// addCounters adds o's cumulative counters (not its windows or queues).
func (s *ConnStats) addCounters(o *ConnStats) {
	s.MsgsSent += o.MsgsSent
	s.MsgsReceived += o.MsgsReceived
	s.BytesSent += o.BytesSent
	s.BytesReceived += o.BytesReceived
	s.Faults += o.Faults
	s.Reconnects += o.Reconnects
	s.Replayed += o.Replayed
	s.Withdrawn += o.Withdrawn
	s.DuplicatesDropped += o.DuplicatesDropped
	s.CreditStalls += o.CreditStalls
	s.GrantsSent += o.GrantsSent
	s.GrantsReceived += o.GrantsReceived
	s.WaitsSent += o.WaitsSent
	s.WaitsReceived += o.WaitsReceived
	s.SealFailures += o.SealFailures
	s.SourceCRCMismatches += o.SourceCRCMismatches
}

// Transports are the messenger's transports (Options.Transports), for
// their own counters (the RDMA transport's registered memory).
func (m *Messenger) Transports() []wire.Transport { return m.opts.Transports }
