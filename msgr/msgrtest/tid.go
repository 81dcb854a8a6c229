package msgrtest

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
)

// testRepliesMatchedByTid: a requester matches replies to requests by the
// tid in the envelope alone. Tids use all 64 bits, requests carry payloads
// from none to one above an RDMA receive buffer (a rendezvous), and the
// server answers each pair of requests in the opposite order, so order
// cannot stand in for the tid. A message sent without a tid arrives with 0.
func testRepliesMatchedByTid(t *testing.T, env Env) {
	const (
		reqType   = 41
		replyType = 42
		plainType = 43
	)
	n := max(env.n(2000)&^1, 2) // even: the server answers in pairs
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The server holds every other request and answers it after the
	// next one: replies go out swapped in pairs.
	var held *msgr.Message
	var srvErr error
	var srvMu sync.Mutex
	reply := func(req *msgr.Message) {
		// The reply's front says which tid it answers, for the check.
		front := binary.LittleEndian.AppendUint64(nil, req.Tid())
		m := msgr.NewMessage(replyType, front, nil)
		m.SetTid(req.Tid())
		conn := req.Conn()
		req.Release()
		if err := conn.Send(ctx, m); err != nil {
			m.Release()
			srvMu.Lock()
			srvErr = fmt.Errorf("reply: %w", err)
			srvMu.Unlock()
		}
	}
	plain := make(chan uint64, 1)
	srv := env.NewMessenger(t, "osd.0", msgr.DispatchFunc(func(m *msgr.Message) {
		switch m.Type {
		case plainType:
			plain <- m.Tid()
			m.Release()
		case reqType:
			if held == nil {
				held = m
				return
			}
			reply(m)
			reply(held)
			held = nil
		default:
			m.Release()
		}
	}), nil)
	addr := env.Listen(t, srv)

	var mu sync.Mutex
	answered := make(map[uint64]int)
	var mismatch []string
	cli := env.NewMessenger(t, "osd.1", msgr.DispatchFunc(func(m *msgr.Message) {
		defer m.Release()
		mu.Lock()
		defer mu.Unlock()
		if len(m.Front) != 8 || binary.LittleEndian.Uint64(m.Front) != m.Tid() {
			mismatch = append(mismatch, fmt.Sprintf("reply with tid %#x answers %x", m.Tid(), m.Front))
			return
		}
		if answered[m.Tid()]++; answered[m.Tid()] > 1 {
			mismatch = append(mismatch, fmt.Sprintf("tid %#x answered twice", m.Tid()))
		}
	}), nil)
	c, err := cli.Connect(ctx, addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}

	m := msgr.NewMessage(plainType, []byte("no tid"), nil)
	if err := c.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	select {
	case tid := <-plain:
		if tid != 0 {
			t.Fatalf("a message sent without a tid arrived with tid %#x", tid)
		}
	case <-ctx.Done():
		t.Fatal("the message without a tid did not arrive")
	}

	tids := make([]uint64, n)
	sizes := []int{0, 1, 100, 9000, 70000}
	for i := range tids {
		// Distinct, spread over all 64 bits (the high bit included).
		tids[i] = uint64(i+1)*0x9e3779b97f4a7c15 | 1
		data := make([]byte, sizes[i%len(sizes)])
		m := msgr.NewMessage(reqType, []byte("request"), data)
		m.SetTid(tids[i])
		if err := c.Send(ctx, m); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	EventuallyDescribed(t, 60*time.Second, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%d of %d requests answered; conn %v", len(answered), n, c)
	}, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) >= n || len(mismatch) > 0
	})
	srvMu.Lock()
	defer srvMu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if srvErr != nil {
		t.Fatal(srvErr)
	}
	if len(mismatch) > 0 {
		t.Fatalf("%d replies with the wrong tid; first: %s", len(mismatch), mismatch[0])
	}
	for i, tid := range tids {
		if answered[tid] != 1 {
			t.Fatalf("request %d (tid %#x) answered %d times", i, tid, answered[tid])
		}
	}
}
