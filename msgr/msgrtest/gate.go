package msgrtest

import (
	"context"
	"errors"
	"maps"
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

	mu    sync.Mutex
	down  bool
	links map[*gateLink]struct{}
	// hold, while set, is waited on by every link's Close, after it
	// has said so on closing: a transport whose teardown takes a while.
	hold    chan struct{}
	closing chan struct{}
}

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

// admit wraps l, or closes it while g is down.
func (g *Gate) admit(l wire.Link) (wire.Link, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down {
		l.Close()
		return nil, false
	}
	gl := &gateLink{Link: l, g: g}
	g.links[gl] = struct{}{}
	return gl, true
}

func (g *Gate) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
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
	g *Gate
}

func (l *gateLink) WriteFrames(frames []wire.Frame) error {
	if l.g.swallow.Load() {
		return nil
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

func (l *gateLink) Close() error {
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
