package msgr

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
	"google.golang.org/protobuf/proto"
)

// The dialer's side of the handshake under fuzzing: the fuzzer plays the
// acceptor that a real messenger's Connect reaches, and answers its
// banner, HELLO and AUTH_REQUEST with frames built from the fuzzed fields
// of a dialScript. The frames are well formed (lengths, CRCs, and in
// secure mode the seal, under the keys of a real TLS handshake), so that
// what the fuzzer mutates reaches the dialer's decoding of each field
// rather than stopping at the framing; the raw banner and tail, and the
// corrupt bit, still reach the framing itself.

// dialScript is what the fuzzed acceptor sends, in order.
type dialScript struct {
	// banner is written verbatim; empty: a valid banner.
	banner []byte
	// hello is the front of the acceptor's HELLO.
	hello []byte
	// authDone is the front of AUTH_DONE, written after the auth step
	// (dialCtlScripted: not at all).
	authDone []byte
	// answers are frames after AUTH_DONE (scriptFrames), sealed when
	// AUTH_DONE chose secure mode.
	answers []byte
	// tail is raw bytes after the answers.
	tail []byte
	ctl  uint8
}

// dialScript.ctl bits.
const (
	// dialCtlLossy: the dialer's session is lossy (a reset ends it).
	dialCtlLossy = 1 << iota
	// dialCtlScripted: the acceptor runs no auth step and sends no
	// AUTH_DONE of its own: the answers follow HELLO, in clear, and may
	// be anything (AUTH_MORE with any TLS flight, an early SESSION_READY).
	dialCtlScripted
	// dialCtlClear: the answers go in clear even when AUTH_DONE chose
	// secure mode.
	dialCtlClear
	// dialCtlProve: the acceptor fills AUTH_DONE's mode proof and ticket
	// from its real TLS handshake (with auth); without it they are the
	// fuzzed ones.
	dialCtlProve
	// dialCtlModes (two bits) pick the dialer's modes, with auth:
	// dialModeChoices.
	dialCtlModes
	_
	// dialCtlCorrupt flips a bit of the HELLO frame's epilogue (its
	// CRC), and so of the first frame the dialer decodes.
	dialCtlCorrupt
)

var dialModeChoices = [4][]Mode{{ModeCRC}, {ModeSecure}, {ModeSecure, ModeCRC}, {ModeCRC, ModeSecure}}

// scriptFrames encodes frames of a fuzzed side's script (a dialScript's
// answers, a dialer's session step): each a tag, preamble flags, a
// little-endian u16 length and that many bytes of front. A last entry cut
// short keeps what there is. The fuzzer mutates the fronts' fields, the
// harness frames them (lengths, CRCs).
func scriptFrames(frames ...scriptFrame) []byte {
	var b []byte
	for _, f := range frames {
		b = append(b, byte(f.tag), f.flags)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(f.front)))
		b = append(b, f.front...)
	}
	return b
}

type scriptFrame struct {
	tag   wire.Tag
	flags uint8
	front []byte
}

func parseScriptFrames(b []byte) []scriptFrame {
	var out []scriptFrame
	for len(b) >= 4 {
		f := scriptFrame{tag: wire.Tag(b[0]), flags: b[1]}
		n := min(int(binary.LittleEndian.Uint16(b[2:])), len(b)-4)
		f.front, b = b[4:4+n], b[4+n:]
		out = append(out, f)
	}
	return out
}

func hsFront(pb proto.Message) []byte {
	b, err := proto.Marshal(pb)
	if err != nil {
		panic(err)
	}
	return b
}

// fuzzDialTransport is the "fz" transport: each Dial is a pipe whose far
// end runs the fuzzed acceptor (script). The dialer's end exchanges
// banners as the tcp transport does.
type fuzzDialTransport struct {
	script func(srv net.Conn)
	// pipe makes the two ends; nil: net.Pipe, whose writes wait for the
	// reader, so the script must read what the dialer writes meanwhile.
	pipe func() (cli, srv net.Conn, err error)
	wg   sync.WaitGroup
}

func (*fuzzDialTransport) Scheme() string { return "fz" }

func (*fuzzDialTransport) Listen(context.Context, string, wire.LinkOptions) (wire.Listener, error) {
	return nil, errors.New("fz: dial only")
}

func (t *fuzzDialTransport) Dial(ctx context.Context, _ string, opts wire.LinkOptions) (wire.Link, error) {
	cli, srv := net.Pipe()
	if t.pipe != nil {
		var err error
		if cli, srv, err = t.pipe(); err != nil {
			return nil, err
		}
	}
	t.wg.Go(func() {
		defer srv.Close()
		t.script(srv)
	})
	stop := context.AfterFunc(ctx, func() { cli.Close() })
	features, err := wire.ExchangeBanner(cli, opts.Banner)
	if !stop() {
		err = ctx.Err() // as the tcp transport's: not the closed pipe
	}
	if err != nil {
		cli.Close()
		return nil, err
	}
	return wire.NewStreamLink(cli, features, opts), nil
}

// dialFuzzKeys are the credentials of the auth targets, of one CA: the
// acceptor is osd.0, the dialer osd.1 (or osd.2, whose session the
// acceptor of the FuzzHandshake targets holds).
type dialFuzzKeys struct{ acceptor, dialer, dialer2 *auth.Keyring }

func newDialFuzzKeys(tb testing.TB) *dialFuzzKeys {
	ca, err := auth.NewCA("fuzz")
	if err != nil {
		tb.Fatal(err)
	}
	a, err := ca.Issue("osd.0")
	if err != nil {
		tb.Fatal(err)
	}
	d, err := ca.Issue("osd.1")
	if err != nil {
		tb.Fatal(err)
	}
	d2, err := ca.Issue("osd.2")
	if err != nil {
		tb.Fatal(err)
	}
	return &dialFuzzKeys{acceptor: a, dialer: d, dialer2: d2}
}

// dialFuzzLimits bound the frames the fuzzed acceptor seals.
var dialFuzzLimits = wire.Limits{MaxFront: 1 << 16, MaxData: 1 << 20}

// runScript plays s as the acceptor on srv: it reads the dialer's banner,
// HELLO and AUTH_REQUEST, and writes what s says; with keys, it runs the
// acceptor's TLS step for real unless s is scripted. It returns once all
// is written (the caller closes srv), or at the first error.
func runScript(srv net.Conn, s *dialScript, keys *dialFuzzKeys) {
	var bn [wire.BannerSize]byte
	if _, err := io.ReadFull(srv, bn[:]); err != nil {
		return
	}
	// From here on everything the dialer writes is read, so that it
	// never blocks on the pipe while we write (a banner with more bytes
	// than a banner's).
	var reader sync.WaitGroup
	defer reader.Wait()
	in := readPeer(&reader, srv)
	defer srv.Close() // ends the reader, should the dialer still be there
	if len(s.banner) == 0 {
		valid := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}.Stream()
		valid.Put(bn[:])
		if _, err := srv.Write(bn[:]); err != nil {
			return
		}
	} else if _, err := srv.Write(s.banner); err != nil || len(s.banner) < wire.BannerSize {
		return // a short banner: the dialer waits for the rest, until srv closes
	}
	if r, ok := <-in; !ok || r.tag != wire.TagHello {
		return
	}
	r, ok := <-in
	if !ok || r.tag != wire.TagAuthRequest {
		return
	}
	var req msgrpb.AuthRequest
	if proto.Unmarshal(r.front, &req) != nil {
		return
	}

	hello := fuzzFrame(wire.Preamble{Tag: wire.TagHello}, s.hello, nil)
	if s.ctl&dialCtlCorrupt != 0 {
		hello[len(hello)-1] ^= 1
	}
	if _, err := srv.Write(hello); err != nil {
		return
	}
	var sealed *sealedLink
	if s.ctl&dialCtlScripted == 0 {
		done := s.authDone
		if keys != nil {
			var lk *linkKeys
			var err error
			if done, lk, err = acceptorTLS(srv, in, &req, s, keys.acceptor); err != nil {
				return
			}
			if lk != nil {
				out := wire.NewStreamLink(srv, wire.KnownFeatures, wire.LinkOptions{})
				if sealed, err = newSealedLink(out, lk, dialFuzzLimits); err != nil {
					return
				}
				defer sealed.Close()
			}
		}
		if _, err := srv.Write(fuzzFrame(wire.Preamble{Tag: wire.TagAuthDone}, done, nil)); err != nil {
			return
		}
	}
	if writeScriptFrames(srv, sealed, s.answers) == nil {
		srv.Write(s.tail)
	}
}

// writeScriptFrames writes frames (scriptFrames) on w, framed, or sealed
// by sealed if it is not nil.
func writeScriptFrames(w io.Writer, sealed *sealedLink, frames []byte) error {
	for _, f := range parseScriptFrames(frames) {
		p := wire.Preamble{Tag: f.tag, Flags: f.flags}
		var err error
		if sealed != nil {
			err = sealed.WriteFrames([]wire.Frame{{Preamble: p, Front: f.front}})
		} else {
			_, err = w.Write(fuzzFrame(p, f.front, nil))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readPeer reads the frames the messenger under test writes on c, so that
// its writes never wait on a pipe, and hands its handshake frames to the
// fuzzing side (those the channel has no room for, and anything after a
// frame that does not parse, are dropped), until c fails. wg tracks the
// reading goroutine.
func readPeer(wg *sync.WaitGroup, c io.Reader) <-chan rawReply {
	in := make(chan rawReply, 16)
	wg.Go(func() {
		defer close(in)
		r := wire.NewReaderLink(c, wire.KnownFeatures, wire.HandshakeLimits)
		for {
			var f wire.Frame
			if err := r.ReadFrame(&f); err != nil {
				io.Copy(io.Discard, c)
				return
			}
			select {
			case in <- rawReply{f.Tag, append([]byte(nil), f.Front...)}:
			default:
			}
			f.Release()
		}
	})
	return in
}

// acceptorTLS runs the acceptor's TLS step on the dialer's AUTH_REQUEST
// and returns the AUTH_DONE front to send: s.authDone, with the real mode
// proof and ticket if s says so, and the keys to seal the answers with if
// that AUTH_DONE chooses secure mode (nil: they go in clear).
func acceptorTLS(srv net.Conn, in <-chan rawReply, req *msgrpb.AuthRequest, s *dialScript, k *auth.Keyring) ([]byte, *linkKeys, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := auth.Accept(ctx, k, &pipeFlights{w: srv, in: in, first: req.Payload}, auth.AcceptOptions{})
	if err != nil {
		return nil, nil, err
	}
	var done msgrpb.AuthDone
	if proto.Unmarshal(s.authDone, &done) != nil {
		return s.authDone, nil, nil
	}
	mode := Mode(done.Mode)
	if mode == "" {
		mode = ModeCRC
	}
	if s.ctl&dialCtlProve != 0 {
		if done.ModeProof, err = modeProof(res, req.Modes, mode); err != nil {
			return nil, nil, err
		}
		if len(done.Payload) == 0 {
			done.Payload = res.Unsent
		}
	}
	var keys *linkKeys
	if mode == ModeSecure && s.ctl&dialCtlClear == 0 {
		if keys, err = secureKeys(res, req.Modes, false); err != nil {
			return nil, nil, err
		}
	}
	return hsFront(&done), keys, nil
}

// pipeFlights carries the fuzzed acceptor's TLS flights: the dialer's
// come from the pipe's reader, ours go in AUTH_MORE.
type pipeFlights struct {
	w     io.Writer
	in    <-chan rawReply
	first []byte
	got   bool
}

func (f *pipeFlights) Send(b []byte) error {
	_, err := f.w.Write(fuzzHS(wire.TagAuthMore, &msgrpb.AuthMore{Payload: b}))
	return err
}

func (f *pipeFlights) Recv() ([]byte, error) {
	if !f.got {
		f.got = true
		return f.first, nil
	}
	r, ok := <-f.in
	if !ok {
		return nil, io.EOF
	}
	var more msgrpb.AuthMore
	if r.tag != wire.TagAuthMore || proto.Unmarshal(r.front, &more) != nil {
		return nil, fmt.Errorf("fuzz acceptor: got %v from the dialer, want AUTH_MORE", r.tag)
	}
	return more.Payload, nil
}

// fuzzDial has a real messenger, osd.1, Connect to the fuzzed acceptor
// osd.0 playing s, and returns the error its first dial ended with (nil:
// a session started). It fails t if the dial ends with an error of no
// known kind and, at t's cleanup, if shutting the messenger down fails or
// leaves the fuzzed acceptor's end of a link open.
func fuzzDial(t testing.TB, s *dialScript, keys *dialFuzzKeys) error {
	tr := &fuzzDialTransport{script: func(srv net.Conn) { runScript(srv, s, keys) }}
	opts := Options{
		Name:             "osd.1",
		Dispatcher:       DispatchFunc(func(m *Message) { m.Release() }),
		Logger:           slog.New(slog.DiscardHandler),
		Transports:       []wire.Transport{tr},
		RecvWindowMsgs:   8,
		RecvWindowBytes:  1 << 16,
		MaxMessageSize:   1 << 20,
		HandshakeTimeout: 10 * time.Second,
		// One dial per run: a failed lossless session would redial.
		Reconnect: Backoff{Min: time.Hour, Max: time.Hour},
	}
	if keys != nil {
		opts.Auth = &AuthOptions{Keyring: keys.dialer, Modes: dialModeChoices[s.ctl/dialCtlModes%4]}
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		acceptors := make(chan struct{})
		go func() {
			tr.wg.Wait()
			close(acceptors)
		}()
		select {
		case <-acceptors:
		case <-ctx.Done():
			t.Error("the fuzzed acceptor still runs after shutdown: the dialer left its link open")
		}
	})
	dialed := make(chan error, 1)
	m.afterDial = func(_ *Conn, err error) {
		select {
		case dialed <- err:
		default:
		}
	}
	policy := LosslessPeer
	if s.ctl&dialCtlLossy != 0 {
		policy = LossyClient
	}
	if _, err := m.ConnectPolicy(context.Background(), "fz://acceptor", "osd.0", policy); err != nil {
		t.Fatal(err)
	}
	var dialErr error
	select {
	case dialErr = <-dialed:
	case <-time.After(30 * time.Second):
		t.Fatal("the dial did not end")
	}
	if !knownDialError(dialErr) {
		t.Fatalf("dial ended with an error of no known kind: %T: %v", dialErr, dialErr)
	}
	return dialErr
}

// knownDialError reports whether err, a dial's, says what went wrong in
// terms a caller can test: a kind of handshake failure (HandshakeReason),
// or one of the sentinels and types the package gives the outcomes that
// are no fault of the link.
func knownDialError(err error) bool {
	var refused *RefusedError
	switch {
	case err == nil, handshakeReason(err) != HandshakeOther, errors.As(err, &refused):
		return true
	}
	for _, e := range []error{errWait, errAttached, ErrClosedByPeer, ErrRemoteReset, ErrRefused, ErrMode, ErrClosed, ErrWrongPeer} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Fronts of the acceptor's valid answers, for the seeds.
var (
	dialSeedHello   = hsFront(&msgrpb.Hello{EntityName: "osd.0", InstanceNonce: 9, PeerAddr: "pipe"})
	dialSeedDoneCRC = hsFront(&msgrpb.AuthDone{Method: authNone, Mode: string(ModeCRC)})
	dialSeedReady   = hsFront(&msgrpb.SessionReady{Cookie: 21, WindowMsgs: 8, WindowBytes: 1 << 16,
		GrantMsgs: 8, GrantBytes: 1 << 16, MaxMessage: 1 << 20})
)

func dialSeedBanner(mod func(*wire.Banner)) []byte {
	bn := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}.Stream()
	if mod != nil {
		mod(&bn)
	}
	b := make([]byte, wire.BannerSize)
	bn.Put(b)
	return b
}

func dialSeedFrame(tag wire.Tag, pb proto.Message) scriptFrame {
	return scriptFrame{tag: tag, front: hsFront(pb)}
}

// dialSeed is a seed of the crc targets and the outcome the dialer must
// reach on it (TestDialHandshakeSeeds).
type dialSeed struct {
	name string
	s    dialScript
	// want: nil for a session that starts, else what the dial's error
	// must match (errors.Is).
	want error
}

// dialSeeds are valid acceptor answers and the ways to get one wrong, for
// a dialer without auth.
func dialSeeds() []dialSeed {
	ready := dialSeedFrame(wire.TagSessionReady, &msgrpb.SessionReady{Cookie: 21, WindowMsgs: 8, WindowBytes: 1 << 16,
		GrantMsgs: 8, GrantBytes: 1 << 16, MaxMessage: 1 << 20})
	reset := func(r *msgrpb.SessionReset) scriptFrame { return dialSeedFrame(wire.TagSessionReset, r) }
	good := func(answers ...scriptFrame) dialScript {
		return dialScript{hello: dialSeedHello, authDone: dialSeedDoneCRC, answers: scriptFrames(answers...)}
	}
	with := func(s dialScript, mod func(*dialScript)) dialScript {
		mod(&s)
		return s
	}
	msg := fuzzFrame(wire.Preamble{Tag: wire.TagMessage, Type: 1, Seq: 1, GrantMsgs: 8, GrantBytes: 1 << 16}, []byte("op"), []byte("data"))
	return []dialSeed{
		{"ready", good(ready), nil},
		{"ready then traffic", with(good(ready), func(s *dialScript) {
			s.tail = concat(msg, fuzzFrame(wire.Preamble{Tag: wire.TagKeepalive, Seq: 9}, nil, nil))
		}), nil},
		{"wait", good(dialSeedFrame(wire.TagWait, &msgrpb.Wait{})), errWait},
		{"reset then ready", good(reset(&msgrpb.SessionReset{Reason: "no such session"}), ready), nil},
		{"reset twice", good(reset(&msgrpb.SessionReset{}), reset(&msgrpb.SessionReset{})), ErrProtocol},
		{"reset lossy", with(good(reset(&msgrpb.SessionReset{Reason: "lossy"})), func(s *dialScript) { s.ctl = dialCtlLossy }), ErrRemoteReset},
		{"reset closed", good(reset(&msgrpb.SessionReset{Closed: true, Reason: closedSessionReason})), ErrClosedByPeer},
		{"reset fatal", good(reset(&msgrpb.SessionReset{Fatal: true, Reason: "policy mismatch"})), ErrRefused},
		{"no answer", good(), io.EOF},
		{"answer not a session answer", good(dialSeedFrame(wire.TagHello, &msgrpb.Hello{EntityName: "osd.0"})), ErrProtocol},
		{"answer undecodable", good(scriptFrame{tag: wire.TagSessionReady, front: []byte{0xff, 0xff}}), ErrMalformed},
		{"answer with flags", good(scriptFrame{tag: wire.TagSessionReady, flags: 0xff, front: dialSeedReady}), ErrMalformed},
		{"banner magic", with(good(ready), func(s *dialScript) { s.banner = []byte("NOTOSPREY-------------------------") }), ErrBanner},
		{"banner version", with(good(ready), func(s *dialScript) {
			s.banner = dialSeedBanner(func(b *wire.Banner) { b.Version = 1 })
		}), ErrBanner},
		{"banner requires unknown", with(good(ready), func(s *dialScript) {
			s.banner = dialSeedBanner(func(b *wire.Banner) { b.Supported |= 1 << 40; b.Required = 1 << 40 })
		}), ErrBanner},
		{"banner without control slots", with(good(ready), func(s *dialScript) {
			s.banner = dialSeedBanner(func(b *wire.Banner) { b.Supported = wire.FeatureNoDataCRC })
		}), nil},
		{"banner short", with(good(ready), func(s *dialScript) { s.banner = dialSeedBanner(nil)[:20] }), ErrShort},
		{"hello another peer", with(good(ready), func(s *dialScript) {
			s.hello = hsFront(&msgrpb.Hello{EntityName: "osd.9", InstanceNonce: 9})
		}), ErrWrongPeer},
		{"hello bad name", with(good(ready), func(s *dialScript) { s.hello = hsFront(&msgrpb.Hello{EntityName: "osd"}) }), ErrProtocol},
		{"hello crc", with(good(ready), func(s *dialScript) { s.ctl = dialCtlCorrupt }), ErrCRC},
		{"auth refused", with(good(ready), func(s *dialScript) {
			s.authDone = hsFront(&msgrpb.AuthDone{Refused: "msgr: authentication refused: no"})
		}), ErrAuth},
		{"auth other method", with(good(ready), func(s *dialScript) { s.authDone = hsFront(&msgrpb.AuthDone{Method: authTLS13}) }), ErrProtocol},
		{"auth mode not offered", with(good(ready), func(s *dialScript) {
			s.authDone = hsFront(&msgrpb.AuthDone{Method: authNone, Mode: string(ModeSecure)})
		}), ErrProtocol},
		{"scripted auth more", with(good(dialSeedFrame(wire.TagAuthMore, &msgrpb.AuthMore{Payload: []byte{22, 3, 3}})), func(s *dialScript) {
			s.ctl = dialCtlScripted
		}), ErrProtocol},
		{"scripted early ready", with(good(ready), func(s *dialScript) { s.ctl = dialCtlScripted }), ErrProtocol},
	}
}

// dialAuthSeeds are the seeds of a dialer with auth, which the fuzzed
// acceptor answers after a real TLS step.
func dialAuthSeeds() []dialSeed {
	ready := scriptFrame{tag: wire.TagSessionReady, front: dialSeedReady}
	done := func(mode Mode) []byte {
		return hsFront(&msgrpb.AuthDone{Method: authTLS13, Mode: string(mode)})
	}
	script := func(mode Mode, ctl uint8, answers ...scriptFrame) dialScript {
		return dialScript{hello: dialSeedHello, authDone: done(mode), answers: scriptFrames(answers...), ctl: ctl}
	}
	const (
		secure       = 1 * dialCtlModes
		preferSecure = 2 * dialCtlModes
		preferCRC    = 3 * dialCtlModes
	)
	return []dialSeed{
		{"crc", script(ModeCRC, dialCtlProve, ready), nil},
		{"secure", script(ModeSecure, dialCtlProve|secure, ready), nil},
		{"prefer secure, secure", script(ModeSecure, dialCtlProve|preferSecure, ready), nil},
		{"prefer crc, crc", script(ModeCRC, dialCtlProve|preferCRC, ready), nil},
		{"secure wait", script(ModeSecure, dialCtlProve|secure, dialSeedFrame(wire.TagWait, &msgrpb.Wait{})), errWait},
		{"secure reset then ready", script(ModeSecure, dialCtlProve|preferSecure,
			dialSeedFrame(wire.TagSessionReset, &msgrpb.SessionReset{Reason: "no such session"}), ready), nil},
		{"secure reset closed", script(ModeSecure, dialCtlProve|secure,
			dialSeedFrame(wire.TagSessionReset, &msgrpb.SessionReset{Closed: true})), ErrClosedByPeer},
		{"secure session frame", script(ModeSecure, dialCtlProve|secure, scriptFrame{tag: wire.TagAck}), ErrProtocol},
		{"secure answer in clear", script(ModeSecure, dialCtlProve|dialCtlClear|secure, ready), ErrProtocol},
		{"secure without proof", script(ModeSecure, secure, ready), ErrAuth},
		{"crc chosen, secure offered", script(ModeCRC, dialCtlProve|secure, ready), ErrProtocol},
		{"proof of another mode", script(ModeSecure, dialCtlProve|preferCRC, ready), nil},
		{"refused", dialScript{hello: dialSeedHello, authDone: hsFront(&msgrpb.AuthDone{Refused: ErrMode.Error() + ": none"}),
			ctl: dialCtlProve | secure}, ErrMode},
		{"hello not the certificate's", dialScript{hello: hsFront(&msgrpb.Hello{EntityName: "osd.5"}),
			authDone: done(ModeSecure), answers: scriptFrames(ready), ctl: dialCtlProve | secure}, ErrWrongPeer},
		{"scripted garbage flight", dialScript{hello: dialSeedHello, ctl: dialCtlScripted | secure,
			answers: scriptFrames(dialSeedFrame(wire.TagAuthMore, &msgrpb.AuthMore{Payload: []byte("\x15\x03\x03\x00\x02\x02\x28")}))}, ErrAuth},
		{"scripted done before tls", dialScript{hello: dialSeedHello, ctl: dialCtlScripted | secure,
			answers: scriptFrames(dialSeedFrame(wire.TagAuthDone, &msgrpb.AuthDone{Method: authTLS13, Mode: "secure"}))}, ErrAuth},
	}
}

func addDialSeeds(f *testing.F, seeds []dialSeed) {
	for _, sd := range seeds {
		s := sd.s
		f.Add(s.banner, s.hello, s.authDone, s.answers, s.tail, s.ctl)
	}
}

// FuzzDialHandshake fuzzes what an acceptor sends a dialer without auth:
// banner, HELLO, AUTH_DONE, the session step's answers and what follows.
func FuzzDialHandshake(f *testing.F) {
	addDialSeeds(f, dialSeeds())
	f.Fuzz(func(t *testing.T, banner, hello, authDone, answers, tail []byte, ctl uint8) {
		fuzzDial(t, &dialScript{banner, hello, authDone, answers, tail, ctl}, nil)
	})
}

// FuzzDialHandshakeAuth is FuzzDialHandshake for a dialer with the tls13
// method, in crc and secure modes: the acceptor's TLS flights are real
// (or, scripted, fuzzed), its AUTH_DONE fuzzed, and in secure mode its
// answers sealed under the link's real keys.
func FuzzDialHandshakeAuth(f *testing.F) {
	keys := newDialFuzzKeys(f)
	addDialSeeds(f, dialAuthSeeds())
	f.Fuzz(func(t *testing.T, banner, hello, authDone, answers, tail []byte, ctl uint8) {
		fuzzDial(t, &dialScript{banner, hello, authDone, answers, tail, ctl}, keys)
	})
}

// TestDialHandshakeSeeds runs the dialer fuzz targets' seeds: each must
// end the dial as it says (a session, or the error it names), so the
// fuzzer starts from inputs that reach each step of the dialer's
// handshake; and once the messengers are shut down, nothing the attempts
// started may still run.
func TestDialHandshakeSeeds(t *testing.T) {
	before := runtime.NumGoroutine()
	keys := newDialFuzzKeys(t)
	for _, tc := range []struct {
		name  string
		seeds []dialSeed
		keys  *dialFuzzKeys
	}{{"crc", dialSeeds(), nil}, {"auth", dialAuthSeeds(), keys}} {
		for _, sd := range tc.seeds {
			t.Run(tc.name+"/"+sd.name, func(t *testing.T) {
				err := fuzzDial(t, &sd.s, tc.keys)
				switch {
				case sd.want == nil && err != nil:
					t.Fatalf("dial: %v, want a session", err)
				case sd.want != nil && !errors.Is(err, sd.want):
					t.Fatalf("dial: %v, want %v", err, sd.want)
				}
			})
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after shutdown, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond) // polling, not synchronisation
	}
}
