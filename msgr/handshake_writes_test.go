package msgr_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// writesTransport records the tags of each batch the dialer (writes)
// and the acceptor (accepted) write: the handshake's writes, one string
// per write.
type writesTransport struct {
	wire.Transport
	mu               sync.Mutex
	writes, accepted []string
}

type writesLink struct {
	wire.Link
	t      *writesTransport
	writes *[]string
}

type writesListener struct {
	wire.Listener
	t *writesTransport
}

func (t *writesTransport) Listen(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Listener, error) {
	l, err := t.Transport.Listen(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	return &writesListener{Listener: l, t: t}, nil
}

func (l *writesListener) Accept(ctx context.Context) (wire.Link, error) {
	link, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return &writesLink{Link: link, t: l.t, writes: &l.t.accepted}, nil
}

func (t *writesTransport) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
	l, err := t.Transport.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	return &writesLink{Link: l, t: t, writes: &t.writes}, nil
}

func (l *writesLink) WriteFrames(frames []wire.Frame) error {
	tags := make([]string, len(frames))
	for i := range frames {
		tags[i] = frames[i].Tag.String()
	}
	l.t.mu.Lock()
	*l.writes = append(*l.writes, strings.Join(tags, "+"))
	l.t.mu.Unlock()
	return l.Link.WriteFrames(frames)
}

func (l *writesLink) Buffered() bool {
	b, ok := l.Link.(interface{ Buffered() bool })
	return ok && b.Buffered()
}

func (l *writesLink) EndHandshake() {
	if h, ok := l.Link.(wire.HandshakeEnder); ok {
		h.EndHandshake()
	}
}

// TestHandshakeWrites: after its HELLO and AUTH_REQUEST the dialer sends
// its last TLS flight with its first SESSION_REQUEST (sealed in secure
// mode) when it offers one mode, and so knows the mode before AUTH_DONE
// says it: a round trip fewer. Offering two, it waits for AUTH_DONE
// before it asks for a session. Each side's HELLO goes first, alone. The
// acceptor that finds that SESSION_REQUEST already read in answers it in
// the write of its AUTH_DONE; otherwise AUTH_DONE goes at once. Over TCP,
// whose loopback delivers a small write whole, so that the request is
// always in when the acceptor looks.
func TestHandshakeWrites(t *testing.T) {
	ca := msgrtest.NewTestCA(t)
	for _, c := range []struct {
		dialer, acceptor []msgr.Mode
		want, accepted   []string
	}{
		{[]msgr.Mode{msgr.ModeCRC}, []msgr.Mode{msgr.ModeCRC},
			[]string{"HELLO", "AUTH_REQUEST", "AUTH_MORE+SESSION_REQUEST"}, []string{"HELLO", "AUTH_MORE", "AUTH_DONE+SESSION_READY"}},
		{[]msgr.Mode{msgr.ModeSecure}, []msgr.Mode{msgr.ModeSecure},
			[]string{"HELLO", "AUTH_REQUEST", "AUTH_MORE+SEALED_HANDSHAKE"}, []string{"HELLO", "AUTH_MORE", "AUTH_DONE+SEALED_HANDSHAKE"}},
		{[]msgr.Mode{msgr.ModeSecure, msgr.ModeCRC}, []msgr.Mode{msgr.ModeSecure},
			[]string{"HELLO", "AUTH_REQUEST", "AUTH_MORE", "SEALED_HANDSHAKE"}, []string{"HELLO", "AUTH_MORE", "AUTH_DONE", "SEALED_HANDSHAKE"}},
		{[]msgr.Mode{msgr.ModeCRC, msgr.ModeSecure}, []msgr.Mode{msgr.ModeCRC},
			[]string{"HELLO", "AUTH_REQUEST", "AUTH_MORE", "SESSION_REQUEST"}, []string{"HELLO", "AUTH_MORE", "AUTH_DONE", "SESSION_READY"}},
	} {
		t.Run(fmt.Sprint(c.dialer), func(t *testing.T) {
			tr := &writesTransport{Transport: tcp.Transport{}}
			ts := []wire.Transport{tr}
			mk := func(name msgr.EntityName, modes []msgr.Mode) *msgr.Messenger {
				m, err := msgr.New(msgr.Options{Name: name, Transports: ts,
					Auth:       &msgr.AuthOptions{Keyring: ca.Keyring(t, name), Modes: modes},
					Logger:     slog.New(slog.DiscardHandler),
					Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) { m.Release() })})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Shutdown(context.Background()) })
				return m
			}
			srv, cli := mk("osd.0", c.acceptor), mk("osd.1", c.dialer)
			addr, err := srv.Listen(t.Context(), "tcp://127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			conn, err := cli.Connect(t.Context(), addr, "osd.0")
			if err != nil {
				t.Fatal(err)
			}
			// Bounded: an acceptor that held AUTH_DONE for a request that
			// is not coming stalls the handshake until HandshakeTimeout,
			// and the dialer then redials for ever.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if err := conn.WaitReady(ctx); err != nil {
				t.Fatalf("no session: %v", err)
			}
			if got := conn.Stats().Mode; got != c.acceptor[0] {
				t.Fatalf("mode %q, want %q", got, c.acceptor[0])
			}
			tr.mu.Lock()
			got := slices.Clone(tr.writes[:min(len(tr.writes), len(c.want))])
			acc := slices.Clone(tr.accepted[:min(len(tr.accepted), len(c.accepted))])
			tr.mu.Unlock()
			if !slices.Equal(got, c.want) {
				t.Fatalf("the dialer's first writes: %q, want %q", got, c.want)
			}
			if !slices.Equal(acc, c.accepted) {
				t.Fatalf("the acceptor's first writes: %q, want %q", acc, c.accepted)
			}
		})
	}
}
