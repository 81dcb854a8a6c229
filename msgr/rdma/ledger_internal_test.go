//go:build rdma && invariants

package rdma

import (
	"sync"
	"testing"

	"github.com/ospreystore/osprey/msgr/wire"
)

// TestGrantCheckWhileControlFramesArrive: the invariants build's grant
// check must not report a receive missing while the link's control frames
// come and go. A control frame's receive is posted again before the frame
// is counted (link.control), so at every instant the receives left for
// the session's frames are the window; a check that read its counts one
// at a time could see the count without the repost and panic on a grant
// that was right (CI saw "granted the peer 26 frames ..., but only 24
// receives were posted" on a rendezvous-heavy run).
func TestGrantCheckWhileControlFramesArrive(t *testing.T) {
	const window = 24
	l := &link{id: 1, nrecv: window, ctlRecv: ctlRecvs}
	for range l.recvs() {
		l.ledgerPost()
	}
	// A handshake frame holds its receive until it is posted again.
	l.ledgerRead(wire.TagHello)
	wantPanic(t, "only 23 receives", func() { l.checkGrant(&wire.Preamble{Tag: wire.TagAck, GrantMsgs: window}) })
	l.ledgerPost()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for range 64 {
				l.ledgerPost() // link.control: the receive goes back first,
				l.ledgerRead(wire.TagRdvDone)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	p := &wire.Preamble{Tag: wire.TagMessage, GrantMsgs: window}
	for range 2_000_000 {
		l.checkGrant(p)
	}
}

// TestLedgerSessionControlSlots: under CONTROL_SLOTS the peer's KEEPALIVE,
// KEEPALIVE_ACK and CLOSE land in the sessCtlRecvs receives and take no
// credit, so after any number of them the receives left for the session
// are still the window; without the feature each is a credited frame,
// whose reposted receive backs one more credit. A secure session's come
// sealed, told by the link that opens them (OpenedControl), and its
// grants too (SealedGrant): the ledger counts them as it counts frames in
// clear.
func TestLedgerSessionControlSlots(t *testing.T) {
	const window, frames = 8, 6
	for _, sealed := range []bool{false, true} {
		for _, agreed := range []bool{true, false} {
			l := &link{id: 1, nrecv: window}
			if agreed {
				l.features = wire.FeatureControlSlots
			}
			for range l.recvs() {
				l.ledgerPost()
			}
			check := l.checkGrant
			sealedCheck := func(p *wire.Preamble) { l.SealedGrant(*p) }
			for i := range frames {
				l.ledgerPost() // posted again before it is counted (frameFrom)
				tag := []wire.Tag{wire.TagKeepalive, wire.TagKeepaliveAck}[i%2]
				if sealed {
					l.ledgerSlotted(wire.TagSealed) // frameFrom sees SEALED
					l.OpenedControl(tag)
					check = sealedCheck
				} else {
					l.ledgerSlotted(tag)
				}
			}
			beyond := &wire.Preamble{Tag: wire.TagAck, GrantMsgs: window + frames}
			if agreed {
				check(&wire.Preamble{Tag: wire.TagAck, GrantMsgs: window})
				wantPanic(t, "only 8 receives", func() { check(beyond) })
			} else {
				check(beyond)
			}
		}
	}
}
