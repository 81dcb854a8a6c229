package msgr_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/logbuf"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
	"google.golang.org/protobuf/proto"
)

// syncBuffer collects log output from many goroutines.
type syncBuffer = logbuf.Buffer

// encodeFrame encodes one frame as a stream link would.
func encodeFrame(p wire.Preamble, front, data []byte) []byte {
	p.FrontLen, p.DataLen = uint32(len(front)), uint32(len(data))
	b := make([]byte, wire.PreambleSize, p.WireSize())
	p.Put(b)
	if p.HasSegments() {
		b = append(b, front...)
		b = append(b, data...)
		var epi [wire.EpilogueSize]byte
		wire.PutEpilogue(epi[:], wire.CRC(front), wire.CRC(data))
		b = append(b, epi[:]...)
	}
	return b
}

func hsFrame(t testing.TB, tag wire.Tag, pb proto.Message) []byte {
	front, err := proto.Marshal(pb)
	if err != nil {
		t.Fatal(err)
	}
	return encodeFrame(wire.Preamble{Tag: tag}, front, nil)
}

// rawPeer speaks the protocol by hand, to send what msgr never would.
type rawPeer struct {
	t    testing.TB
	c    net.Conn
	link *wire.StreamLink // set by banner
	logs *syncBuffer      // the server's log, quoted in expect's failures when set
}

func dialRaw(t testing.TB, addr string) *rawPeer {
	a, err := msgr.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", a.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawPeer{t: t, c: c}
}

func (r *rawPeer) write(b []byte) {
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatalf("raw write: %v", err)
	}
}

// banner exchanges banners as a dialer does and sets up r.link, from
// which expect reads the server's handshake frames. The limits only bound
// what this peer reads, so they are generous.
func (r *rawPeer) banner() {
	bn := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}
	features, err := wire.ExchangeBanner(r.c, bn)
	if err != nil {
		r.t.Fatal(err)
	}
	lim := wire.Limits{MaxFront: 16 << 20, MaxData: 64 << 20}
	r.link = wire.NewStreamLink(r.c, features, wire.LinkOptions{Banner: bn, Limits: lim})
}

// expect reads the server's next handshake frame, which must be tagged
// want, and decodes its front into pb unless pb is nil.
func (r *rawPeer) expect(want wire.Tag, pb proto.Message) {
	r.t.Helper()
	var f wire.Frame
	if err := r.link.ReadFrame(&f); err != nil {
		r.t.Fatalf("reading %v: %v%s", want, err, r.serverLog())
	}
	defer f.Release()
	if f.Tag != want {
		r.t.Fatalf("got %v, want %v%s", f.Tag, want, r.serverLog())
	}
	if pb != nil {
		if err := proto.Unmarshal(f.Front, pb); err != nil {
			r.t.Fatal(err)
		}
	}
}

// serverLog is the server's log as a failure's tail, read at the failure
// so that it says what the server made of the exchange; "" without logs.
func (r *rawPeer) serverLog() string {
	if r.logs == nil {
		return ""
	}
	return "; server log:\n" + r.logs.String()
}

// handshake does the banner and handshake as osd.9 and returns SESSION_READY.
// Each call is a new instance of osd.9 (cookie and nonce from id), so the
// server starts a fresh session for it.
func (r *rawPeer) handshake(id uint64) *msgrpb.SessionReady {
	r.banner()
	r.write(handshakeFrames(r.t, "osd.9", id))
	r.expect(wire.TagHello, nil)
	r.expect(wire.TagAuthDone, nil)
	var ready msgrpb.SessionReady
	r.expect(wire.TagSessionReady, &ready)
	return &ready
}

// handshakeFrames is a dialer's side of the handshake as peer name, with
// cookie and nonce id: HELLO, AUTH_REQUEST and SESSION_REQUEST.
func handshakeFrames(t testing.TB, name string, id uint64) []byte {
	return resumeFrames(t, name, id, 0, 0)
}

// resumeFrames is handshakeFrames resuming the acceptor's session
// peerCookie, with the peer's in_seq.
func resumeFrames(t testing.TB, name string, id, peerCookie, inSeq uint64) []byte {
	var b []byte
	b = append(b, hsFrame(t, wire.TagHello, &msgrpb.Hello{EntityName: name, InstanceNonce: id})...)
	b = append(b, hsFrame(t, wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: []string{"none"}})...)
	return append(b, hsFrame(t, wire.TagSessionReq, &msgrpb.SessionRequest{
		Cookie: id, PeerCookie: peerCookie, InSeq: inSeq, WindowMsgs: 64, WindowBytes: 1 << 20, GrantMsgs: 64, GrantBytes: 1 << 20,
	})...)
}

// waitClosed reads until the server closes the connection.
func (r *rawPeer) waitClosed(timeout time.Duration) {
	r.c.SetReadDeadline(time.Now().Add(timeout))
	_, err := io.Copy(io.Discard, r.c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		r.t.Fatalf("server did not close the connection within %v", timeout)
	}
}

func newLoggedServer(t *testing.T, rec msgr.Dispatcher, tweak func(*msgr.Options)) (*msgr.Messenger, string, *syncBuffer) {
	logs := &syncBuffer{}
	o := msgr.Options{Name: "osd.0", Dispatcher: rec, Logger: slog.New(slog.NewTextHandler(logs, nil)), Transports: msgr.TCPOnly}
	if tweak != nil {
		tweak(&o)
	}
	srv, err := msgr.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	addr, err := srv.Listen(context.Background(), "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return srv, addr, logs
}

// TestBadInputClosesOnlyThatConnection feeds a live server what a broken
// or hostile peer might send. Each case must close that one connection,
// log why, and leave a well-behaved session on the same server working.
func TestBadInputClosesOnlyThatConnection(t *testing.T) {
	rec := msgrtest.NewRecorder(t)
	// What the hostile peer gets through before it breaks a rule is held,
	// so its credits are not returned and an overrun is an overrun.
	var hostileMu sync.Mutex
	var hostile []*msgr.Message
	rec.OnMsg = func(m *msgr.Message) bool {
		if m.Conn().Peer() != "osd.9" {
			return false
		}
		hostileMu.Lock()
		hostile = append(hostile, m)
		hostileMu.Unlock()
		return true
	}
	defer func() {
		hostileMu.Lock()
		defer hostileMu.Unlock()
		for _, m := range hostile {
			m.Release()
		}
	}()
	srv, addr, logs := newLoggedServer(t, rec, nil)

	goodCli := msgrtest.Env{Scheme: "tcp"}.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), nil)
	good, err := goodCli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	sendGood := func() {
		t.Helper()
		for range 10 {
			if err := good.Send(context.Background(), msgr.NewMessage(1, msgrtest.Payload(1, uint64(sent), nil), nil)); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		msgrtest.Eventually(t, 10*time.Second, "good traffic", func() bool { return rec.Next(1) == uint64(sent) })
	}
	sendGood()

	msg := func(seq uint64, front, data []byte) []byte {
		return encodeFrame(wire.Preamble{Tag: wire.TagMessage, Type: 1, Seq: seq, GrantMsgs: 64, GrantBytes: 1 << 20}, front, data)
	}
	corrupt := func(b []byte, at int) []byte { b[at] ^= 0x40; return b }
	// Lines a peer can make us repeat are rate-limited, one per kind of
	// error per 10 s: logged is "" where an earlier case of the same kind
	// took the line.
	cases := []struct {
		name      string
		handshake bool
		input     func() []byte
		logged    string
	}{
		{"bad magic", false, func() []byte { return []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n-----") }, ""},
		{"garbage after banner", false, func() []byte {
			var b [wire.BannerSize]byte
			(&wire.Banner{Version: wire.Version}).Put(b[:])
			return append(b[:], bytes.Repeat([]byte{0xAB}, 200)...)
		}, ""},
		{"preamble crc", true, func() []byte { return corrupt(msg(1, []byte("f"), nil), 20) }, "crc mismatch"},
		{"data crc", true, func() []byte {
			b := msg(1, []byte("front"), []byte("data"))
			return corrupt(b, wire.PreambleSize+6)
		}, ""},
		{"oversized front", true, func() []byte {
			p := wire.Preamble{Tag: wire.TagMessage, Seq: 1}
			p.FrontLen = 1 << 30
			b := make([]byte, wire.PreambleSize)
			p.Put(b)
			return b
		}, "exceeds the limit"},
		{"unknown tag", true, func() []byte { return encodeFrame(wire.Preamble{Tag: 200}, nil, nil) }, "unknown frame tag"},
		{"seq gap", true, func() []byte { return append(msg(1, nil, nil), msg(3, nil, nil)...) }, "a message is missing"},
		{"handshake frame after handshake", true, func() []byte {
			return hsFrame(t, wire.TagHello, &msgrpb.Hello{EntityName: "osd.9"})
		}, ""},
		{"ack of never sent", true, func() []byte {
			return encodeFrame(wire.Preamble{Tag: wire.TagAck, Ack: 5, GrantMsgs: 64, GrantBytes: 1 << 20}, nil, nil)
		}, ""},
		{"credit overrun", true, func() []byte {
			var b []byte
			for i := range 2000 {
				b = append(b, msg(uint64(i+1), []byte("x"), nil)...)
			}
			return b
		}, ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			if tc.handshake {
				r.handshake(uint64(i + 1))
			}
			// The server may close before reading it all.
			r.c.Write(tc.input())
			r.waitClosed(10 * time.Second)
			if tc.logged != "" {
				msgrtest.Eventually(t, 5*time.Second, "log line "+tc.logged, func() bool {
					return strings.Contains(logs.String(), tc.logged)
				})
			}
			sendGood()
		})
	}
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "closing connection on protocol error"); n != 1 {
		t.Fatalf("%d protocol error lines for 4 offending peers, want 1 (rate-limited):\n%s", n, logs.String())
	}
	_ = srv
}

// TestIdleTimeout: a peer that completes the handshake and then says
// nothing, not even keepalives, is disconnected after IdleTimeout.
func TestIdleTimeout(t *testing.T) {
	_, addr, logs := newLoggedServer(t, msgrtest.NewRecorder(t), func(o *msgr.Options) {
		o.Keepalive, o.IdleTimeout = 20*time.Millisecond, 150*time.Millisecond
	})
	r := dialRaw(t, addr)
	r.handshake(1)
	start := time.Now()
	r.waitClosed(10 * time.Second)
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("closed after %v, before the idle timeout", el)
	}
	_ = logs
}

// TestMessageLargerThanByteWindow: one message bigger than the receiver's
// whole byte window still goes through, once everything before it was
// consumed.
func TestMessageLargerThanByteWindow(t *testing.T) {
	env := msgrtest.Env{Scheme: "tcp", Host: "127.0.0.1:0"}
	rec := msgrtest.NewRecorder(t)
	srv := env.NewMessenger(t, "osd.0", rec, func(o *msgr.Options) { o.RecvWindowBytes = 256 << 10 })
	addr := env.Listen(t, srv)
	cli := env.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), nil)
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{100, 3 << 20, 10, 1 << 20, 5} {
		data := bytes.Repeat([]byte{byte(i)}, size)
		if err := c.Send(context.Background(), msgr.NewMessage(1, msgrtest.Payload(1, uint64(i), data), data)); err != nil {
			t.Fatal(err)
		}
	}
	msgrtest.Eventually(t, 20*time.Second, "all delivered", func() bool { return rec.Next(1) == 5 })
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
}
