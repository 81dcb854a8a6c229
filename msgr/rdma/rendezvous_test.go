//go:build rdma

package rdma_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// inlineMax is the largest data payload that goes inline with a 16-byte
// front (msgrtest.Payload) in a BufSize receive buffer.
func inlineMax(bufSize int) int { return bufSize - wire.PreambleSize - 16 - wire.EpilogueSize }

// TestRDMARendezvousPayloadSizes sends payloads from 1 byte to 64 MiB
// across the inline/rendezvous boundary. Each front carries the CRC32C of
// its data and the recorder checks it on arrival, so a short, shifted or
// stale RDMA read fails the test. The high-water mark of registered memory
// proves the big ones went by rendezvous (a registered copy on the sender,
// a registered destination on the receiver), not inline. Both ways of
// moving them run: RDMA read and RDMA write.
func TestRDMARendezvousPayloadSizes(t *testing.T) {
	eachRendezvous(t, testRendezvousPayloadSizes)
}

// eachRendezvous runs test once per rendezvous mode.
func eachRendezvous(t *testing.T, test func(t *testing.T, mode rdma.RendezvousMode)) {
	for _, m := range []rdma.RendezvousMode{rdma.RendezvousRead, rdma.RendezvousWrite} {
		t.Run(m.String(), func(t *testing.T) { test(t, m) })
	}
}

// checkMoved checks that n rendezvous payloads from snd to rcv moved the
// way mode says: read by the receiver, or written by the sender.
func checkMoved(t *testing.T, mode rdma.RendezvousMode, snd, rcv *rdma.Transport, n uint64) {
	t.Helper()
	s, r := snd.Stats(), rcv.Stats()
	reads, writes := n, uint64(0)
	if mode == rdma.RendezvousWrite {
		reads, writes = 0, n
	}
	if r.RendezvousReads != reads || s.RendezvousWrites != writes {
		t.Fatalf("%v rendezvous of %d payloads: the receiver read %d, the sender wrote %d", mode, n, r.RendezvousReads, s.RendezvousWrites)
	}
}

// TestRDMARendezvousModeAgreement connects a transport that offers the
// write rendezvous to one that only reads: the link must read both ways,
// and large payloads must arrive intact.
func TestRDMARendezvousModeAgreement(t *testing.T) {
	const n, size = 20, 100 << 10
	trS := ownTransport(t, rdma.Config{Rendezvous: rdma.RendezvousWrite})
	trC := ownTransport(t, rdma.Config{Rendezvous: rdma.RendezvousRead})
	p := connectPair(t, trS, trC, nil, nil)
	srvRec, cliRec, c := p.srvRec, p.cliRec, p.c
	sc := onlyConn(t, p.srv)
	payload := func(i int) []byte { return fill(size, uint64(i)) }
	sendAll(t, c, 1, 0, n, payload)
	sendAll(t, sc, 2, 0, n, payload)
	waitDelivered(t, srvRec, []uint32{1}, n, 30*time.Second, c)
	waitDelivered(t, cliRec, []uint32{2}, n, 30*time.Second, sc)
	if s, c := trS.Stats(), trC.Stats(); s.RendezvousWrites != 0 || c.RendezvousWrites != 0 ||
		s.RendezvousReads != n || c.RendezvousReads != n {
		t.Fatalf("a write-offering and a read-only end: writes %d/%d, reads %d/%d; want 0/0 and %d/%d",
			s.RendezvousWrites, c.RendezvousWrites, s.RendezvousReads, c.RendezvousReads, n, n)
	}
	if st := trS.Stats(); st.ControlRecvs != 32+3 {
		t.Fatalf("the write-offering end has %d control receives, want 32 (posted before the peer said) and 3 for the session's", st.ControlRecvs)
	}
}

func testRendezvousPayloadSizes(t *testing.T, mode rdma.RendezvousMode) {
	const (
		bufSize = 16 << 10
		maxMsg  = 64 << 20
	)
	cfg := rdma.Config{BufSize: bufSize, MemBudget: 512 << 20, Rendezvous: mode}
	trS, trC := ownTransport(t, cfg), ownTransport(t, cfg)
	win := func(o *msgr.Options) { o.RecvWindowMsgs = 16 }
	p := connectPair(t, trS, trC, win, win)
	srvRec, c := p.srvRec, p.c
	sc := onlyConn(t, p.srv)

	im := inlineMax(bufSize)
	sizes := []int{0, 1, 100, 16<<10 - 100, im, im + 1, 16 << 10, 16<<10 + 1, 64 << 10, 1 << 20, 7<<20 + 3, maxMsg - 16}
	var want, big uint64
	for _, n := range sizes {
		want += uint64(16 + n)
		if n > im {
			big++
		}
	}
	before := trC.Stats().HighWaterBytes
	sendAll(t, c, 1, 0, len(sizes), func(i int) []byte { return fill(sizes[i], uint64(i)) })
	waitDelivered(t, srvRec, []uint32{1}, uint64(len(sizes)), 60*time.Second, c)
	if got := sc.Stats().BytesReceived; got != want {
		t.Fatalf("server received %d bytes, want %d", got, want)
	}
	st := c.Stats()
	if st.Faults != 0 {
		t.Fatalf("%d link faults: %+v", st.Faults, st)
	}
	// The 64 MiB payload needs a 64 MiB registered region on each side;
	// the link buffers alone are about 1.3 MiB.
	if hw := trC.Stats().HighWaterBytes; hw-before < 64<<20 {
		t.Fatalf("sender's registered high water grew by %d bytes: the big payloads did not go by rendezvous", hw-before)
	}
	if hw := trS.Stats().HighWaterBytes; hw < 64<<20 {
		t.Fatalf("receiver's registered high water %d bytes: no registered destination for the rendezvous reads", hw)
	}
	checkMoved(t, mode, trC, trS, big)
	if mode == rdma.RendezvousWrite {
		// tcp splits writes at DefaultWriteChunk.
		checkPieces(t, trC, sizes, im, rdma.DefaultWriteChunk)
	} else if got := trS.Stats().ReadPieces; got != 16 {
		// Four payloads up to 64 KiB in one read each, and 1 MiB,
		// 7 MiB and 64 MiB in four pieces each.
		t.Fatalf("the receiver posted %d RDMA reads for payloads of %v bytes, want 16", got, sizes)
	}
	// Everything read has been released: no rendezvous buffer in use.
	msgrtest.Eventually(t, 10*time.Second, "rendezvous buffers returned", func() bool {
		return trS.Stats().BuffersInUse == 0 && trC.Stats().BuffersInUse == 0
	})
}

// checkPieces checks that tr wrote each of sizes above inline max in
// pieces of at most chunk bytes (chunk 0: one write each).
func checkPieces(t *testing.T, tr *rdma.Transport, sizes []int, inlineMax, chunk int) {
	t.Helper()
	var want uint64
	for _, n := range sizes {
		switch {
		case n <= inlineMax:
		case chunk == 0:
			want++
		default:
			want += uint64((n + chunk - 1) / chunk)
		}
	}
	// The last piece is counted once its post returns, which may be after
	// the payload's RDV_DONE (posted behind it) reached the receiver.
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("%d RDMA writes posted for payloads of %v bytes, want %d (pieces of %d)", tr.Stats().WritePieces, sizes, want, chunk)
	}, func() bool { return tr.Stats().WritePieces >= want })
	if got := tr.Stats().WritePieces; got != want {
		t.Fatalf("the sender posted %d RDMA writes for payloads of %v bytes, want %d (pieces of %d)", got, sizes, want, chunk)
	}
}

// TestRDMAWriteChunk writes rendezvous payloads in pieces of an odd size
// (thousands for the largest), and in one piece each with splitting off;
// every payload must arrive intact, in order, in the number of writes the
// size says.
func TestRDMAWriteChunk(t *testing.T) {
	for _, chunk := range []int{3001, -1} {
		t.Run(fmt.Sprint(chunk), func(t *testing.T) {
			cfg := rdma.Config{Rendezvous: rdma.RendezvousWrite, WriteChunk: chunk, MemBudget: 256 << 20}
			trS, trC := ownTransport(t, cfg), ownTransport(t, cfg)
			win := func(o *msgr.Options) { o.RecvWindowMsgs = 16 }
			p := connectPair(t, trS, trC, win, win)
			im := inlineMax(16 << 10)
			sizes := []int{im + 1, 3001, 3002, 1<<20 + 7, 7<<20 + 3, 100}
			sendAll(t, p.c, 1, 0, len(sizes), func(i int) []byte { return fill(sizes[i], uint64(i)) })
			waitDelivered(t, p.srvRec, []uint32{1}, uint64(len(sizes)), 60*time.Second, p.c)
			if f := p.c.Stats().Faults; f != 0 {
				t.Fatalf("%d link faults", f)
			}
			checkPieces(t, trC, sizes, im, max(chunk, 0))
		})
	}
}

// TestRDMAPayloadAboveMemBudget sends one message whose rendezvous copy
// cannot fit the sender's registered-memory budget. It can never go, so
// the session must say so (an error on the conn, as for a message above
// the peer's size limit) rather than fault, reconnect, replay and fault
// again for ever.
func TestRDMAPayloadAboveMemBudget(t *testing.T) {
	cfg := rdma.Config{MemBudget: 8 << 20}
	trS, trC := ownTransport(t, cfg), ownTransport(t, cfg)
	win := func(o *msgr.Options) { o.RecvWindowMsgs = 16 }
	c := connectPair(t, trS, trC, win, win).c
	d := fill(16<<20, 1)
	if err := c.Send(context.Background(), msgr.NewMessage(1, msgrtest.Payload(1, 0, d), d)); err != nil {
		return // refused up front: fine
	}
	msgrtest.Eventually(t, 10*time.Second, "the conn to report the message it cannot send", func() bool {
		if f := c.Stats().Faults; f > 2 {
			t.Fatalf("%d link faults over a message that can never be sent: %+v", f, c.Stats())
		}
		return c.Err() != nil
	})
	t.Logf("conn error: %v", c.Err())
}

// TestRDMAZeroCopySend sends payloads written straight into buffers from
// Conn.AllocPayload. The large ones must go by rendezvous from the caller's
// buffer itself (no registered copy), arrive intact, and the buffers must
// come back to the transport once the messages are acked; a small one is an
// ordinary buffer that goes inline. The peer reads the payloads, or they are
// written from the caller's buffers.
func TestRDMAZeroCopySend(t *testing.T) { eachRendezvous(t, testZeroCopySend) }

func testZeroCopySend(t *testing.T, mode rdma.RendezvousMode) {
	const bufSize = 16 << 10
	cfg := rdma.Config{BufSize: bufSize, MemBudget: 256 << 20, Rendezvous: mode}
	trS, trC := ownTransport(t, cfg), ownTransport(t, cfg)
	p := connectPair(t, trS, trC, nil, nil)
	srvRec, c := p.srvRec, p.c

	sizes := []int{100, 64 << 10, 1 << 20, 5<<20 + 3, 1 << 20, 16 << 20}
	large := 0
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, n := range sizes {
		b, err := c.AllocPayload(n)
		if err != nil {
			t.Fatalf("AllocPayload(%d): %v", n, err)
		}
		if len(b.B) != n {
			t.Fatalf("AllocPayload(%d) gave %d bytes", n, len(b.B))
		}
		copy(b.B, fill(n, uint64(i)))
		if n > bufSize {
			large++
		}
		m := msgr.NewMessage(uint16(1+i%7), msgrtest.Payload(1, uint64(i), b.B), nil)
		m.SetPayload(b)
		if err := c.Send(ctx, m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	waitDelivered(t, srvRec, []uint32{1}, uint64(len(sizes)), 60*time.Second, c)
	st := trC.Stats()
	if st.ZeroCopySends != uint64(large) || st.CopiedSends != 0 {
		t.Fatalf("rendezvous sends: %d zero-copy, %d copied; want %d and 0", st.ZeroCopySends, st.CopiedSends, large)
	}
	checkMoved(t, mode, trC, trS, uint64(large))
	// Acked messages release their payloads: every lent buffer is back.
	msgrtest.Eventually(t, 10*time.Second, "payload buffers returned", func() bool {
		return trS.Stats().BuffersInUse == 0 && trC.Stats().BuffersInUse == 0
	})
	// A plain payload still goes by a registered copy.
	sendAll(t, c, 1, len(sizes), 1, func(int) []byte { return fill(1<<20, 99) })
	waitDelivered(t, srvRec, []uint32{1}, uint64(len(sizes)+1), 60*time.Second, c)
	if st := trC.Stats(); st.CopiedSends != 1 {
		t.Fatalf("a plain 1 MiB payload: %d copied rendezvous sends, want 1", st.CopiedSends)
	}
}
