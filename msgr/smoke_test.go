package msgr_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	var got atomic.Int64
	done := make(chan struct{})
	const N = 10000
	srv, err := msgr.New(msgr.Options{Name: "osd.1", Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) {
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
	cli, err := msgr.New(msgr.Options{Name: "osd.2", Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) { m.Release() })})
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
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		for sc := range srv.Conns() {
			t.Logf("server %+v", sc.Stats())
		}
		t.Fatalf("got %d of %d; stats %+v", got.Load(), N, c.Stats())
	}
	t.Logf("client stats %+v", c.Stats())
	cli.Shutdown(ctx)
	srv.Shutdown(ctx)
}
