package msgr_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/wire"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	var got atomic.Int64
	done := make(chan struct{})
	const N = 10000
	srv, err := msgr.New(msgr.Options{Name: "osd.1", Transports: msgr.TCPOnly, Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) {
		if int64(m.Seq()) != got.Load()+1 {
			t.Errorf("seq %d after %d", m.Seq(), got.Load())
		}
		if got.Add(1) == N {
			close(done)
		}
		m.Release()
	})})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen(ctx, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := msgr.New(msgr.Options{Name: "osd.2", Transports: msgr.TCPOnly, Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) { m.Release() })})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cli.Connect(ctx, addr, "osd.1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range N {
		if err := c.Send(ctx, msgr.NewMessage(1, []byte("hello"), make([]byte, i%5000))); err != nil {
			t.Fatal(err)
		}
	}
	// A stall fails, not a slow machine: the deadline moves with every
	// delivery (a race build at load 24 delivered 7,100 in 15 s).
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for last, stalled := int64(-1), time.Now(); ; {
		select {
		case <-done:
		case <-tick.C:
			if n := got.Load(); n != last {
				last, stalled = n, time.Now()
			} else if time.Since(stalled) > 10*time.Second {
				for sc := range srv.Conns() {
					t.Logf("server %+v", sc.Stats())
				}
				t.Fatalf("got %d of %d, none for 10s; stats %+v", n, N, c.Stats())
			}
			continue
		}
		break
	}
	t.Logf("client stats %+v", c.Stats())
	cli.Shutdown(ctx)
	srv.Shutdown(ctx)
}

// TestSetPayloadReleasedAfterAck checks the ownership rule of
// Message.SetPayload on a transport without registered memory: the payload
// arrives, and the messenger drops its reference on the buffer exactly once,
// after the peer has acked the message, not before.
func TestSetPayloadReleasedAfterAck(t *testing.T) {
	ctx := context.Background()
	const N = 200
	var got atomic.Int64
	srv, err := msgr.New(msgr.Options{Name: "osd.1", Transports: msgr.TCPOnly, Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) {
		if len(m.Data) != 3000 || m.Data[0] != byte(m.Seq()) {
			t.Errorf("message %d: %d bytes starting %d", m.Seq(), len(m.Data), m.Data[0])
		}
		got.Add(1)
		m.Release()
	})})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(ctx)
	addr, err := srv.Listen(ctx, "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := msgr.New(msgr.Options{Name: "osd.2", Transports: msgr.TCPOnly, Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) { m.Release() })})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Shutdown(ctx)
	c, err := cli.Connect(ctx, addr, "osd.1")
	if err != nil {
		t.Fatal(err)
	}
	var freed atomic.Int64
	for i := range N {
		b, err := c.AllocPayload(3000)
		if err != nil {
			t.Fatal(err)
		}
		b.B[0] = byte(i + 1)
		// Wrap in an external buffer to observe the last release.
		ext := wire.NewExternalBuffer(b.B, func(*wire.Buffer) { freed.Add(1); b.Release() })
		m := msgr.NewMessage(1, nil, nil)
		m.SetPayload(ext)
		if err := c.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	// The peer acks a message once it has it, which may be before its
	// dispatcher ran: wait for both counts.
	for (freed.Load() < N || got.Load() < N) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling interval
	}
	if f, g := freed.Load(), got.Load(); f != N || g != N {
		t.Fatalf("%d payloads released, %d delivered; want %d each", f, g, N)
	}
	if st := c.Stats(); st.QueuedMsgs != 0 {
		t.Fatalf("payloads released with %d messages still queued", st.QueuedMsgs)
	}
}
