package s3gw

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/ospreystore/osprey/msgr/wire"
)

// maxDefaultConnections is DefaultMaxConnections' ceiling, far above
// what S3 clients keep open (aws-cli's max_concurrent_requests is 10 by
// default; benchmarks keep one per request in flight, some hundreds).
const maxDefaultConnections = 4096

// DefaultMaxConnections is the cap on open connections a gateway takes
// when Options.MaxConnections is 0: 4096, or half the process's limit
// on open files (RLIMIT_NOFILE) if that is less, so that a flood of
// connections leaves the other half to what shares the process (the
// gateway's own cluster connections; under osprey up the mon's and the
// OSDs' files and connections).
func DefaultMaxConnections() int {
	n := maxDefaultConnections
	if lim := openFileLimit(); lim > 0 && lim/2 < uint64(n) {
		n = int(max(lim/2, 1))
	}
	return n
}

// capWarnEvery is how often, at most, the gateway warns that it is at
// its connection cap.
const capWarnEvery = time.Minute

// connCap is a listener that holds at most n connections open at once
// (one more while Accept waits for a slot): at the cap, a new connection
// takes the slot of the longest idle kept-alive one, or of one whose
// first request is not all in yet, if it has waited for idleGrace, as
// nginx does when it runs out of connections (a client pool's idle ones
// would otherwise hold every slot while its new requests wait
// unanswered), else of the next connection whose answer starts,
// which says Connection: close; later clients wait in the kernel's
// listen backlog. Not netutil.LimitListener, whose
// connections hide their *net.TCPConn (golang/go#64830): net/http could
// not half-close them (CloseWrite) before it hangs up on a request it does
// not read to its end (a 431, an error answered before the body was
// read), and the client would get a reset, maybe before the answer.
type connCap struct {
	net.Listener
	n      int64
	in     *wire.Inbound // the bound per source host on connections without a whole request
	addr   string        // the listener's address, for the Inbound's log
	sem    *semaphore.Weighted
	log    *slog.Logger
	warned atomic.Int64 // when it last warned, in Unix ns
	closed context.Context
	close  context.CancelFunc

	mu   sync.Mutex
	idle map[*cappedConn]time.Time // kept-alive, between requests (track)
	// fresh: accepted, their first request's headers not yet in (track).
	// At the cap they give way as idle ones do: else connections that
	// never finish a request (slowloris: 4,200 sockets of one host,
	// no key needed, in a security probe) held every slot until
	// ReadHeaderTimeout, a minute, and every new client waited as long.
	fresh map[*cappedConn]time.Time
	// wanted: the Accept waiting for a slot found no connection idle for
	// idleGrace, so the next answer to start says Connection: close
	// (giveWay) and frees its slot. Accept arms it again every
	// reclaimEvery while it waits (an answer that took it may have been
	// on a connection already gone); a slot freed any way clears it
	// (release).
	wanted bool
}

const (
	// idleGrace: a connection idle for less is not closed for a new one,
	// since its client may be sending its next request on it right now
	// (Go's Transport reuses the connection that went idle last, and a
	// PUT it sent on one closed under it fails with a reset, not
	// resent); its next answer says Connection: close instead.
	idleGrace = time.Second
	// reclaimEvery is how often a waiting Accept looks again for a
	// connection to close.
	reclaimEvery = 100 * time.Millisecond
)

// track is the server's ConnState: it keeps the idle connections, which
// Accept may close at the cap.
func (l *connCap) track(c net.Conn, state http.ConnState) {
	cc, ok := c.(*cappedConn)
	if !ok {
		return
	}
	if state == http.StateActive {
		cc.in.Authenticated() // its first request is in: no longer early
	}
	l.mu.Lock()
	delete(l.idle, cc)
	delete(l.fresh, cc)
	switch state {
	case http.StateIdle:
		if l.idle == nil {
			l.idle = make(map[*cappedConn]time.Time)
		}
		l.idle[cc] = time.Now()
	case http.StateNew:
		// net/http turns a connection active once a request's headers
		// are read whole, not at its first byte.
		if l.fresh == nil {
			l.fresh = make(map[*cappedConn]time.Time)
		}
		l.fresh[cc] = time.Now()
	}
	l.mu.Unlock()
}

// giveWay reports whether the response about to start should close its
// connection after it (Connection: close), for a new connection waiting
// for a slot: a client told so opens a new connection for its next
// request.
func (l *connCap) giveWay() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.wanted
	l.wanted = false
	return w
}

// idleConns is how many connections are idle, kept alive (tests).
func (l *connCap) idleConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.idle)
}

// reclaim closes the connection that has waited longest for a request
// (idle, or fresh: its first one's headers not all in) if it has for
// idleGrace; else it has the next answer give way (wanted).
func (l *connCap) reclaim() {
	l.mu.Lock()
	var oldest *cappedConn
	var since time.Time
	for _, m := range []map[*cappedConn]time.Time{l.idle, l.fresh} {
		for c, t := range m {
			if oldest == nil || t.Before(since) {
				oldest, since = c, t
			}
		}
	}
	if oldest != nil && time.Since(since) >= idleGrace {
		delete(l.idle, oldest)
		delete(l.fresh, oldest)
	} else {
		oldest, l.wanted = nil, true
	}
	l.mu.Unlock()
	if oldest != nil {
		oldest.Close()
	}
}

// defaultMaxNewPerHost is Options.MaxNewPerHost's default, msgr's
// MaxUnauthPerHost's.
const defaultMaxNewPerHost = 256

func capConnections(ln net.Listener, n, perHost int, log *slog.Logger) *connCap {
	l := &connCap{Listener: ln, n: int64(n), sem: semaphore.NewWeighted(int64(n)), log: log, addr: ln.Addr().String(),
		in: wire.NewInbound(wire.InboundLimits{MaxConns: n, MaxEarlyPerHost: perHost, Who: "s3", Early: "without a whole request yet (osprey s3 --max-new-per-host)"}, log)}
	l.closed, l.close = context.WithCancel(context.Background())
	return l
}

// Accept takes the next connection first and then its slot: an idle
// connection is closed for a client that came, not ahead of one (the
// server calls Accept again as soon as one returns, so a slot taken
// first closed an idle connection at the cap whether or not anyone
// waited, and which one raced the server's record of them going idle).
// While it waits for a slot it holds that one connection over the cap.
func (l *connCap) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.sem.TryAcquire(1) {
			l.warn()
			if err := l.waitSlot(); err != nil {
				c.Close()
				return nil, net.ErrClosed
			}
		}
		// Over its host's bound on connections without a whole request
		// (counted and logged, rate-limited, by the Inbound): closed, and
		// the next one taken.
		ic, ok := l.in.Admit(l.addr, c.RemoteAddr().String())
		if !ok {
			c.Close()
			l.release()
			continue
		}
		return &cappedConn{Conn: c, release: func() { ic.Done(); l.release() }, in: ic}, nil
	}
}

// waitSlot waits for a slot, having a connection give way for it
// (reclaim) now and every reclaimEvery while none comes free.
func (l *connCap) waitSlot() error {
	defer func() {
		l.mu.Lock()
		l.wanted = false
		l.mu.Unlock()
	}()
	for {
		l.reclaim()
		ctx, cancel := context.WithTimeout(l.closed, reclaimEvery)
		err := l.sem.Acquire(ctx, 1)
		cancel()
		if err == nil || l.closed.Err() != nil {
			return err
		}
	}
}

// release frees a connection's slot. The waiting Accept, if any, takes
// it: nothing more need give way for it.
func (l *connCap) release() {
	l.mu.Lock()
	l.wanted = false
	l.mu.Unlock()
	l.sem.Release(1)
}

// Close closes the listener and ends an Accept waiting for a free slot.
func (l *connCap) Close() error {
	err := l.Listener.Close()
	l.close()
	return err
}

func (l *connCap) warn() {
	now := time.Now().UnixNano()
	last := l.warned.Load()
	if last != 0 && now-last < int64(capWarnEvery) || !l.warned.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn("s3: at the connection cap: connections waiting for a request (idle kept-alive, or their first one's headers not in) are closed for new ones, else none is accepted until one closes (osprey s3 --max-connections)",
		"max_connections", l.n)
}

// cappedConn is a connection that frees its slot of connCap's when
// closed.
type cappedConn struct {
	net.Conn
	once    sync.Once
	release func()
	in      *wire.InboundConn // its count in connCap's Inbound until its first request is in
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes the connection, as net/http does before it
// hangs up on a request it has not read to its end, so that the client
// reads the answer before the reset.
func (c *cappedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
