//go:build rdma

package rdma

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

func TestReadPieces(t *testing.T) {
	for _, c := range []struct{ n, size, count int }{
		{0, 4096, 1},
		{1, 4096, 1},
		{256 << 10, 256 << 10, 1},
		{256<<10 + 1, 260 << 10, 1}, // no tiny last piece
		{512<<10 + 1, 260 << 10, 2},
		{1 << 20, 256 << 10, 4},
		{4 << 20, 1 << 20, 4},
		{4<<20 + 1, 1<<20 + 4096, 4},
		{64 << 20, 16 << 20, 4},
	} {
		size, count := readPieces(c.n)
		if size != c.size || count != c.count {
			t.Errorf("readPieces(%d) = %d bytes x %d, want %d x %d", c.n, size, count, c.size, c.count)
		}
	}
}

// pieceLink is a link with one read of n bytes in transfer slot 3, its
// pieces not yet landed, as startTransfer leaves it; the payload is random.
func pieceLink(t *testing.T, n, chunk int) (*link, *pendingRead) {
	return frontPieceLink(t, n, 0, chunk)
}

// frontPieceLink is pieceLink with a front of front bytes moved after the
// data (wire.FlagRendezvousFront).
func frontPieceLink(t *testing.T, n, front, chunk int) (*link, *pendingRead) {
	t.Helper()
	l := &link{d: &domain{}, freeReads: []uint32{0, 1, 2}}
	p := &pendingRead{r: &region{mem: make([]byte, n+front)}, size: n, frontLen: front, xfer: n + front, frontMoved: front > 0, summed: true}
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range p.r.mem {
		p.r.mem[i] = byte(rng.Uint32())
	}
	p.sum.Start(chunk)
	p.piece, p.pieces = readPieces(p.xfer)
	p.posted, p.out, l.piecesOut = p.pieces, p.pieces, p.pieces
	l.readSlots[3], l.readsOut = p, 1
	l.d.transfers.Add(1)
	return l, p
}

// TestPiecesFoldInOrder lands a read's pieces out of order: each is
// checksummed only once those before it have landed, so the data CRC and
// the chunk CRCs (chunks that straddle pieces) come out as those of the
// payload read whole, and the transfer slot is free with the last piece.
func TestPiecesFoldInOrder(t *testing.T) {
	const n, chunk = 4<<20 + 1, 1 << 20
	l, p := pieceLink(t, n, chunk)
	if p.pieces != 4 {
		t.Fatalf("%d pieces, want 4", p.pieces)
	}
	steps := []struct{ piece, folded int }{{2, 0}, {0, p.piece}, {3, p.piece}, {1, n}}
	for i, s := range steps {
		if p.done {
			t.Fatalf("done after %d of 4 pieces", i)
		}
		l.pieceDone(readDoneEv{slot: pieceSlot(3, s.piece)})
		if p.folded != s.folded {
			t.Fatalf("after piece %d: %d bytes checksummed, want %d", s.piece, p.folded, s.folded)
		}
	}
	if !p.done || p.err != nil || l.readSlots[3] != nil || !slices.Contains(l.freeReads, 3) || l.readsOut != 0 || l.piecesOut != 0 {
		t.Fatalf("after the last piece: done %v err %v, slot %v, free %v, transfers out %d, pieces out %d",
			p.done, p.err, l.readSlots[3], l.freeReads, l.readsOut, l.piecesOut)
	}
	crc, crcs := p.sum.Finish()
	if want := wire.CRC(p.r.mem); crc != want {
		t.Fatalf("data CRC %#x, want %#x", crc, want)
	}
	var want []uint32
	for o := 0; o < n; o += chunk {
		want = append(want, wire.CRC(p.r.mem[o:min(o+chunk, n)]))
	}
	if !slices.Equal(crcs, want) {
		t.Fatalf("chunk CRCs %x, want %x", crcs, want)
	}
	// A completion for a slot no read holds is dropped.
	l.pieceDone(readDoneEv{slot: pieceSlot(3, 1)})
	l.pieceDone(readDoneEv{slot: pieceSlot(200, 0)})
}

// TestPiecesFoldTheDataOnly: a read that moves the front after the data
// checksums the data alone as its pieces land (the front is checked
// whole against the epilogue), and ends with the last byte of the front.
func TestPiecesFoldTheDataOnly(t *testing.T) {
	const n, front = 1<<20 + 3, 300 << 10
	l, p := frontPieceLink(t, n, front, 0)
	if p.pieces != 4 || (p.pieces-1)*p.piece >= n {
		t.Fatalf("%d pieces of %d bytes, want 4, the last holding the end of the data", p.pieces, p.piece)
	}
	for i := p.pieces - 1; i >= 0; i-- {
		if p.done {
			t.Fatalf("done with piece %d still out", i)
		}
		l.pieceDone(readDoneEv{slot: pieceSlot(3, i)})
	}
	if !p.done || p.err != nil || p.folded != n || p.inOrder != n+front {
		t.Fatalf("after the last piece: done %v err %v, %d bytes checksummed (want %d), %d landed (want %d)", p.done, p.err, p.folded, n, p.inOrder, n+front)
	}
	if crc, _ := p.sum.Finish(); crc != wire.CRC(p.r.mem[:n]) {
		t.Fatalf("data CRC %#x, want that of the data alone, %#x", crc, wire.CRC(p.r.mem[:n]))
	}
}

// TestFailedPieceKeepsItsSlot fails the second of a read's four pieces:
// the frame is done with the error at once (the link ends at its turn)
// and no longer counts as a transfer moving, nothing after the gap is
// checksummed, and the slot stays taken while the other pieces still
// complete, so none lands in another transfer.
func TestFailedPieceKeepsItsSlot(t *testing.T) {
	l, p := pieceLink(t, 1<<20, 0)
	bad := errors.New("remote access error")
	l.pieceDone(readDoneEv{slot: pieceSlot(3, 0)})
	l.pieceDone(readDoneEv{slot: pieceSlot(3, 1), err: bad})
	if !p.done || !errors.Is(p.err, bad) || l.readsOut != 0 || l.d.transfers.Load() != 0 {
		t.Fatalf("after the failed piece: done %v, err %v, transfers out %d (domain %d)", p.done, p.err, l.readsOut, l.d.transfers.Load())
	}
	l.pieceDone(readDoneEv{slot: pieceSlot(3, 2)})
	l.pieceDone(readDoneEv{slot: pieceSlot(3, 3)})
	if p.out != 0 || l.piecesOut != 0 || p.folded != p.piece || !errors.Is(p.err, bad) {
		t.Fatalf("after every piece: %d out (link %d), %d bytes checksummed, err %v", p.out, l.piecesOut, p.folded, p.err)
	}
	if l.readSlots[3] != p || slices.Contains(l.freeReads, 3) || l.readsOut != 0 || l.d.transfers.Load() != 0 {
		t.Fatalf("the failed read's slot was given back: slot %v, free %v, transfers out %d (domain %d)",
			l.readSlots[3], l.freeReads, l.readsOut, l.d.transfers.Load())
	}
}

// TestReadPiecesBudget: a link that reads many large payloads at once
// keeps at most maxPiecesOut read pieces posted (a verbs queue pair's
// initiator depth), and the pieces held back go as others complete: every
// payload arrives whole, in order, read in its four pieces.
func TestReadPiecesBudget(t *testing.T) {
	const frames, size = 12, 1 << 20 // 48 pieces of 256 KiB
	opts := wire.LinkOptions{RecvWindow: frames, Limits: wire.Limits{MaxFront: 4 << 10, MaxData: 4 << 20},
		Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}}
	tr := NewTransport("tcp", Config{Rendezvous: RendezvousRead})
	defer tr.Close()
	ln, err := tr.Listen(context.Background(), "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, peer := LinkPair(t, tr, ln, opts)
	defer peer.Close()
	defer dialed.Close()
	l := dialed.(*link)
	before := tr.Stats().ReadPieces

	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]wire.Frame, frames)
	for i := range out {
		d := make([]byte, size)
		for j := range d {
			d[j] = byte(rng.Uint32())
		}
		out[i] = wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: uint64(i + 1)}, Data: d}
	}
	if err := peer.WriteFrames(out); err != nil {
		t.Fatal(err)
	}
	// Pieces held back and never posted would leave ReadFrame waiting:
	// past the deadline the link is closed, which ends it.
	stuck := time.AfterFunc(30*time.Second, func() { l.Close() })
	defer stuck.Stop()
	var f wire.Frame
	for i := range frames {
		if err := l.ReadFrame(&f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.Preamble.Seq != uint64(i+1) || !bytes.Equal(f.Data, out[i].Data) {
			t.Fatalf("frame %d arrived as seq %d with other bytes", i, f.Preamble.Seq)
		}
		f.Release()
	}
	if got := tr.Stats().ReadPieces - before; got != 4*frames {
		t.Fatalf("%d read pieces for %d payloads of 1 MiB, want %d", got, frames, 4*frames)
	}
	if l.piecesHigh > maxPiecesOut {
		t.Fatalf("%d read pieces out at once, more than the budget of %d", l.piecesHigh, maxPiecesOut)
	}
	t.Logf("at most %d pieces out", l.piecesHigh)
}
