//go:build rdma

package rdma

import (
	"context"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// LinkPair dials ln from tr and returns both ends. Exported from a test
// file of the package so that the external tests (rdma_test) use it too.
func LinkPair(t testing.TB, tr *Transport, ln wire.Listener, opts wire.LinkOptions) (dialed, accepted wire.Link) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan wire.Link, 1)
	go func() {
		a, err := ln.Accept(ctx)
		if err != nil {
			t.Errorf("accept: %v", err)
		}
		got <- a
	}()
	d, err := tr.Dial(ctx, ln.Addr(), opts)
	if err != nil {
		<-got
		t.Fatal(err)
	}
	a := <-got
	if a == nil {
		d.Close()
		t.FailNow()
	}
	return d, a
}
