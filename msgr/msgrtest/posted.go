package msgrtest

import (
	"context"
	"fmt"
	"sync"

	"github.com/ospreystore/osprey/msgr/wire"
)

// PostedTransport is an in-memory transport under a scheme of its own that
// receives as an RDMA link does: the messenger caps sessions' windows over
// it at MaxRecvWindow, each link has max(LinkOptions.RecvWindow, 4)
// receives (more fail the dial or listen, as a receive queue too short
// does), and a session frame holds one from the moment it is written
// until the receiver is done with it (at once for a frame without a
// buffer, on its buffer's last release otherwise, the buffer being lent as
// an RDMA receive buffer is). A frame written when every receive of the
// peer's link is taken is what verbs reports as receiver-not-ready: it is
// recorded (Err), so a test sees credits granted beyond receives posted.
//
// Handshake frames are not counted, as on RDMA, where they need no credit.
// Every messenger of a test must share one PostedTransport.
type PostedTransport struct {
	mem    *MemTransport
	scheme string
	max    int

	mu         sync.Mutex
	pairs      map[string]*postedPair // by the dialer's local address
	violations []string
}

// postedPair is one link's receives, each way.
type postedPair struct{ toDialer, toAcceptor postedSide }

// postedSide is the receives of one end of a link.
type postedSide struct {
	mu            sync.Mutex
	posted, taken int
	mostTaken     int
}

// NewPostedTransport returns a transport for scheme whose sessions have at
// most maxWindow credits, as an RDMA transport's MaxRecvWindow.
func NewPostedTransport(scheme string, maxWindow int) *PostedTransport {
	return &PostedTransport{mem: NewMemTransport(), scheme: scheme, max: maxWindow, pairs: map[string]*postedPair{}}
}

func (t *PostedTransport) Scheme() string { return t.scheme }

// MaxRecvWindow caps the window of sessions over t (msgr asks for it).
func (t *PostedTransport) MaxRecvWindow() int { return t.max }

// Err reports the first frame written with no receive free for it, and
// how many there were.
func (t *PostedTransport) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.violations) == 0 {
		return nil
	}
	return fmt.Errorf("%d frames written with no receive posted, first: %s", len(t.violations), t.violations[0])
}

// MostTaken is the most receives one link of t has had taken at once.
func (t *PostedTransport) MostTaken() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	most := 0
	for _, p := range t.pairs {
		for _, s := range []*postedSide{&p.toDialer, &p.toAcceptor} {
			s.mu.Lock()
			most = max(most, s.mostTaken)
			s.mu.Unlock()
		}
	}
	return most
}

// pair returns the receives of the link the dialer knows as local.
func (t *PostedTransport) pair(local string) *postedPair {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pairs[local]
	if p == nil {
		p = &postedPair{}
		t.pairs[local] = p
	}
	return p
}

func (t *PostedTransport) violation(format string, args ...any) {
	t.mu.Lock()
	t.violations = append(t.violations, fmt.Sprintf(format, args...))
	t.mu.Unlock()
}

// recvs is how many receives a link posts for opts; like an RDMA link, one
// asked for more than its receive queue holds fails.
func (t *PostedTransport) recvs(opts wire.LinkOptions) (int, error) {
	n := max(opts.RecvWindow, 4)
	if n > max(t.max, 4) {
		return 0, fmt.Errorf("%s: receive window of %d exceeds the receive queue of %d", t.scheme, n, t.max)
	}
	return n, nil
}

func (t *PostedTransport) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
	recvs, err := t.recvs(opts)
	if err != nil {
		return nil, err
	}
	l, err := t.mem.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	p := t.pair(l.LocalAddr())
	p.toDialer.post(recvs)
	return &postedLink{Link: l, t: t, in: &p.toDialer, out: &p.toAcceptor}, nil
}

func (t *PostedTransport) Listen(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Listener, error) {
	recvs, err := t.recvs(opts)
	if err != nil {
		return nil, err
	}
	l, err := t.mem.Listen(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	return &postedListener{Listener: l, t: t, recvs: recvs}, nil
}

type postedListener struct {
	wire.Listener
	t     *PostedTransport
	recvs int
}

func (l *postedListener) Accept(ctx context.Context) (wire.Link, error) {
	link, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	p := l.t.pair(link.RemoteAddr())
	p.toAcceptor.post(l.recvs)
	return &postedLink{Link: link, t: l.t, in: &p.toAcceptor, out: &p.toDialer}, nil
}

func (s *postedSide) post(n int) {
	s.mu.Lock()
	s.posted = n
	s.mu.Unlock()
}

// take takes a receive for a frame written to this side; false if none
// was free.
func (s *postedSide) take() (ok bool, posted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken++
	s.mostTaken = max(s.mostTaken, s.taken)
	return s.taken <= s.posted, s.posted
}

func (s *postedSide) give() {
	s.mu.Lock()
	s.taken--
	s.mu.Unlock()
}

// postedLink is one end of a link: out is the peer's receives, which its
// writes take; in is its own, which its reads give back.
type postedLink struct {
	wire.Link
	t       *PostedTransport
	in, out *postedSide
}

func (l *postedLink) WriteFrames(frames []wire.Frame) error {
	for i := range frames {
		if tag := frames[i].Tag; !tag.Handshake() {
			if ok, posted := l.out.take(); !ok {
				l.t.violation("%v frame from %s to %s with all %d receives taken", tag, l.LocalAddr(), l.RemoteAddr(), posted)
			}
		}
	}
	return l.Link.WriteFrames(frames)
}

func (l *postedLink) ReadFrame(f *wire.Frame) error {
	if err := l.Link.ReadFrame(f); err != nil {
		return err
	}
	switch {
	case f.Tag.Handshake():
	case f.Buf == nil:
		l.in.give() // a frame without segments: its receive is posted again at once
	default:
		// The receive stays taken until the frame's buffer is released,
		// lent as an RDMA receive buffer is (msgr copies what it keeps).
		mem, in := f.Buf, l.in
		lent := wire.NewExternalBuffer(mem.B, func(*wire.Buffer) { mem.Release(); in.give() })
		lent.Lent = true
		f.Buf = lent
	}
	return nil
}

// Buffered reports whether another frame is waiting (msgr batches acks).
func (l *postedLink) Buffered() bool {
	b, ok := l.Link.(interface{ Buffered() bool })
	return ok && b.Buffered()
}

// Inbound passes the listener's account of an accepted link on.
func (l *postedLink) Inbound() *wire.InboundConn { return wire.InboundOf(l.Link) }

// EndHandshake passes the messenger's call on.
func (l *postedLink) EndHandshake() {
	if h, ok := l.Link.(wire.HandshakeEnder); ok {
		h.EndHandshake()
	}
}
