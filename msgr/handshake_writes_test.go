package msgr_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
)

// writesTransport records the tags of each batch the dialer (writes)
// and the acceptor (accepted) write: the handshake's writes, one string
// per write.
type writesTransport struct {
	*msgrtest.MemTransport
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
	l, err := t.MemTransport.Listen(ctx, addr, opts)
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
	l, err := t.MemTransport.Dial(ctx, addr, opts)
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

func (l *writesLink) EndHandshake() {
	if h, ok := l.Link.(wire.HandshakeEnder); ok {
		h.EndHandshake()
	}
}

// TestHandshakeWrites: after its HELLO and AUTH_REQUEST the dialer sends
// its last TLS flight with its first SESSION_REQUEST (sealed in secure
// mode) when it offers one mode, and so knows the mode before AUTH_DONE
// says it: a round trip fewer. Offering two, it waits for AUTH_DONE
// before it asks for a session. Each side's HELLO goes first, alone.
func TestHandshakeWrites(t *testing.T) {
	ca := msgrtest.NewTestCA(t)
	for _, c := range []struct {
		dialer, acceptor []msgr.Mode
		want             []string
	}{
		{[]msgr.Mode{msgr.ModeCRC}, []msgr.Mode{msgr.ModeCRC}, []string{"HELLO", "AUTH_REQUEST", "AUTH_MORE+SESSION_REQUEST"}},
		{[]msgr.Mode{msgr.ModeSecure}, []msgr.Mode{msgr.ModeSecure}, []string{"HELLO", "AUTH_REQUEST", "AUTH_MORE+SEALED_HANDSHAKE"}},
		{[]msgr.Mode{msgr.ModeSecure, msgr.ModeCRC}, []msgr.Mode{msgr.ModeSecure}, []string{"HELLO", "AUTH_REQUEST", "AUTH_MORE", "SEALED_HANDSHAKE"}},
		{[]msgr.Mode{msgr.ModeCRC, msgr.ModeSecure}, []msgr.Mode{msgr.ModeCRC}, []string{"HELLO", "AUTH_REQUEST", "AUTH_MORE", "SESSION_REQUEST"}},
	} {
		t.Run(fmt.Sprint(c.dialer), func(t *testing.T) {
			tr := &writesTransport{MemTransport: msgrtest.NewMemTransport()}
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
			addr, err := srv.Listen(t.Context(), "mem://0")
			if err != nil {
				t.Fatal(err)
			}
			conn, err := cli.Connect(t.Context(), addr, "osd.0")
			if err != nil {
				t.Fatal(err)
			}
			if err := conn.WaitReady(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := conn.Stats().Mode; got != c.acceptor[0] {
				t.Fatalf("mode %q, want %q", got, c.acceptor[0])
			}
			tr.mu.Lock()
			got := slices.Clone(tr.writes[:min(len(tr.writes), len(c.want))])
			acc := slices.Clone(tr.accepted[:min(len(tr.accepted), 2)])
			tr.mu.Unlock()
			if !slices.Equal(got, c.want) {
				t.Fatalf("the dialer's first writes: %q, want %q", got, c.want)
			}
			if want := []string{"HELLO", "AUTH_MORE"}; !slices.Equal(acc, want) {
				t.Fatalf("the acceptor's first writes: %q, want %q", acc, want)
			}
		})
	}
}
