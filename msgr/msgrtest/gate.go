package msgrtest

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ospreystore/osprey/msgr/wire"
)

// ErrGateDown is the dial error of a Gate that is down.
var ErrGateDown = errors.New("msgrtest: gate down")

// Gate wraps a transport so that a test can take a messenger's links down
// and keep them down for as long as it likes, and lose frames on the way:
// a partition that ends when the test says so, with no timing involved.
type Gate struct {
	wire.Transport
	swallow atomic.Bool
	hang    atomic.Bool
	hanging atomic.Int64 // dials blocked by hang now
	dials   atomic.Int64 // Dial calls

	mu    sync.Mutex
	down  bool
	links map[*gateLink]struct{}
	// hold, while set, is waited on by every link's Close, after it
	// has said so on closing: a transport whose teardown takes a while.
	hold    chan struct{}
	closing chan struct{}
	// writeHolds hold writes of frames by tag (HoldWrites).
	writeHolds map[wire.Tag]*writeHold
	// dialHold, while set, holds dials (HoldDials).
	dialHold *dialHold
}

type dialHold struct{ held, release chan struct{} }

// writeHold is one HoldWrites: fail is set before release closes.
type writeHold struct {
	held    chan struct{}
	release chan struct{}
	fail    bool
}

// ErrWriteFailed is what a write held by HoldWrites returns when released
// to fail.
var ErrWriteFailed = errors.New("msgrtest: held write failed")

// NewGate returns an open gate over t.
func NewGate(t wire.Transport) *Gate {
	return &Gate{Transport: t, links: map[*gateLink]struct{}{}}
}

// MaxRecvWindow is the wrapped transport's cap on sessions' windows (an
// RDMA transport's), 0 if it has none: a gate must not lift it.
func (g *Gate) MaxRecvWindow() int {
	if mr, ok := g.Transport.(interface{ MaxRecvWindow() int }); ok {
		return mr.MaxRecvWindow()
	}
	return 0
}

// Down closes every link made through g and, until Up, fails its dials
// with ErrGateDown and closes the links it accepts.
func (g *Gate) Down() {
	g.mu.Lock()
	g.down = true
	links := slices.Collect(maps.Keys(g.links))
	g.mu.Unlock()
	for _, l := range links {
		l.Close()
	}
}

// Up lets links through again.
func (g *Gate) Up() {
	g.mu.Lock()
	g.down = false
	g.mu.Unlock()
}

// Swallow makes the links' writes, while on, succeed without sending
// anything: frames that left this side and were lost.
func (g *Gate) Swallow(on bool) { g.swallow.Store(on) }

// HangDials makes dials, while on, block until their ctx ends, without
// dialing: a peer this side cannot reach, whose packets are dropped.
func (g *Gate) HangDials(on bool) { g.hang.Store(on) }

// Hanging is how many dials HangDials blocks now.
func (g *Gate) Hanging() int { return int(g.hanging.Load()) }

// Dials is how many times Dial was called.
func (g *Gate) Dials() int { return int(g.dials.Load()) }

// HoldCloses makes the links' Close calls, from now on, wait until release
// is called, as an RDMA link's does for its posted sends; each Close sends
// on closing as it starts waiting. Down's own closes must not be held.
func (g *Gate) HoldCloses() (closing <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold, g.closing = make(chan struct{}), make(chan struct{}, 64)
	hold := g.hold
	var once sync.Once
	return g.closing, func() { once.Do(func() { close(hold) }) }
}

// HoldDials makes dials from now on wait until release, whatever their
// ctx, and then go through with a ctx that is never cancelled: a connect
// that cannot be interrupted and gets through late. Each sends on held
// as it starts waiting.
func (g *Gate) HoldDials() (held <-chan struct{}, release func()) {
	h := &dialHold{held: make(chan struct{}, 64), release: make(chan struct{})}
	g.mu.Lock()
	g.dialHold = h
	g.mu.Unlock()
	var once sync.Once
	return h.held, func() {
		once.Do(func() {
			g.mu.Lock()
			if g.dialHold == h {
				g.dialHold = nil
			}
			g.mu.Unlock()
			close(h.release)
		})
	}
}

// HoldWrites makes each write of a frame tagged tag, on any link of g,
// wait until release; each sends on held as it starts waiting. release
// ends the hold: the held writes go on, or with fail return
// ErrWriteFailed (the link stays open: its owner closes it, as after any
// failed write). A held write also returns once its link is closed.
// Holds of different tags are independent; a second hold of one tag
// replaces the first for writes from then on.
func (g *Gate) HoldWrites(tag wire.Tag) (held <-chan struct{}, release func(fail bool)) {
	h := &writeHold{held: make(chan struct{}, 64), release: make(chan struct{})}
	g.mu.Lock()
	if g.writeHolds == nil {
		g.writeHolds = map[wire.Tag]*writeHold{}
	}
	g.writeHolds[tag] = h
	g.mu.Unlock()
	var once sync.Once
	return h.held, func(fail bool) {
		once.Do(func() {
			g.mu.Lock()
			if g.writeHolds[tag] == h {
				delete(g.writeHolds, tag)
			}
			g.mu.Unlock()
			h.fail = fail
			close(h.release)
		})
	}
}

// holdFor returns the hold that frames are subject to, if any.
func (g *Gate) holdFor(frames []wire.Frame) *writeHold {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range frames {
		if h := g.writeHolds[frames[i].Tag]; h != nil {
			return h
		}
	}
	return nil
}

// admit wraps l, or closes it while g is down.
func (g *Gate) admit(l wire.Link) (wire.Link, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down {
		l.Close()
		return nil, false
	}
	gl := &gateLink{Link: l, g: g, closed: make(chan struct{})}
	g.links[gl] = struct{}{}
	return gl, true
}

func (g *Gate) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
	g.dials.Add(1)
	if g.hang.Load() {
		g.hanging.Add(1)
		defer g.hanging.Add(-1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	g.mu.Lock()
	hold := g.dialHold
	g.mu.Unlock()
	if hold != nil {
		select {
		case hold.held <- struct{}{}:
		default:
		}
		<-hold.release
		ctx = context.WithoutCancel(ctx)
	}
	g.mu.Lock()
	down := g.down
	g.mu.Unlock()
	if down {
		return nil, ErrGateDown
	}
	l, err := g.Transport.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	gl, ok := g.admit(l)
	if !ok {
		return nil, ErrGateDown
	}
	return gl, nil
}

func (g *Gate) Listen(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Listener, error) {
	l, err := g.Transport.Listen(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	return &gateListener{Listener: l, g: g}, nil
}

type gateListener struct {
	wire.Listener
	g *Gate
}

func (l *gateListener) Accept(ctx context.Context) (wire.Link, error) {
	for {
		link, err := l.Listener.Accept(ctx)
		if err != nil {
			return nil, err
		}
		if gl, ok := l.g.admit(link); ok {
			return gl, nil
		}
	}
}

type gateLink struct {
	wire.Link
	g         *Gate
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *gateLink) WriteFrames(frames []wire.Frame) error {
	if l.g.swallow.Load() {
		return nil
	}
	if h := l.g.holdFor(frames); h != nil {
		select {
		case h.held <- struct{}{}:
		default:
		}
		select {
		case <-h.release:
		case <-l.closed:
			return net.ErrClosed
		}
		if h.fail { // written before release closed
			return ErrWriteFailed
		}
	}
	return l.Link.WriteFrames(frames)
}

// EndHandshake passes the messenger's call on: without it a link that
// honours LinkOptions.Handshake would keep refusing session frames.
func (l *gateLink) EndHandshake() {
	if h, ok := l.Link.(wire.HandshakeEnder); ok {
		h.EndHandshake()
	}
}

// Inbound passes the listener's account of an accepted link on.
func (l *gateLink) Inbound() *wire.InboundConn { return wire.InboundOf(l.Link) }

func (l *gateLink) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	l.g.mu.Lock()
	delete(l.g.links, l)
	hold, closing := l.g.hold, l.g.closing
	l.g.mu.Unlock()
	if hold != nil {
		select {
		case closing <- struct{}{}:
		default:
		}
		<-hold
	}
	return l.Link.Close()
}
