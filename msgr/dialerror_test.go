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

// dialErrorMessenger is a messenger that redials fast and hands the
// errors of its failed dials (Options.OnDialError) to errs; the test
// ends it.
func dialErrorMessenger(t *testing.T) (cli *Messenger, errs chan error) {
	errs = make(chan error, 16)
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
	t.Cleanup(cli.Kill)
	return cli, errs
}

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
	cli, errs := dialErrorMessenger(t)
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

// TestOnDialErrorClassifies: a dial that fails at the banner reports an
// error msgr's own sentinels classify: ErrBanner for a peer that speaks
// something else, ErrShort (which is also io.ErrUnexpectedEOF) for one
// that hangs up inside its banner.
func TestOnDialErrorClassifies(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply string
		want  []error
	}{
		{"not osprey", "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n", []error{ErrBanner}},
		{"cut short", "OSPREYMS\x02\x00", []error{ErrShort, io.ErrUnexpectedEOF}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					// Our banner read first: closing with it unread
					// would reset the connection instead.
					io.CopyN(io.Discard, c, 32)
					c.Write([]byte(tc.reply))
					c.Close()
				}
			}()
			cli, errs := dialErrorMessenger(t)
			if _, err := cli.Connect(context.Background(), "tcp://"+ln.Addr().String(), "osd.0"); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errs:
				for _, want := range tc.want {
					if !errors.Is(err, want) {
						t.Errorf("OnDialError got %v, want %v", err, want)
					}
				}
			case <-time.After(10 * time.Second):
				t.Fatal("OnDialError never called")
			}
		})
	}
}
