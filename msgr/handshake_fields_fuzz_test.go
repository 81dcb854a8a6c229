package msgr

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
	"google.golang.org/protobuf/proto"
)

// acceptFields are a dialer's side of the handshake as fields: the fronts
// of its HELLO and AUTH_REQUEST, its session step's frames (scriptFrames:
// SESSION_REQUESTs, and whatever else the fuzzer makes of them), and raw
// bytes after them (the session's frames).
type acceptFields struct {
	hello, authReq, session, tail []byte
}

func (a acceptFields) bytes() []byte {
	b := concat(fuzzFrame(wire.Preamble{Tag: wire.TagHello}, a.hello, nil),
		fuzzFrame(wire.Preamble{Tag: wire.TagAuthRequest}, a.authReq, nil))
	for _, f := range parseScriptFrames(a.session) {
		b = append(b, fuzzFrame(wire.Preamble{Tag: f.tag, Flags: f.flags}, f.front, nil)...)
	}
	return append(b, a.tail...)
}

// acceptFieldSeed is a seed of FuzzHandshakeFields and the acceptor's
// answers in the session step it must get (fuzzAcceptorAnswers).
type acceptFieldSeed struct {
	name string
	acceptFields
	want []wire.Tag
}

// seedSessionReq is a valid SESSION_REQUEST of a new session, changed by
// mod if it is not nil, for the seeds.
func seedSessionReq(mod func(*msgrpb.SessionRequest)) scriptFrame {
	r := &msgrpb.SessionRequest{Cookie: 11, WindowMsgs: 8, WindowBytes: 1 << 16,
		GrantMsgs: 8, GrantBytes: 1 << 16, MaxMessage: 1 << 20}
	if mod != nil {
		mod(r)
	}
	return scriptFrame{tag: wire.TagSessionReq, front: hsFront(r)}
}

// acceptFieldSeeds reach each answer of the acceptor's session step:
// fuzzAccept's acceptor has a tombstone of a session with osd.1 and a
// session with osd.2 in standby.
func acceptFieldSeeds() []acceptFieldSeed {
	hello := func(name string) []byte {
		return hsFront(&msgrpb.Hello{EntityName: name, InstanceNonce: 7, PeerAddr: "pipe"})
	}
	authReq := hsFront(&msgrpb.AuthRequest{Methods: []string{authNone}, Modes: []string{string(ModeCRC)}})
	req := seedSessionReq
	msg := fuzzFrame(wire.Preamble{Tag: wire.TagMessage, Type: 1, Seq: 1, GrantMsgs: 8, GrantBytes: 1 << 16}, []byte("op"), []byte("data"))
	seed := func(name string, peer EntityName, want []wire.Tag, tail []byte, reqs ...scriptFrame) acceptFieldSeed {
		return acceptFieldSeed{name, acceptFields{hello: hello(string(peer)), authReq: authReq, session: scriptFrames(reqs...), tail: tail}, want}
	}
	ready := []wire.Tag{wire.TagSessionReady}
	resetReady := []wire.Tag{wire.TagSessionReset, wire.TagSessionReady}
	return []acceptFieldSeed{
		seed("new", "osd.1", ready, msg, req(nil)),
		seed("unknown session, then new", "osd.1", resetReady, msg, req(func(r *msgrpb.SessionRequest) { r.PeerCookie = 12345 }), req(nil)),
		seed("closed session, then new", "osd.1", resetReady, msg, req(func(r *msgrpb.SessionRequest) { r.PeerCookie = fuzzClosedCookie }), req(nil)),
		seed("resume by name", "osd.2", ready, msg, req(func(r *msgrpb.SessionRequest) { r.Cookie = fuzzOpenPeerCookie })),
		seed("resume by cookie", "osd.2", ready, msg, req(func(r *msgrpb.SessionRequest) { r.Cookie, r.PeerCookie = fuzzOpenPeerCookie, fuzzOpenCookie })),
		seed("peer restarted", "osd.2", ready, msg, req(func(r *msgrpb.SessionRequest) { r.PeerCookie = fuzzOpenCookie })),
		seed("dialer closed it", "osd.2", ready, msg, req(func(r *msgrpb.SessionRequest) { r.ClosedCookie = fuzzOpenPeerCookie })),
		seed("rewind to messages never sent (no link: reset)", "osd.2", []wire.Tag{wire.TagSessionReset}, nil, req(func(r *msgrpb.SessionRequest) { r.Cookie, r.InSeq = fuzzOpenPeerCookie, 1000 })),
		seed("policy mismatch", "osd.1", []wire.Tag{wire.TagSessionReset}, nil, req(func(r *msgrpb.SessionRequest) { r.Lossy = true })),
		seed("window too small", "osd.1", nil, nil, req(func(r *msgrpb.SessionRequest) { r.WindowMsgs = 1 })),
	}
}

// TestHandshakeFieldSeeds: each seed of FuzzHandshakeFields gets the
// answers it was written for, so the fuzzer starts from every branch of
// the acceptor's session step.
func TestHandshakeFieldSeeds(t *testing.T) {
	for _, sd := range acceptFieldSeeds() {
		t.Run(sd.name, func(t *testing.T) {
			if got := fuzzAcceptorAnswers(t, sd.bytes()); !slices.Equal(got, sd.want) {
				t.Fatalf("the acceptor answered %v, want %v", got, sd.want)
			}
		})
	}
}

// FuzzHandshakeFields is FuzzHandshake with the fuzzer mutating the fields
// of a dialer's frames rather than raw bytes: each input is framed as a
// valid handshake, so the acceptor's session step (new sessions,
// resumptions, resets, refusals) is reached on every run, not only when a
// mutation keeps the framing intact. Its corpus holds handshakes recorded
// from real dialers (testdata/fuzz/FuzzHandshakeFields/recorded-*).
func FuzzHandshakeFields(f *testing.F) {
	for _, s := range acceptFieldSeeds() {
		f.Add(s.hello, s.authReq, s.session, s.tail)
	}
	f.Fuzz(func(t *testing.T, hello, authReq, session, tail []byte) {
		fuzzAccept(t, acceptFields{hello, authReq, session, tail}.bytes(), nil)
	})
}

// fuzzAcceptorAnswers runs in through the acceptor of the fuzz targets
// and returns its answers in the session step: SESSION_RESETs, WAIT, up
// to the first SESSION_READY, or none if it ended the handshake first.
func fuzzAcceptorAnswers(t *testing.T, in []byte) []wire.Tag {
	m := newFuzzAcceptor(t, nil)
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	cli, srv := net.Pipe()
	link := wire.NewStreamLink(srv, wire.KnownFeatures, m.linkOptions(nil))
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		if m.accept(link, m.opts.RecvWindowMsgs, "tcp") != nil {
			link.Close()
		}
	}()
	t.Cleanup(func() { // before the shutdown, which must not race accept's start of the link
		cli.Close()
		<-accepted
	})
	go cli.Write(in)
	r := wire.NewReaderLink(cli, wire.KnownFeatures, wire.HandshakeLimits)
	var tags []wire.Tag
	for {
		var f wire.Frame
		if r.ReadFrame(&f) != nil {
			return tags
		}
		f.Release()
		switch f.Tag {
		case wire.TagHello, wire.TagAuthDone:
		case wire.TagSessionReady:
			return append(tags, f.Tag)
		default:
			tags = append(tags, f.Tag)
		}
	}
}

// recordConn records what passes through a conn, each way.
type recordConn struct {
	net.Conn
	mu      sync.Mutex
	in, out bytes.Buffer
}

func (c *recordConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	c.in.Write(b[:n])
	c.mu.Unlock()
	return n, err
}

func (c *recordConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.mu.Lock()
	c.out.Write(b[:n])
	c.mu.Unlock()
	return n, err
}

// recording is one link of a real exchange, after the banners: what the
// dialer sent and what the acceptor answered.
type recording struct{ dialer, acceptor []byte }

// recordExchange has a real messenger, name, connect to a real acceptor,
// osd.0, send one message on the session and (with redial) do it again on
// a second link after the first is cut, and returns each link's bytes.
func recordExchange(t *testing.T, name EntityName, redial bool) []recording {
	got := make(chan *Message, 4)
	acc, err := New(Options{Name: "osd.0", Dispatcher: DispatchFunc(func(m *Message) { got <- m }),
		Logger: slog.New(slog.DiscardHandler), RecvWindowMsgs: 8, RecvWindowBytes: 1 << 16, MaxMessageSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer acc.Shutdown(context.Background())
	var (
		mu    sync.Mutex
		conns []*recordConn
	)
	tr := &fuzzDialTransport{script: func(srv net.Conn) {
		// The dialer's banner first: a pipe's writes wait for a reader.
		var bn [wire.BannerSize]byte
		if _, err := io.ReadFull(srv, bn[:]); err != nil {
			return
		}
		peer, err := wire.ParseBanner(bn[:])
		if err != nil {
			return
		}
		mine := acc.linkOptions(nil).Banner.Stream()
		mine.Put(bn[:])
		if _, err := srv.Write(bn[:]); err != nil {
			return
		}
		features, err := wire.Negotiate(mine, peer)
		if err != nil {
			return
		}
		rc := &recordConn{Conn: srv}
		mu.Lock()
		conns = append(conns, rc)
		mu.Unlock()
		link := wire.NewStreamLink(rc, features, acc.linkOptions(nil))
		if acc.accept(link, acc.opts.RecvWindowMsgs, "fz") != nil {
			link.Close()
			return
		}
		<-acc.done // the accepted link runs until shutdown
	}}
	// Loopback TCP, whose buffers let both ends write at once, as the
	// real acceptor does.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tr.pipe = func() (net.Conn, net.Conn, error) {
		cli, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil, nil, err
		}
		srv, err := ln.Accept()
		if err != nil {
			cli.Close()
		}
		return cli, srv, err
	}
	d, err := New(Options{Name: name, Dispatcher: DispatchFunc(func(m *Message) { m.Release() }),
		Logger: slog.New(slog.DiscardHandler), Transports: []wire.Transport{tr},
		RecvWindowMsgs: 8, RecvWindowBytes: 1 << 16, MaxMessageSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	c, err := d.Connect(context.Background(), "fz://osd.0", "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	links := 1
	if redial {
		links = 2
	}
	for i := range links {
		if i > 0 {
			mu.Lock()
			conns[0].Close() // a fault: the dialer redials and resumes
			mu.Unlock()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := c.Send(ctx, &Message{Type: 1, Front: []byte("op"), Data: []byte(fmt.Sprint("data ", i))}); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			m.Release()
		case <-ctx.Done():
			t.Fatal("the message did not arrive")
		}
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	var out []recording
	for _, rc := range conns {
		rc.mu.Lock()
		out = append(out, recording{bytes.Clone(rc.in.Bytes()), bytes.Clone(rc.out.Bytes())})
		rc.mu.Unlock()
	}
	return out
}

// recordedFrame is one frame of a recorded stream, and its bytes.
type recordedFrame struct {
	tag   wire.Tag
	front []byte
	raw   []byte
}

func splitRecorded(t *testing.T, b []byte) []recordedFrame {
	r := wire.NewReaderLink(bytes.NewReader(b), wire.KnownFeatures, wire.Limits{MaxFront: 1 << 16, MaxData: 1 << 20})
	var out []recordedFrame
	for off := 0; off < len(b); {
		var f wire.Frame
		if err := r.ReadFrame(&f); err != nil {
			t.Fatalf("recorded stream at %d: %v", off, err)
		}
		n := f.WireSize()
		out = append(out, recordedFrame{f.Tag, bytes.Clone(f.Front), b[off : off+n]})
		f.Release()
		off += n
	}
	return out
}

// splitHandshake splits one side's recorded stream into the fields of a
// fuzz target's seed: the fronts of its HELLO and of its auth frame (auth,
// AUTH_REQUEST or AUTH_DONE), its other handshake frames (scriptFrames),
// and the bytes of the session's frames after them.
func splitHandshake(t *testing.T, b []byte, auth wire.Tag) (hello, authFront, session, tail []byte) {
	var frames []scriptFrame
	for _, f := range splitRecorded(t, b) {
		switch {
		case f.tag == wire.TagHello:
			hello = f.front
		case f.tag == auth:
			authFront = f.front
		case f.tag.Handshake():
			frames = append(frames, scriptFrame{tag: f.tag, front: f.front})
		default:
			tail = append(tail, f.raw...)
		}
	}
	return hello, authFront, scriptFrames(frames...), tail
}

// corpusFile is a fuzz corpus file as the go command writes one.
func corpusFile(args ...any) []byte {
	b := []byte("go test fuzz v1\n")
	for _, a := range args {
		switch a := a.(type) {
		case []byte:
			b = fmt.Appendf(b, "[]byte(%q)\n", a)
		case uint8:
			b = fmt.Appendf(b, "byte(%q)\n", a)
		}
	}
	return b
}

// recordedScenarios are the real exchanges the recorded seeds come from:
// a new session, one that resumes on a second link, and osd.2, which
// fuzzAccept's acceptor holds a session with that a new dialer restarts.
var recordedScenarios = []struct {
	name   string
	peer   EntityName
	redial bool
}{{"new", "osd.1", false}, {"resume", "osd.1", true}, {"restart", "osd.2", false}}

// TestRecordedHandshakeSeeds checks that the seeds recorded from real
// exchanges (testdata/fuzz/FuzzHandshake/recorded-*) still reach the
// fuzzed acceptor's session step, which answers them SESSION_READY (or,
// for a resumption of a session it never had, SESSION_RESET), so that a
// protocol change that makes them stale is seen. OSPREY_RECORD_SEEDS=1
// records them again, with the seeds of FuzzHandshakeFields and
// FuzzDialHandshake from the same exchanges.
func TestRecordedHandshakeSeeds(t *testing.T) {
	if os.Getenv("OSPREY_RECORD_SEEDS") == "1" {
		recordSeeds(t)
	}
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzHandshake", "recorded-*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded seeds (%v): OSPREY_RECORD_SEEDS=1 records them", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(string(b), "\n")
			var in string
			if len(lines) < 2 || !strings.HasPrefix(lines[1], "[]byte(") {
				t.Fatalf("%s: not a corpus file", file)
			}
			if _, err := fmt.Sscanf(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"), "%q", &in); err != nil {
				t.Fatal(err)
			}
			if got := fuzzAcceptorAnswers(t, []byte(in)); len(got) == 0 {
				t.Fatal("the acceptor ended the handshake before its session step")
			}
		})
	}
}

func recordSeeds(t *testing.T) {
	write := func(target, name string, args ...any) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "recorded-"+name), corpusFile(args...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, sc := range recordedScenarios {
		for i, rec := range recordExchange(t, sc.peer, sc.redial) {
			name := fmt.Sprintf("%s-%d", sc.name, i)
			write("FuzzHandshake", name, rec.dialer)
			var fields acceptFields
			fields.hello, fields.authReq, fields.session, fields.tail = splitHandshake(t, rec.dialer, wire.TagAuthRequest)
			write("FuzzHandshakeFields", name, fields.hello, fields.authReq, fields.session, fields.tail)
			var s dialScript
			s.hello, s.authDone, s.answers, s.tail = splitHandshake(t, rec.acceptor, wire.TagAuthDone)
			write("FuzzDialHandshake", name, s.banner, s.hello, s.authDone, s.answers, s.tail, s.ctl)
		}
	}
}

// acceptAuthFields are a dialer's side of the handshake with an acceptor
// that requires auth: acceptFields, whose AUTH_REQUEST carries the real
// first TLS flight of a dialer with osd.1's credential (its methods and
// modes are the fuzzed front's), and whose session frames are sealed
// under the link's keys if the acceptor chooses secure mode. With
// authFieldsRaw the AUTH_REQUEST front goes as it is, and no TLS step
// follows; with authFieldsOSD2 the dialer's credential is osd.2's.
type acceptAuthFields struct {
	acceptFields
	ctl uint8
}

const (
	authFieldsRaw = 1 << iota
	authFieldsOSD2
)

// fuzzAcceptAuth runs a through the fuzz targets' acceptor, requiring the
// tls13 method and accepting both modes, and returns what its accept
// returned. As fuzzAccept, accept must return, never panic, and the
// messenger must shut down cleanly.
func fuzzAcceptAuth(t *testing.T, a acceptAuthFields, keys *dialFuzzKeys) error {
	m := newFuzzAcceptor(t, &AuthOptions{Keyring: keys.acceptor, Modes: []Mode{ModeSecure, ModeCRC}})
	cli, srv := newHalfPipes()
	link := wire.NewStreamLink(srv, wire.KnownFeatures, m.linkOptions(nil))
	acceptErr := make(chan error, 1)
	go func() { acceptErr <- m.accept(link, m.opts.RecvWindowMsgs, "tcp") }()
	var wg sync.WaitGroup
	in := readPeer(&wg, cli)
	wg.Go(func() {
		defer cli.CloseWrite() // the acceptor reads all, then EOF
		k := keys.dialer
		if a.ctl&authFieldsOSD2 != 0 {
			k = keys.dialer2
		}
		dialAuthFields(cli, in, a, k)
	})
	err := <-acceptErr
	if err != nil {
		link.Close() // as acceptLoop does
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	wg.Wait() // the reader, once the acceptor's end is closed
	for c := range m.Conns() {
		t.Fatalf("conn with %s still registered after shutdown", c.Peer())
	}
	return err
}

// dialAuthFields plays the dialer of a on cli, reading the acceptor's
// frames from in.
func dialAuthFields(cli *halfPipe, in <-chan rawReply, a acceptAuthFields, k *auth.Keyring) {
	var req msgrpb.AuthRequest
	if a.ctl&authFieldsRaw != 0 || proto.Unmarshal(a.authReq, &req) != nil {
		cli.Write(a.acceptFields.bytes())
		return
	}
	if _, err := cli.Write(fuzzFrame(wire.Preamble{Tag: wire.TagHello}, a.hello, nil)); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := auth.Dial(ctx, k, &fieldFlights{w: cli, in: in, req: &req},
		auth.DialOptions{CleartextSession: !slices.Contains(req.Modes, string(ModeSecure)), KeepLastFlight: true})
	if err != nil {
		return
	}
	if _, err := cli.Write(fuzzHS(wire.TagAuthMore, &msgrpb.AuthMore{Payload: res.Unsent})); err != nil {
		return
	}
	var done msgrpb.AuthDone
	if r, ok := <-in; !ok || r.tag != wire.TagAuthDone || proto.Unmarshal(r.front, &done) != nil {
		return
	}
	var sealed *sealedLink
	if Mode(done.Mode) == ModeSecure {
		lk, err := secureKeys(res, req.Modes, true)
		if err != nil {
			return
		}
		if sealed, err = newSealedLink(wire.NewStreamLink(cli, wire.KnownFeatures, wire.LinkOptions{}), lk, dialFuzzLimits); err != nil {
			return
		}
		defer sealed.Close()
	}
	if writeScriptFrames(cli, sealed, a.session) == nil {
		cli.Write(a.tail)
	}
}

// fieldFlights carries the fuzzing dialer's TLS flights: the first in an
// AUTH_REQUEST with req's methods and modes, later ones in AUTH_MORE; the
// acceptor's come after its HELLO, in AUTH_MORE.
type fieldFlights struct {
	w       io.Writer
	in      <-chan rawReply
	req     *msgrpb.AuthRequest
	sent    bool
	helloed bool
}

func (f *fieldFlights) Send(b []byte) error {
	var frame []byte
	if !f.sent {
		f.sent = true
		frame = fuzzHS(wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: f.req.Methods, Modes: f.req.Modes, Payload: b})
	} else {
		frame = fuzzHS(wire.TagAuthMore, &msgrpb.AuthMore{Payload: b})
	}
	_, err := f.w.Write(frame)
	return err
}

func (f *fieldFlights) Recv() ([]byte, error) {
	for r := range f.in {
		if r.tag == wire.TagHello && !f.helloed {
			f.helloed = true
			continue
		}
		var more msgrpb.AuthMore
		if r.tag != wire.TagAuthMore || proto.Unmarshal(r.front, &more) != nil {
			return nil, fmt.Errorf("fuzz dialer: got %v from the acceptor, want AUTH_MORE", r.tag)
		}
		return more.Payload, nil
	}
	return nil, io.EOF
}

// acceptAuthSeed is a seed of FuzzHandshakeAuthFields, and whether the
// acceptor's accept must succeed on it.
type acceptAuthSeed struct {
	name string
	acceptAuthFields
	ok bool
}

func acceptAuthSeeds() []acceptAuthSeed {
	hello := func(name string) []byte {
		return hsFront(&msgrpb.Hello{EntityName: name, InstanceNonce: 7, PeerAddr: "pipe"})
	}
	authReq := func(methods []string, modes ...Mode) []byte {
		return hsFront(&msgrpb.AuthRequest{Methods: methods, Modes: modeStrings(modes)})
	}
	tls := []string{authTLS13}
	req := seedSessionReq
	seed := func(name string, ok bool, peer EntityName, ar []byte, ctl uint8, reqs ...scriptFrame) acceptAuthSeed {
		return acceptAuthSeed{name, acceptAuthFields{acceptFields{hello: hello(string(peer)), authReq: ar, session: scriptFrames(reqs...)}, ctl}, ok}
	}
	return []acceptAuthSeed{
		seed("secure", true, "osd.1", authReq(tls, ModeSecure), 0, req(nil)),
		seed("crc", true, "osd.1", authReq(tls, ModeCRC), 0, req(nil)),
		seed("prefer crc", true, "osd.1", authReq(tls, ModeCRC, ModeSecure), 0, req(nil)),
		seed("secure, unknown session then new", true, "osd.1", authReq(tls, ModeSecure), 0,
			req(func(r *msgrpb.SessionRequest) { r.PeerCookie = 12345 }), req(nil)),
		seed("secure, closed session", true, "osd.1", authReq(tls, ModeSecure), 0,
			req(func(r *msgrpb.SessionRequest) { r.PeerCookie = fuzzClosedCookie }), req(nil)),
		seed("secure, resume by cookie", true, "osd.2", authReq(tls, ModeSecure), authFieldsOSD2,
			req(func(r *msgrpb.SessionRequest) { r.Cookie, r.PeerCookie = fuzzOpenPeerCookie, fuzzOpenCookie })),
		seed("secure, session frame", false, "osd.1", authReq(tls, ModeSecure), 0, scriptFrame{tag: wire.TagAck}),
		seed("secure, undecodable request", false, "osd.1", authReq(tls, ModeSecure), 0, scriptFrame{tag: wire.TagSessionReq, front: []byte{0xff}}),
		seed("hello not the certificate's", false, "osd.2", authReq(tls, ModeSecure), 0, req(nil)),
		seed("no tls13", false, "osd.1", authReq([]string{authNone}, ModeSecure), 0, req(nil)),
		seed("no mode in common", false, "osd.1", authReq(tls, "legacy"), 0, req(nil)),
		seed("raw", false, "osd.1", hsFront(&msgrpb.AuthRequest{Methods: tls, Payload: []byte("\x16\x03\x01\x00\x05hello")}), authFieldsRaw, req(nil)),
	}
}

// FuzzHandshakeAuthFields is FuzzHandshakeFields against an acceptor that
// requires the tls13 method: the fuzzing dialer runs a real TLS step, so
// the acceptor's session step is reached in crc and secure modes, its
// frames sealed under the link's real keys; the fuzzer mutates HELLO,
// the AUTH_REQUEST's methods and modes, and the session's frames.
func FuzzHandshakeAuthFields(f *testing.F) {
	keys := newDialFuzzKeys(f)
	for _, s := range acceptAuthSeeds() {
		f.Add(s.hello, s.authReq, s.session, s.tail, s.ctl)
	}
	f.Fuzz(func(t *testing.T, hello, authReq, session, tail []byte, ctl uint8) {
		fuzzAcceptAuth(t, acceptAuthFields{acceptFields{hello, authReq, session, tail}, ctl}, keys)
	})
}

// TestHandshakeAuthFieldSeeds: each seed of FuzzHandshakeAuthFields ends
// the acceptor's handshake as it was written to, so the fuzzer starts
// from sessions that get through a real TLS step in each mode.
func TestHandshakeAuthFieldSeeds(t *testing.T) {
	keys := newDialFuzzKeys(t)
	for _, sd := range acceptAuthSeeds() {
		t.Run(sd.name, func(t *testing.T) {
			if err := fuzzAcceptAuth(t, sd.acceptAuthFields, keys); (err == nil) != sd.ok {
				t.Fatalf("accept: %v, want success %v", err, sd.ok)
			}
		})
	}
}
