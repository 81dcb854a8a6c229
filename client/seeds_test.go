package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// deadSeed is a TCP listener that accepts connections and never answers,
// the worst kind of seed: no refusal, no reset, only silence. closed
// counts the accepted connections whose other end (the client) closed.
type deadSeed struct {
	ln       net.Listener
	mu       sync.Mutex
	accepted int
	closed   int
	conns    []net.Conn
}

func startDeadSeed(t *testing.T) *deadSeed {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &deadSeed{ln: ln}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			d.mu.Lock()
			d.accepted++
			d.conns = append(d.conns, conn)
			d.mu.Unlock()
			wg.Go(func() {
				// Read (and drop) whatever the client says, answer nothing,
				// and note when the client hangs up.
				io.Copy(io.Discard, conn)
				d.mu.Lock()
				d.closed++
				d.mu.Unlock()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		d.mu.Lock()
		for _, c := range d.conns {
			c.Close()
		}
		d.mu.Unlock()
		wg.Wait()
	})
	return d
}

func (d *deadSeed) addr() string { return "tcp://" + d.ln.Addr().String() }

func (d *deadSeed) counts() (accepted, closed int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.accepted, d.closed
}

// TestDeadSeedFirst: a first seed that accepts and never answers must not
// cost the whole connect timeout: the client asks the next seed after a
// short stagger, uses the first map that arrives, and closes the
// connection to the silent seed. Nothing of the race outlives the client.
func TestDeadSeedFirst(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 16})
	dead := startDeadSeed(t)
	// Counted once the cluster's own startup is over; what the client's
	// work leaves in the OSDs' pools of idle goroutines is theirs.
	c.WaitSettled(t, 30*time.Second)
	before := osdtest.Goroutines()

	const timeout = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	cl, err := client.New(ctx, client.Options{
		Seeds:  append([]string{dead.addr()}, c.Seeds()...),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RetryFor: 20 * time.Second,
	})
	took := time.Since(began)
	if err != nil {
		t.Fatalf("New with a dead first seed: %v (after %v)", err, took)
	}
	// A generous margin, not a speed target: the old behaviour spent the
	// whole timeout on the dead seed.
	if took > timeout/2 {
		t.Errorf("New took %v of its %v timeout", took, timeout)
	}
	if acc, _ := dead.counts(); acc == 0 {
		t.Errorf("the dead seed was never tried")
	}
	// The connection to the silent seed is closed once another answered,
	// not when the client closes.
	osdtest.Eventually(t, 10*time.Second, "the client to close its connection to the dead seed", func() bool {
		acc, closed := dead.counts()
		return closed == acc
	})
	// The client works.
	if err := cl.MakeBucket(ctx, "seeds"); err != nil {
		t.Fatal(err)
	}
	data := osdtest.Payload(4096, 7)
	if _, err := osdtest.Put(ctx, cl, "seeds", "k", data, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := osdtest.Get(ctx, cl, "seeds", "k", client.GetOptions{}); err != nil || string(got) != string(data) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	var now int
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		buf := make([]byte, 4<<20)
		return fmt.Sprintf("goroutines to return to their count before New (leak?): %d, were %d:\n%s", now, before, buf[:runtime.Stack(buf, true)])
	}, func() bool { now = osdtest.Goroutines(); return now <= before })
}

// TestAllSeedsDead: with no seed answering, New fails when its context
// ends, naming the seeds, and leaves nothing running.
func TestAllSeedsDead(t *testing.T) {
	a, b := startDeadSeed(t), startDeadSeed(t)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := client.New(ctx, client.Options{Seeds: []string{a.addr(), b.addr()}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		t.Fatal("New succeeded with no seed answering")
	}
	for _, s := range []*deadSeed{a, b} {
		if acc, _ := s.counts(); acc == 0 {
			t.Errorf("seed %s never tried: %v", s.addr(), err)
		}
	}
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return "goroutines to return to their count before New (leak?)"
	}, func() bool { return runtime.NumGoroutine() <= before })
}

// TestDeadMonBoundedByRetryFor: a client given a mon that never answers
// (a mistyped address), with a context that has no deadline, gives up
// after OpTimeout and RetryFor, as an op does, instead of waiting for ever.
func TestDeadMonBoundedByRetryFor(t *testing.T) {
	dead := startDeadSeed(t)
	done := make(chan error, 1)
	go func() {
		_, err := client.New(context.Background(), client.Options{Mon: []string{dead.addr()}, RetryFor: 500 * time.Millisecond, OpTimeout: 500 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("New succeeded with no mon answering")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("New with a mon that never answers still waits 30 s on, with RetryFor 500ms")
	}
}
