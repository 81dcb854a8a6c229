package msgr

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestOnDialErrorRefused: a lossless session to a port nobody listens on
// reports each refused dial through Options.OnDialError, with an error
// that errors.Is ECONNREFUSED: the OSD's fast failure report relies on it.
func TestOnDialErrorRefused(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "tcp://" + ln.Addr().String()
	ln.Close() // now refused
	errs := make(chan error, 16)
	cli, err := New(Options{Name: "osd.1", Transports: tcpOnly, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Dispatcher: DispatchFunc(func(m *Message) { m.Release() }),
		Reconnect:  Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond},
		OnDialError: func(c *Conn, err error) {
			select {
			case errs <- err:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Kill()
	if _, err := cli.Connect(ctx, addr, "osd.0"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("OnDialError got %v, want ECONNREFUSED", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnDialError never called for a refused dial")
	}
}
