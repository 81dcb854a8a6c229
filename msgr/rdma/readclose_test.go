//go:build rdma

package rdma_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestRDMACloseDuringReadKeepsDomainSound closes links while their RDMA
// read of a large rendezvous payload is in flight, at a spread of moments
// into the transfer, then checks that new links of the same transport
// still carry frames intact.
//
// libfabric's tcp provider before 1.18 (Debian 12 ships 1.17) frees an RMA
// read whose response is part way in twice when the endpoint is shut down
// or closed: once from its queue of reads, once as the receive in
// progress (upstream a74ea0fcd). Its pool of transfer entries then hands
// one entry out for several operations at once, and every link of the
// domain after that sends and receives other frames' bytes: the reconnect
// storm of TestRDMAPeerKilledMidTransfer/read, where the survivor closed
// the link to the killed peer with a read of its payload half received.
func TestRDMACloseDuringReadKeepsDomainSound(t *testing.T) {
	// Our receives on the endpoint's own queue, so they come from the
	// provider's pool of transfer entries too.
	reader := ownTransport(t, rdma.Config{Rendezvous: rdma.RendezvousRead, NoSharedRecv: true})
	sender := ownTransport(t, rdma.Config{})
	lim := wire.Limits{MaxFront: 4 << 10, MaxData: 64 << 20}
	opts := wire.LinkOptions{RecvWindow: 8, Limits: lim, Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}}
	ln, err := sender.Listen(context.Background(), "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	payload := fill(48<<20, 3)
	for round := range 6 {
		r, s := rdma.LinkPair(t, reader, ln, opts)
		before := reader.Stats().RendezvousReads
		if err := s.WriteFrames([]wire.Frame{{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 1}, Data: payload}}); err != nil {
			t.Fatal(err)
		}
		read := make(chan error, 1)
		go func() {
			var f wire.Frame
			err := r.ReadFrame(&f)
			if err == nil {
				f.Release()
			}
			read <- err
		}()
		deadline := time.Now().Add(10 * time.Second)
		for reader.Stats().RendezvousReads == before {
			if time.Now().After(deadline) {
				t.Fatal("the reader posted no RDMA read for the payload")
			}
			runtime.Gosched()
		}
		// Later into the transfer each round: a close while the
		// response has not started is harmless, one while it is part
		// way in is what the provider mishandles.
		for spin := time.Now().Add(time.Duration(round*round*3) * time.Millisecond); time.Now().Before(spin); {
			runtime.Gosched()
		}
		r.Close()
		<-read
		s.Close()
	}

	// New links must carry frames intact, both ways at once.
	r, s := rdma.LinkPair(t, reader, ln, opts)
	defer r.Close()
	defer s.Close()
	const n = 400
	errs := make(chan error, 2)
	var got [2]atomic.Int64
	go func() { errs <- exchange(r, s, n, 1, &got[0]) }()
	go func() { errs <- exchange(s, r, n, 2, &got[1]) }()
	timeout := time.After(20 * time.Second)
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			// What each side had when it stalled tells a provider that
			// lost frames from one whose progress stopped.
			t.Errorf("frames on a new link did not arrive within 20s: %d of %d from the reader's side, %d from the sender's; the reader's transport %+v; the sender's %+v",
				got[0].Load(), n, got[1].Load(), reader.Stats(), sender.Stats())
			r.Close()
			s.Close()
			t.FailNow()
		}
	}
}

// exchange writes n frames of sender id from w, numbered in Seq and
// their data, and checks that r reads exactly them, in order. At most a
// window's worth is outstanding: no credits flow at this level. got counts
// the frames read.
func exchange(w, r wire.Link, n int, id byte, got *atomic.Int64) error {
	const window = 6
	read := make(chan error, 1)
	acks := make(chan struct{}, window)
	for range window {
		acks <- struct{}{}
	}
	go func() {
		for i := range n {
			var f wire.Frame
			if err := r.ReadFrame(&f); err != nil {
				read <- fmt.Errorf("sender %d: frame %d: %w", id, i, err)
				return
			}
			want := frameData(id, i)
			if f.Tag != wire.TagMessage || f.Seq != uint64(i) || !bytes.Equal(f.Data, want) {
				read <- fmt.Errorf("sender %d: frame %d arrived as tag %v seq %d with %d bytes of data", id, i, f.Tag, f.Seq, len(f.Data))
				f.Release()
				return
			}
			f.Release()
			got.Add(1)
			acks <- struct{}{}
		}
		read <- nil
	}()
	for i := range n {
		select {
		case <-acks:
		case err := <-read:
			return err
		}
		if err := w.WriteFrames([]wire.Frame{{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: uint64(i)}, Data: frameData(id, i)}}); err != nil {
			return fmt.Errorf("sender %d: write %d: %w", id, i, err)
		}
	}
	return <-read
}

// frameData is frame i of sender id's data: its own length and bytes;
// every other goes by rendezvous, the rest inline.
func frameData(id byte, i int) []byte {
	n := 40 + i%50
	if i%2 == 0 {
		n = 256<<10 + i
	}
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b, uint32(i))
	for j := 4; j < len(b); j++ {
		b[j] = id ^ byte(i+j)
	}
	return b
}

// TestPollerSleepsWhileAPeerHoldsAPayload pins that a domain whose only
// work is a rendezvous source waiting for the peer's read does not keep a
// core: on tcp the poller's fi_cq_sread moves such payloads, so it sleeps
// there rather than spin for as long as the peer takes. The peer here
// never reads the frame, so the source stays out for the whole test.
func TestPollerSleepsWhileAPeerHoldsAPayload(t *testing.T) {
	reader := ownTransport(t, rdma.Config{Rendezvous: rdma.RendezvousRead})
	sender := ownTransport(t, rdma.Config{Rendezvous: rdma.RendezvousRead})
	opts := wire.LinkOptions{RecvWindow: 8, Limits: wire.Limits{MaxFront: 4 << 10, MaxData: 4 << 20}, Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}}
	ln, err := reader.Listen(context.Background(), "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, r := rdma.LinkPair(t, sender, ln, opts)
	defer r.Close()
	defer s.Close()
	if err := s.WriteFrames([]wire.Frame{{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 1}, Data: fill(1<<20, 5)}}); err != nil {
		t.Fatal(err)
	}
	const sleeps = 20 // at most 2 ms each (pollSleepMax)
	before := sender.Stats().PollerSleeps
	for deadline := time.Now().Add(10 * time.Second); sender.Stats().PollerSleeps-before < sleeps; {
		if time.Now().After(deadline) {
			t.Fatalf("the sender's poller slept %d times in 10 s with a payload out: it spins for it", sender.Stats().PollerSleeps-before)
		}
		time.Sleep(time.Millisecond) // polling the counter, not synchronising
	}
}
