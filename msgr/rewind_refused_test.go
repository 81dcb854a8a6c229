package msgr_test

import (
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
)

// TestBadInSeqKeepsTheSession: a second link of the same peer instance
// whose SESSION_REQUEST claims messages the server never sent (an in_seq
// it cannot rewind to) is refused before the session lets go of the link
// it has: the session goes on over that link. It used to detach the old
// link first and, the rewind failing, leave the session linkless.
func TestBadInSeqKeepsTheSession(t *testing.T) {
	rec, got := osd9Recorder(t)
	_, addr, logs := newLoggedServer(t, rec, nil)

	first := dialRaw(t, addr)
	ready := first.handshake(7)

	// The same instance (cookie and nonce 7) dials again, resuming the
	// session, and claims to have received up to seq 5 of the server's 0.
	second := dialRaw(t, addr)
	second.banner()
	second.c.Write(resumeFrames(t, "osd.9", 7, ready.Cookie, 5)) // the server may close before reading it all
	second.waitClosed(10 * time.Second)

	// The first link still carries the session.
	first.write(encodeFrame(wire.Preamble{Tag: wire.TagMessage, Type: 1, Seq: 1, GrantMsgs: 64, GrantBytes: 1 << 20}, []byte("still here"), nil))
	waitFront(t, got, "still here", "the session's first link stopped delivering after a refused resume", logs)
}

// TestBadInSeqWithoutLinkResetsTheSession: the same claim on a session
// that has no link left cannot be refused for ever (the dialer would ask
// again with the same in_seq, and the two would never talk again): the
// server answers SESSION_RESET, and the dialer's new session is taken as
// a restart (EventRemoteReset) and carries messages.
func TestBadInSeqWithoutLinkResetsTheSession(t *testing.T) {
	rec, got := osd9Recorder(t)
	srv, addr, logs := newLoggedServer(t, rec, nil)

	first := dialRaw(t, addr)
	ready := first.handshake(7)
	sess := onlyConnOf(t, srv) // osd.9's, the server's only session
	first.c.Close()
	msgrtest.Eventually(t, 10*time.Second, "the server to see the link fail", func() bool { return sess.Stats().Faults == 1 })

	second := dialRaw(t, addr)
	second.logs = logs
	second.banner()
	second.write(resumeFrames(t, "osd.9", 7, ready.Cookie, 5))
	second.expect(wire.TagHello, nil)
	second.expect(wire.TagAuthDone, nil)
	var reset msgrpb.SessionReset
	second.expect(wire.TagSessionReset, &reset)
	if reset.Fatal || reset.Closed {
		t.Fatalf("SESSION_RESET %v, want a plain reset", &reset)
	}

	// As a dialer does after SESSION_RESET: a new cookie, no peer cookie.
	second.write(hsFrame(t, wire.TagSessionReq, &msgrpb.SessionRequest{
		Cookie: 70, WindowMsgs: 64, WindowBytes: 1 << 20, GrantMsgs: 64, GrantBytes: 1 << 20,
	}))
	var ready2 msgrpb.SessionReady
	second.expect(wire.TagSessionReady, &ready2)
	if !ready2.ResetOld || ready2.InSeq != 0 {
		t.Errorf("SESSION_READY reset_old=%v in_seq=%d, want a reset session", ready2.ResetOld, ready2.InSeq)
	}
	if ev := rec.WaitEvent(t, msgr.EventRemoteReset, 10*time.Second); ev.Conn != sess {
		t.Errorf("EventRemoteReset on %v, want the session %v", ev.Conn, sess)
	}
	second.write(encodeFrame(wire.Preamble{Tag: wire.TagMessage, Type: 1, Seq: 1, GrantMsgs: 64, GrantBytes: 1 << 20}, []byte("new session"), nil))
	waitFront(t, got, "new session", "the new session delivered nothing", logs)
}

// osd9Recorder is a recorder that hands osd.9's messages' fronts to got.
func osd9Recorder(t *testing.T) (*msgrtest.Recorder, <-chan string) {
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
	return rec, got
}

// waitFront waits for the next front on got, which must be want.
func waitFront(t *testing.T, got <-chan string, want, failure string, logs *syncBuffer) {
	t.Helper()
	select {
	case front := <-got:
		if front != want {
			t.Fatalf("delivered %q, want %q", front, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s; server log:\n%s", failure, logs.String())
	}
}
