package msgrtest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
)

func testOrdering(t *testing.T, env Env) {
	p := newPair(t, env, nil, nil)
	n := env.n(20000)
	sendN(t, p.conn, 1, 0, n, func(i int) int { return (i * 7919) % 9000 })
	waitCount(t, p.srvRec, int64(n), 30*time.Second, p.conn)
	if p.srvRec.Next(1) != uint64(n) {
		t.Fatalf("delivered %d in order, want %d", p.srvRec.Next(1), n)
	}
	Eventually(t, 10*time.Second, "all acked", func() bool { return p.conn.Stats().QueuedMsgs == 0 })
}

func testBidirectional(t *testing.T, env Env) {
	p := newPair(t, env, nil, nil)
	n := env.n(10000)
	var srvConn *msgr.Conn
	Eventually(t, 5*time.Second, "server conn", func() bool {
		for c := range p.srv.Conns() {
			srvConn = c
		}
		return srvConn != nil
	})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); sendN(t, p.conn, 1, 0, n, func(i int) int { return i % 3000 }) }()
	go func() { defer wg.Done(); sendN(t, srvConn, 2, 0, n, func(i int) int { return (i * 13) % 5000 }) }()
	wg.Wait()
	waitCount(t, p.srvRec, int64(n), 30*time.Second, p.conn)
	waitCount(t, p.cliRec, int64(n), 30*time.Second, srvConn)
}

func testExactlyOnceUnderFaults(t *testing.T, env Env) {
	faults := func(seed int64) func(*msgr.Options) {
		return func(o *msgr.Options) {
			o.Faults = msgr.FaultInjection{EveryNFrames: 1000, Seed: seed}
			o.RecvWindowMsgs = 256
		}
	}
	p := newPair(t, env, faults(1), faults(2))
	n := env.n(100000)
	sendN(t, p.conn, 1, 0, n, func(i int) int { return i % 200 })
	waitCount(t, p.srvRec, int64(n), 120*time.Second, p.conn)
	st := p.conn.Stats()
	if st.Faults == 0 || st.Reconnects == 0 {
		t.Fatalf("no faults were injected: %+v", st)
	}
	t.Logf("%d messages, %d faults, %d reconnects, %d replayed; client stats %+v", n, st.Faults, st.Reconnects, st.Replayed, st)
}

func testLossy(t *testing.T, env Env) {
	srvRec, cliRec := NewRecorder(t), NewRecorder(t)
	srv := env.NewMessenger(t, "osd.0", srvRec, nil)
	addr := env.Listen(t, srv)
	cli := env.NewMessenger(t, "client.a", cliRec, func(o *msgr.Options) {
		o.DefaultPolicy = msgr.LossyClient
		o.Policies = map[string]msgr.Policy{"osd": msgr.LossyClient}
		o.Faults = msgr.FaultInjection{EveryNFrames: 40, Seed: 3}
	})
	c := connectReady(t, cli, addr, "osd.0")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Send until the injected fault ends the session.
	sent := 0
	for ; ; sent++ {
		if err := c.Send(ctx, msgr.NewMessage(1, Payload(1, uint64(sent), nil), nil)); err != nil {
			if !errors.Is(err, msgr.ErrClosed) {
				t.Fatalf("send after fault: %v, want ErrClosed", err)
			}
			break
		}
		if sent > 1000000 {
			t.Fatal("no fault after a million messages")
		}
	}
	ev := cliRec.WaitEvent(t, msgr.EventReset, 10*time.Second)
	if ev.Conn != c || ev.Err == nil {
		t.Fatalf("reset event %+v", ev)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("conn not closed after a lossy fault")
	}
	// The server's end is a stateless server: it resets too.
	srvRec.WaitEvent(t, msgr.EventReset, 10*time.Second)
	// What arrived arrived once and in order; the rest is lost, not replayed.
	if err := srvRec.Err(); err != nil {
		t.Fatal(err)
	}
	if got := srvRec.Next(1); got > uint64(sent) {
		t.Fatalf("server got %d of %d sent", got, sent)
	}
	// A new Connect makes a new session.
	c2, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if c2 == c {
		t.Fatal("Connect returned the closed conn")
	}
}

func testStalledReceiver(t *testing.T, env Env) {
	const window, windowBytes, queueMsgs = 32, 256 << 10, 64
	p := newPair(t, env, func(o *msgr.Options) {
		o.RecvWindowMsgs, o.RecvWindowBytes = window, windowBytes
	}, func(o *msgr.Options) {
		o.SendQueueMsgs, o.SendQueueBytes = queueMsgs, 1<<20
	})
	p.srvRec.Hold(true)
	// Fill everything: the receiver's window, the sender's queue. Acks
	// free queue space while the receiver still holds messages, so fill
	// until the queue stays full.
	sent := 0
	fill := func() {
		for sent < 100000 {
			data := make([]byte, 4096)
			err := p.conn.TrySend(msgr.NewMessage(1, Payload(1, uint64(sent), data), data))
			if errors.Is(err, msgr.ErrWouldBlock) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sent++
		}
		t.Fatal("sender never pushed back")
	}
	const msgBytes = 4096 + 16
	// Steady state: out of credit, the queue full, and every message
	// either held by the receiver (and acked) or still queued.
	Eventually(t, 10*time.Second, "sender stalled with a full queue", func() bool {
		fill()
		st := p.conn.Stats()
		held, _ := p.srvRec.Held()
		var received uint64
		for c := range p.srv.Conns() {
			received = c.Stats().MsgsReceived
		}
		return st.CreditStalls > 0 && st.SendCredits <= 1 && st.MsgsSent == received && held+st.QueuedMsgs == sent &&
			(st.QueuedMsgs >= queueMsgs || st.QueuedBytes+msgBytes > 1<<20)
	})
	// The receiver holds at most its window; the sender at most its queue.
	Eventually(t, 10*time.Second, "credit stall", func() bool { return p.conn.Stats().CreditStalls > 0 })
	held, heldBytes := p.srvRec.Held()
	st := p.conn.Stats()
	if held > window || heldBytes > windowBytes {
		t.Fatalf("receiver holds %d messages / %d bytes, window %d / %d", held, heldBytes, window, windowBytes)
	}
	if st.QueuedMsgs > queueMsgs {
		t.Fatalf("sender queue %d > %d", st.QueuedMsgs, queueMsgs)
	}
	// A blocking Send waits and honours its context. A control frame
	// still in flight may free one more credit (its credit comes back the
	// moment it is read), so a Send may yet succeed; within a few tries
	// one must block, and the receiver must never exceed its window.
	blocked := false
	for try := 0; try < 50 && !blocked; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		data := make([]byte, 4096)
		err := p.conn.Send(ctx, msgr.NewMessage(1, Payload(1, uint64(sent), data), data))
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			blocked = true
		case err != nil:
			t.Fatal(err)
		default:
			sent++
		}
		if held, heldBytes := p.srvRec.Held(); held > window || heldBytes > windowBytes {
			t.Fatalf("receiver holds %d messages / %d bytes, window %d / %d", held, heldBytes, window, windowBytes)
		}
	}
	if !blocked {
		t.Fatalf("Send never blocked on a stalled receiver (stats %+v)", p.conn.Stats())
	}
	// Release: traffic resumes and everything arrives.
	p.srvRec.Hold(false)
	p.srvRec.ReleaseHeld()
	sendN(t, p.conn, 1, sent, 100, func(int) int { return 4096 })
	waitCount(t, p.srvRec, int64(sent+100), 30*time.Second, p.conn)
}

func testPayloadSizes(t *testing.T, env Env) {
	const max = 64 << 20
	p := newPair(t, env, nil, nil)
	sizes := []int{0, 1, 15, 4095, 4096, 16 << 10, 16<<10 + 1, 64<<10 - 57, 64 << 10, 1 << 20, 3<<20 + 7, max - 16}
	for i, size := range sizes {
		sendN(t, p.conn, 1, i, 1, func(int) int { return size })
	}
	waitCount(t, p.srvRec, int64(len(sizes)), 60*time.Second, p.conn)
	big := make([]byte, max)
	err := p.conn.Send(context.Background(), msgr.NewMessage(1, []byte("x"), big))
	if !errors.Is(err, msgr.ErrMessageTooLarge) {
		t.Fatalf("Send of %d bytes: %v, want ErrMessageTooLarge", max+1, err)
	}
}

func testConcurrentSenders(t *testing.T, env Env) {
	p := newPair(t, env, nil, nil)
	const senders = 16
	n := env.n(2000)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sendN(t, p.conn, uint32(s), 0, n, func(i int) int { return i % 500 })
		}()
	}
	wg.Wait()
	waitCount(t, p.srvRec, int64(senders*n), 60*time.Second, p.conn)
	for s := range senders {
		if got := p.srvRec.Next(uint32(s)); got != uint64(n) {
			t.Fatalf("sender %d: %d delivered", s, got)
		}
	}
}

// testLargeFronts: a front far larger than a small frame's buffer (an
// RDMA link's 16 KiB receive buffers; a multipart object's list of parts
// is such a front), with no data, a little or much, or data in a buffer
// from AllocPayload, arrives intact and in order. Over RDMA such a front
// moves with the payload (wire.FeatureRendezvousFront); before, Send took
// it and the session ended with ErrMessageTooLarge.
func testLargeFronts(t *testing.T, env Env) {
	got := make(chan *msgr.Message, 8)
	srv := env.NewMessenger(t, "osd.0", msgr.DispatchFunc(func(m *msgr.Message) { got <- m }), nil)
	addr := env.Listen(t, srv)
	cli := env.NewMessenger(t, "osd.1", NewRecorder(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := cli.Connect(ctx, addr, "osd.0")
	if err == nil {
		err = c.WaitReady(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		front, data int
		alloc       bool // the data in a buffer from Conn.AllocPayload
	}{
		{20 << 10, 0, false}, {20 << 10, 100, false}, {16<<10 - 100, 64 << 10, false},
		{1 << 20, 3<<20 + 5, false}, {300 << 10, 17, false}, {40 << 10, 2 << 20, true},
	}
	pattern := func(n, seed int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + seed)
		}
		return b
	}
	for i, tc := range cases {
		m := msgr.NewMessage(uint16(1+i), pattern(tc.front, i), pattern(tc.data, 100+i))
		if tc.alloc {
			buf, err := c.AllocPayload(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			copy(buf.B, m.Data)
			m.SetPayload(buf)
		}
		if err := c.Send(ctx, m); err != nil {
			t.Fatalf("send of a %d-byte front and %d bytes of data: %v", tc.front, tc.data, err)
		}
	}
	for i, tc := range cases {
		select {
		case m := <-got:
			if m.Type != uint16(1+i) || !bytes.Equal(m.Front, pattern(tc.front, i)) || !bytes.Equal(m.Data, pattern(tc.data, 100+i)) {
				t.Fatalf("message %d: type %d, %d-byte front and %d bytes of data, not those sent (%d and %d)", i, m.Type, len(m.Front), len(m.Data), tc.front, tc.data)
			}
			m.Release()
		case <-ctx.Done():
			t.Fatalf("message %d (a %d-byte front, %d bytes of data) never came: %v", i, tc.front, tc.data, c)
		}
	}
}
