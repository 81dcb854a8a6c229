//go:build rdma

package rdma

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// TestDialEndsByItsDeadline: a dial whose connection request is never
// answered returns when its context ends, and a link given up during its
// handshake lets its reader and a second Close go at once, however long
// the provider takes to tear the endpoint down (the hook makes it 3 s, as
// the sockets provider's fi_close can be, waiting for its connection
// thread). Before, both waited for the teardown, under a sync.Once, so a
// session's redial was late by as much as the provider was.
func TestDialEndsByItsDeadline(t *testing.T) {
	const slow = 3 * time.Second
	var hookMu sync.Mutex
	hookOn := true
	testHookProviderClose = func() {
		hookMu.Lock()
		on := hookOn
		hookMu.Unlock()
		if on {
			time.Sleep(slow)
		}
	}
	t.Cleanup(func() { testHookProviderClose = nil })
	tr := NewTransport("tcp", Config{})
	defer tr.Close() // waits for every teardown the test started
	opts := wire.LinkOptions{RecvWindow: 8, Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}}

	// A TCP listener that takes the provider's connection and never
	// answers its request: no FI_CONNECTED comes.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = tr.Dial(ctx, silent.Addr().String(), opts)
	if took := time.Since(start); err == nil || took > 300*time.Millisecond+slow/3 {
		t.Fatalf("dial to a silent peer: %v after %v; want an error by the 300ms deadline", err, took)
	}

	// A link up, then given up during its handshake: a deadline's Close
	// and the caller's own.
	hookMu.Lock()
	hookOn = false
	hookMu.Unlock()
	ln, err := tr.Listen(context.Background(), "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan wire.Link, 1)
	go func() {
		if l, err := ln.Accept(context.Background()); err == nil {
			accepted <- l
		}
	}()
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	lk, err := tr.Dial(dctx, ln.Addr(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer (<-accepted).Close()
	hookMu.Lock()
	hookOn = true
	hookMu.Unlock()
	read := make(chan error, 1)
	go func() {
		var f wire.Frame
		read <- lk.ReadFrame(&f)
	}()
	start = time.Now()
	go lk.Close() // the deadline's
	select {
	case err := <-read:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("read on a closed link: %v", err)
		}
	case <-time.After(slow / 2):
		t.Fatalf("the reader still waits %v after Close", slow/2)
	}
	lk.Close() // the caller's: the teardown goes on without it
	if took := time.Since(start); took > slow/2 {
		t.Fatalf("a second Close returned after %v, with the provider's teardown", took)
	}
}
