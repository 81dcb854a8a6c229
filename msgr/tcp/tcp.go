// Package tcp is the messenger's TCP transport: frames on a TCP stream with
// TCP_NODELAY, batched vectored writes and pooled receive chunks (see
// wire.StreamLink). It must never block an Accept on one slow peer: each
// accepted connection does its banner exchange on its own goroutine.
package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// BannerTimeout bounds the banner exchange of a new connection.
const BannerTimeout = 10 * time.Second

// Transport is the TCP transport. The zero value is ready to use.
type Transport struct{}

// Scheme returns "tcp".
func (Transport) Scheme() string { return "tcp" }

// Sockets are as Go's net package makes them: TCP_NODELAY on (no call of
// ours, which would be a second setsockopt per socket), and TCP keepalive
// on. Keepalive costs four setsockopt calls per socket, about 1 % of a
// loopback handshake's CPU, but finds a peer that died while this side
// held its window and had no credit to send: IdleTimeout spares such a
// link (docs/protocol.md §10).

// dial connects to addr.
func dial(ctx context.Context, addr string) (*net.TCPConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// Dial connects to host:port and exchanges banners.
func (Transport) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
	c, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	l, err := start(ctx, c, opts)
	if err != nil {
		c.Close()
		return nil, err
	}
	return l, nil
}

func start(ctx context.Context, c *net.TCPConn, opts wire.LinkOptions) (*wire.StreamLink, error) {
	deadline := time.Now().Add(BannerTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	// A cancelled ctx must unblock the exchange.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	features, err := wire.ExchangeBanner(c, opts.Banner)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("tcp %s: %w", c.RemoteAddr(), err)
	}
	c.SetDeadline(time.Time{})
	l := wire.NewStreamLink(c, features, opts)
	l.SetWriteSpace(writeSpace(c))
	if p := newPollConn(c); p != nil {
		l.SetPollReader(p)
	}
	return l, nil
}

// listen binds addr.
func listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", addr)
}

// Listen binds host:port (port 0 picks one) and starts accepting.
func (Transport) Listen(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Listener, error) {
	ln, err := listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	l := &listener{ln: ln, opts: opts, links: make(chan wire.Link)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

type listener struct {
	ln     net.Listener
	opts   wire.LinkOptions
	links  chan wire.Link
	ctx    context.Context // cancelled by Close; ends banner exchanges
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (l *listener) Addr() string { return l.ln.Addr().String() }

// acceptLoop accepts until the listener is closed. A failed accept
// (EMFILE, ENFILE, ECONNABORTED…) is retried after a backoff, never the end
// of the loop; a connection over the messenger's limit is closed at once.
func (l *listener) acceptLoop() {
	defer l.wg.Done()
	retry := wire.AcceptRetry{In: l.opts.Inbound, Listener: "tcp://" + l.Addr()}
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.ctx.Err() != nil || !retry.Failed(err, l.ctx.Done()) {
				l.cancel()
				return
			}
			continue
		}
		retry.OK()
		ic, ok := l.opts.Inbound.Admit(retry.Listener, c.RemoteAddr().String())
		if !ok {
			c.Close()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			link, err := start(l.ctx, c.(*net.TCPConn), l.opts)
			if err != nil {
				// A peer that fails the banner never became a link; it
				// is not the messenger's to hear about, only to count.
				c.Close()
				ic.BannerFailed()
				ic.Done()
				return
			}
			link.SetInbound(ic)
			select {
			case l.links <- link:
			case <-l.ctx.Done():
				link.Close()
			}
		}()
	}
}

func (l *listener) Accept(ctx context.Context) (wire.Link, error) {
	select {
	case link := <-l.links:
		return link, nil
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops accepting and waits for in-flight banner exchanges to end.
func (l *listener) Close() error {
	l.cancel()
	err := l.ln.Close()
	l.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
