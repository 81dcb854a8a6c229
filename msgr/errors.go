package msgr

import (
	"errors"
	"fmt"

	"github.com/ospreystore/osprey/msgr/wire"
)

// Errors for errors.Is. Wire-level errors (malformed frames, CRC
// mismatches, oversized segments) are *wire.Error; see wire.ErrMalformed
// and friends.
var (
	// ErrClosed: the Conn or Messenger was closed.
	ErrClosed = errors.New("msgr: closed")
	// ErrWouldBlock: TrySend found the send queue full.
	ErrWouldBlock = errors.New("msgr: send queue full")
	// ErrMessageTooLarge: the message exceeds MaxMessageSize.
	ErrMessageTooLarge = errors.New("msgr: message too large")
	// ErrNoTransport: the address names a scheme with no transport in
	// Options.Transports, or one this binary was built without.
	ErrNoTransport = errors.New("msgr: no such transport")
	// ErrRemoteReset: the peer lost the session (it restarted, or closed it).
	ErrRemoteReset = errors.New("msgr: session reset by peer")
	// ErrClosedByPeer: the peer closed the session deliberately.
	ErrClosedByPeer = errors.New("msgr: session closed by peer")
	// ErrInjectedFault: a link failure made by FaultInjection.
	ErrInjectedFault = errors.New("msgr: injected fault")
	// ErrIdleTimeout: nothing arrived on the link for IdleTimeout.
	ErrIdleTimeout = errors.New("msgr: idle timeout")
	// ErrSessionExpired: a lossless session waited StandbyTimeout for a
	// peer that did not come back, and was closed.
	ErrSessionExpired = errors.New("msgr: session expired waiting for its peer")
	// ErrRefused: the peer refused the session for good (a *RefusedError
	// for its session policy, ErrAuth for authentication); redialing
	// would be refused again, so the Conn closes and is not retried.
	ErrRefused = errors.New("msgr: session refused by peer")
	// ErrWrongPeer: a dial reached a messenger of another name than the
	// session's peer (the address now belongs to another entity).
	ErrWrongPeer = errors.New("msgr: the address answered as another entity")
)

// RefusedError is a session the peer refused for good at the session
// step, with the peer's reason (a policy mismatch: a lossless dialer that
// the acceptor serves as a lossy client, or the reverse). It matches
// ErrRefused.
type RefusedError struct {
	Peer   EntityName
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("msgr: %s refused the session: %s", e.Peer, e.Reason)
}

func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Re-exported so users need not import msgr/wire to classify errors. A
// stream cut short inside a frame or banner is ErrShort and also
// io.ErrUnexpectedEOF.
var (
	ErrMalformed = wire.ErrMalformed
	ErrCRC       = wire.ErrCRC
	ErrTooLarge  = wire.ErrTooLarge
	ErrShort     = wire.ErrShort
	ErrBanner    = wire.ErrBanner
	ErrProtocol  = wire.ErrProtocol
)

// ConnError wraps a failure of one connection with the peer it concerns.
type ConnError struct {
	Peer EntityName
	Addr string
	Op   string // "dial", "handshake", "read", "write", ...
	Err  error
}

func (e *ConnError) Error() string {
	if e.Peer == "" { // a dial to an address whose entity we do not know yet (a mon)
		return fmt.Sprintf("msgr: %s %s: %v", e.Op, e.Addr, e.Err)
	}
	return fmt.Sprintf("msgr: %s %s (%s): %v", e.Op, e.Peer, e.Addr, e.Err)
}

func (e *ConnError) Unwrap() error { return e.Err }
