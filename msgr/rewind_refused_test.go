package msgr_test

import (
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestBadInSeqKeepsTheSession: a second link of the same peer instance
// whose SESSION_REQUEST claims messages the server never sent (an in_seq
// it cannot rewind to) is refused before the session lets go of the link
// it has: the session goes on over that link. It used to detach the old
// link first and, the rewind failing, leave the session linkless.
func TestBadInSeqKeepsTheSession(t *testing.T) {
	rec := msgrtest.NewRecorder(t)
	got := make(chan string, 16)
	rec.OnMsg = func(m *msgr.Message) bool {
		if m.Conn().Peer() == "osd.9" {
			got <- string(m.Front)
			m.Release()
			return true
		}
		return false
	}
	_, addr, logs := newLoggedServer(t, rec, nil)

	first := dialRaw(t, addr)
	ready := first.handshake(7)

	// The same instance (cookie and nonce 7) dials again, resuming the
	// session, and claims to have received up to seq 5 of the server's 0.
	second := dialRaw(t, addr)
	bn := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}
	if _, err := wire.ExchangeBanner(second.c, bn); err != nil {
		t.Fatal(err)
	}
	second.c.Write(resumeFrames(t, "osd.9", 7, ready.Cookie, 5)) // the server may close before reading it all
	second.waitClosed(10 * time.Second)

	// The first link still carries the session.
	first.write(encodeFrame(wire.Preamble{Tag: wire.TagMessage, Type: 1, Seq: 1, GrantMsgs: 64, GrantBytes: 1 << 20}, []byte("still here"), nil))
	select {
	case front := <-got:
		if front != "still here" {
			t.Fatalf("delivered %q", front)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the session's first link stopped delivering after a refused resume; server log:\n%s", logs.String())
	}
}
