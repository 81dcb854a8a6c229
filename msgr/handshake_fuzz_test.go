package msgr

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
	"google.golang.org/protobuf/proto"
)

// fuzzFrame encodes one frame as a stream link puts it on the wire.
func fuzzFrame(p wire.Preamble, front, data []byte) []byte {
	p.FrontLen, p.DataLen = uint32(len(front)), uint32(len(data))
	b := make([]byte, wire.PreambleSize, p.WireSize())
	p.Put(b)
	if !p.HasSegments() {
		return b
	}
	b = append(b, front...)
	b = append(b, data...)
	var epi [wire.EpilogueSize]byte
	wire.PutEpilogue(epi[:], wire.CRC(front), wire.CRC(data))
	return append(b, epi[:]...)
}

func fuzzHS(tag wire.Tag, pb proto.Message) []byte {
	front, err := proto.Marshal(pb)
	if err != nil {
		panic(err)
	}
	return fuzzFrame(wire.Preamble{Tag: tag}, front, nil)
}

func concat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// handshakeSeeds are valid dialer sides of a handshake, with and without
// traffic after it, and the usual ways to get one wrong.
func handshakeSeeds() [][]byte {
	hello := fuzzHS(wire.TagHello, &msgrpb.Hello{EntityName: "osd.1", InstanceNonce: 7, PeerAddr: "pipe"})
	auth := fuzzHS(wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: []string{"none"}})
	req := func(mod func(*msgrpb.SessionRequest)) []byte {
		r := &msgrpb.SessionRequest{Cookie: 11, WindowMsgs: 8, WindowBytes: 1 << 16,
			GrantMsgs: 8, GrantBytes: 1 << 16, MaxMessage: 1 << 20}
		if mod != nil {
			mod(r)
		}
		return fuzzHS(wire.TagSessionReq, r)
	}
	msg := func(seq, ack uint64, front, data string) []byte {
		return fuzzFrame(wire.Preamble{Tag: wire.TagMessage, Type: 1, Seq: seq, Ack: ack, GrantMsgs: 8, GrantBytes: 1 << 16},
			[]byte(front), []byte(data))
	}
	ctl := func(tag wire.Tag, seq, ack uint64) []byte {
		return fuzzFrame(wire.Preamble{Tag: tag, Seq: seq, Ack: ack, GrantMsgs: 8, GrantBytes: 1 << 16}, nil, nil)
	}
	good := concat(hello, auth, req(nil))
	return [][]byte{
		nil,
		hello,
		concat(hello, auth),
		good,
		concat(good, msg(1, 0, "op", "payload"), msg(2, 0, "", ""), ctl(wire.TagAck, 0, 2), ctl(wire.TagKeepalive, 99, 2)),
		concat(good, msg(1, 0, "a", "b"), ctl(wire.TagClose, 0, 0)),
		// Wrong after the handshake: a gap, an ack of nothing sent, more
		// frames than the window, a handshake frame.
		concat(good, msg(2, 0, "x", "")),
		concat(good, msg(1, 5, "x", "")),
		concat(good, msg(1, 0, "", ""), msg(2, 0, "", ""), msg(3, 0, "", ""), msg(4, 0, "", ""), msg(5, 0, "", ""),
			msg(6, 0, "", ""), msg(7, 0, "", ""), msg(8, 0, "", ""), msg(9, 0, "", "")),
		concat(good, hello),
		// An unknown session: SESSION_RESET, then the dialer asks again.
		concat(hello, auth, req(func(r *msgrpb.SessionRequest) { r.PeerCookie = 12345 }), req(nil), msg(1, 0, "", "")),
		// A session the acceptor closed (fuzzClosedCookie): SESSION_RESET
		// closed, then a dialer that predates closed asks again.
		concat(hello, auth, req(func(r *msgrpb.SessionRequest) { r.PeerCookie = fuzzClosedCookie }), req(nil), msg(1, 0, "", "")),
		concat(hello, auth, req(func(r *msgrpb.SessionRequest) { r.PeerCookie = fuzzClosedCookie })),
		// A new session naming one the dialer closed (fuzzAccept's
		// session with osd.2), then a resumption of that one.
		concat(fuzzHS(wire.TagHello, &msgrpb.Hello{EntityName: "osd.2", InstanceNonce: 7}), auth,
			req(func(r *msgrpb.SessionRequest) { r.ClosedCookie = fuzzOpenPeerCookie }), msg(1, 0, "", "")),
		concat(fuzzHS(wire.TagHello, &msgrpb.Hello{EntityName: "osd.2", InstanceNonce: 7}), auth,
			req(func(r *msgrpb.SessionRequest) { r.Cookie = fuzzOpenPeerCookie }), msg(1, 0, "", "")),
		// Wrong in the handshake.
		concat(fuzzHS(wire.TagHello, &msgrpb.Hello{EntityName: "not a name"}), auth, req(nil)),
		concat(hello, fuzzHS(wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: []string{"kerberos"}}), req(nil)),
		concat(hello, auth, req(func(r *msgrpb.SessionRequest) { r.Lossy = true })),
		concat(hello, auth, req(func(r *msgrpb.SessionRequest) { r.WindowMsgs, r.GrantMsgs = 1, 0 })),
		concat(hello, auth, req(func(r *msgrpb.SessionRequest) { r.GrantBytes, r.WindowBytes = 0, 0 }), msg(1, 0, "f", "d")),
		concat(auth, hello, req(nil)),
		concat(hello, req(nil)),
		concat(hello, auth, fuzzFrame(wire.Preamble{Tag: wire.TagSessionReq}, []byte{0xff, 0xff, 0xff}, nil)),
		concat(hello, auth, ctl(wire.TagAck, 0, 0)),
	}
}

// FuzzHandshake runs fuzzAccept against an acceptor without auth.
func FuzzHandshake(f *testing.F) {
	for _, s := range handshakeSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) { fuzzAccept(t, in, nil) })
}

// FuzzHandshakeAuth is FuzzHandshake against an acceptor that requires
// the tls13 method: arbitrary AUTH_REQUEST and AUTH_MORE payloads reach
// crypto/tls through the flights carrier.
func FuzzHandshakeAuth(f *testing.F) {
	ca, err := auth.NewCA("fuzz")
	if err != nil {
		f.Fatal(err)
	}
	k, err := ca.Issue("osd.0")
	if err != nil {
		f.Fatal(err)
	}
	hello := fuzzHS(wire.TagHello, &msgrpb.Hello{EntityName: "osd.1", InstanceNonce: 7})
	f.Add(concat(hello, fuzzHS(wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: []string{"tls13"}, Payload: []byte("\x16\x03\x01\x00\x05hello")})))
	f.Add(concat(hello, fuzzHS(wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: []string{"tls13"}}), fuzzHS(wire.TagAuthMore, &msgrpb.AuthMore{Payload: []byte{22, 3, 3}})))
	f.Add(concat(hello, fuzzHS(wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: []string{"none"}})))
	f.Fuzz(func(t *testing.T, in []byte) { fuzzAccept(t, in, &AuthOptions{Keyring: k}) })
}

// fuzzClosedCookie names a session the fuzzed acceptor closed with osd.1
// (a tombstone), so that its answer "closed" is fuzzed too; it has a
// session in standby with osd.2, whose cookie there is
// fuzzOpenPeerCookie, so that a dialer naming it closed is fuzzed too,
// and whose cookie here is fuzzOpenCookie, so that a dialer resuming it
// by name (SESSION_REQUEST.peer_cookie) is.
const (
	fuzzClosedCookie   = 777
	fuzzOpenPeerCookie = 5
	fuzzOpenCookie     = 6
)

// fuzzAccept drives the acceptor's side of the handshake, and the link it
// starts, with arbitrary bytes from a dialer: accept must return (an error
// or nil), never panic, and the messenger must shut down cleanly.
func fuzzAccept(t *testing.T, in []byte, a *AuthOptions) {
	m := newFuzzAcceptor(t, a)
	cli, srv := newHalfPipes()
	link := wire.NewStreamLink(srv, wire.KnownFeatures, m.linkOptions(nil))
	acceptErr := make(chan error, 1)
	go func() { acceptErr <- m.accept(link, m.opts.RecvWindowMsgs, "tcp") }()
	// Whatever the acceptor writes is read and dropped, until it closes
	// its end; the input ends in EOF, so every byte of it is read.
	drained := make(chan struct{})
	go func() {
		io.Copy(io.Discard, cli)
		close(drained)
	}()
	written := make(chan struct{})
	go func() {
		cli.Write(in) // fails once the acceptor closes its end
		cli.CloseWrite()
		close(written)
	}()

	if err := <-acceptErr; err != nil {
		link.Close() // as acceptLoop does
	}
	<-written
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	<-drained
	for c := range m.Conns() {
		t.Fatalf("conn with %s still registered after shutdown", c.Peer())
	}
}

// newFuzzAcceptor is the acceptor osd.0 of the handshake fuzz targets,
// with the tombstone and the standby session that fuzzClosedCookie and
// fuzzOpenCookie name.
func newFuzzAcceptor(t testing.TB, a *AuthOptions) *Messenger {
	m, err := New(Options{
		Name:             "osd.0",
		Dispatcher:       DispatchFunc(func(m *Message) { m.Release() }),
		Logger:           slog.New(slog.DiscardHandler),
		RecvWindowMsgs:   8,
		RecvWindowBytes:  1 << 16,
		MaxMessageSize:   1 << 20,
		HandshakeTimeout: 10 * time.Second,
		Auth:             a,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	m.tombs.add(fuzzClosedCookie, "osd.1")
	c := m.newConn(LosslessPeer, "", "osd.2", 8)
	c.cookie, c.peerCookie, c.peerNonce, c.state = fuzzOpenCookie, fuzzOpenPeerCookie, 7, stateStandby
	m.byPeer["osd.2"] = c
	m.mu.Unlock()
	return m
}

// TestHandshakeSeedsAccepted checks the valid seed really gets through
// accept, so the fuzzer starts from sessions that reach the link.
func TestHandshakeSeedsAccepted(t *testing.T) {
	rec := make(chan *Message, 16)
	m, err := New(Options{
		Name:           "osd.0",
		Dispatcher:     DispatchFunc(func(m *Message) { rec <- m }),
		Logger:         slog.New(slog.DiscardHandler),
		RecvWindowMsgs: 8, RecvWindowBytes: 1 << 16, MaxMessageSize: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) }) // after rawAccept's
	replies := rawAccept(t, m, handshakeSeeds()[4])        // handshake, two messages, ack, keepalive
	for _, want := range []wire.Tag{wire.TagHello, wire.TagAuthDone, wire.TagSessionReady} {
		if got := <-replies; got.tag != want {
			t.Fatalf("acceptor sent %v, want %v", got.tag, want)
		}
	}
	for _, want := range []string{"payload", ""} {
		msg := <-rec
		if string(msg.Data) != want {
			t.Fatalf("dispatched %q, want %q", msg.Data, want)
		}
		msg.Release()
	}
}

type rawReply struct {
	tag   wire.Tag
	front []byte
}

// rawAccept runs m's accept on a pipe whose dialer end writes in, and
// returns the frames the acceptor writes once accept has returned. The
// dialer end stays open until the test ends.
func rawAccept(t *testing.T, m *Messenger, in []byte) <-chan rawReply {
	t.Helper()
	cli, srv := net.Pipe()
	t.Cleanup(func() { cli.Close() })
	link := wire.NewStreamLink(srv, wire.KnownFeatures, m.linkOptions(nil))
	acceptErr := make(chan error, 1)
	go func() { acceptErr <- m.accept(link, m.opts.RecvWindowMsgs, "tcp") }()
	replies := make(chan rawReply, 16)
	go func() {
		r := wire.NewReaderLink(cli, wire.KnownFeatures, wire.Limits{MaxFront: 1 << 16, MaxData: 1 << 20})
		for {
			var f wire.Frame
			if err := r.ReadFrame(&f); err != nil {
				close(replies)
				return
			}
			replies <- rawReply{f.Tag, append([]byte(nil), f.Front...)}
			f.Release()
		}
	}()
	if _, err := cli.Write(in); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-acceptErr:
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("accept did not return")
	}
	return replies
}

// halfPipe is one end of an in-memory connection whose two directions
// close apart (CloseWrite), as TCP's do: a fuzzing peer says it has sent
// all it will while it still reads what the messenger answers, so the
// messenger reads every byte of the input, then EOF, and none of its
// writes fails for want of a reader.
type halfPipe struct {
	r *io.PipeReader
	w *io.PipeWriter
}

func newHalfPipes() (a, b *halfPipe) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	return &halfPipe{ar, aw}, &halfPipe{br, bw}
}

func (p *halfPipe) Read(b []byte) (int, error)       { return p.r.Read(b) }
func (p *halfPipe) Write(b []byte) (int, error)      { return p.w.Write(b) }
func (p *halfPipe) CloseWrite() error                { return p.w.Close() }
func (p *halfPipe) LocalAddr() net.Addr              { return pipeAddr{} }
func (p *halfPipe) RemoteAddr() net.Addr             { return pipeAddr{} }
func (p *halfPipe) SetDeadline(time.Time) error      { return nil }
func (p *halfPipe) SetReadDeadline(time.Time) error  { return nil }
func (p *halfPipe) SetWriteDeadline(time.Time) error { return nil }

func (p *halfPipe) Close() error {
	p.r.Close()
	return p.w.Close()
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
