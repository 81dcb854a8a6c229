//go:build rdma

package rdma

import "testing"

// TestWritePiecesQueue plays the C side of osp_post (shim.h) for a write in
// pieces followed by a send: the write stays at the head of the post queue,
// with what it posted, until its last piece, through a refusal part way
// (the provider's queue full), and the send goes only after it. The
// providers here never refused a piece, so this is where that path is
// checked.
func TestWritePiecesQueue(t *testing.T) {
	d := &domain{poster: newPoster(), writeChunk: 300}
	defer d.poster.free()
	l := &link{d: d, id: 1}
	d.pq.push(postOp{l: l, kind: opWrite, n: 1000})
	d.pq.push(postOp{l: l, kind: opSend, n: 10})

	// Each step plays one call: C got the write at wantOff, posted a piece
	// up to off (0: none) with rc (1: more to post, 0: all posted or
	// refused), and posted nposted ops.
	for i, st := range []struct {
		wantOff, off uint64
		rc           int32
		nposted      int
		again        bool
		queued       int
		pieces       uint64
	}{
		{wantOff: 0, off: 300, rc: 1, queued: 2, pieces: 1},
		{wantOff: 300, off: 600, rc: 1, queued: 2, pieces: 2},
		{wantOff: 600, again: true, queued: 2, pieces: 2}, // refused: off stays
		{wantOff: 600, off: 900, rc: 1, queued: 2, pieces: 3},
		{wantOff: 900, off: 1000, nposted: 2, pieces: 4}, // the last piece, then the send
	} {
		n := d.preparePosts() // a C.int, which set can then fill
		if n != 2 {
			t.Fatalf("step %d: %d ops to post, want the write and the send", i, n)
		}
		c := &d.poster.cops[0]
		if uint64(c.off) != st.wantOff || uint64(c.chunk) != 300 || uint64(c.len) != 1000 {
			t.Fatalf("step %d: the write goes to C with off %d, chunk %d, len %d; want off %d, chunk 300, len 1000", i, c.off, c.chunk, c.len, st.wantOff)
		}
		if st.off != 0 {
			set(&c.off, st.off)
		}
		set(&c.rc, st.rc)
		d.poster.cops[1].rc = 0
		set(&n, int32(st.nposted))
		if again, partial := d.settlePosts(n); again != st.again || partial != (st.rc == 1) {
			t.Fatalf("step %d: settlePosts reports a refusal %v and more pieces %v, want %v and %v", i, again, partial, st.again, st.rc == 1)
		}
		if q, p := int(d.pq.n.Load()), d.writePieces.Load(); q != st.queued || p != st.pieces {
			t.Fatalf("step %d: %d ops queued and %d pieces counted, want %d and %d", i, q, p, st.queued, st.pieces)
		}
	}
}

// set stores v in a field of a cgo type (a test file cannot name C types).
func set[T ~uint64 | ~int32, V uint64 | int32](p *T, v V) { *p = T(v) }

// TestWriteBudgetHoldsQueue: a link with maxWritesOut write pieces posted
// and not completed posts no more (their completions must fit its CQ
// reservation): its write waits at the head of the queue, reported as a
// refusal, with what it posted, until a write completion frees room.
func TestWriteBudgetHoldsQueue(t *testing.T) {
	d := &domain{poster: newPoster(), writeChunk: 300}
	defer d.poster.free()
	l := &link{d: d, id: 1}
	l.writesOut.Store(maxWritesOut - 1)
	d.pq.push(postOp{l: l, kind: opWrite, n: 600})
	d.pq.push(postOp{l: l, kind: opSend, n: 10})

	// The first piece fills the budget.
	if n := d.preparePosts(); n != 2 {
		t.Fatalf("%d ops to post, want the write and the send", n)
	}
	set(&d.poster.cops[0].off, uint64(300))
	set(&d.poster.cops[0].rc, int32(1))
	if _, partial := d.settlePosts(0); !partial || l.writesOut.Load() != maxWritesOut {
		t.Fatalf("after a piece: partial %v, %d writes out; want true, %d", partial, l.writesOut.Load(), maxWritesOut)
	}

	// Held: nothing goes to C, and the queue reports a refusal.
	if n := d.preparePosts(); n != 0 {
		t.Fatalf("%d ops to post with the write budget spent, want 0", n)
	}
	if again, _ := d.settlePosts(0); !again || d.pq.n.Load() != 2 {
		t.Fatalf("held write: refusal %v, %d queued; want true, 2", again, d.pq.n.Load())
	}

	// A completion frees room: the rest of the write goes, then the send.
	l.complete(opWrite, 0, 0, nil)
	if n := d.preparePosts(); n != 2 || uint64(d.poster.cops[0].off) != 300 {
		t.Fatalf("after a completion: %d ops, the write from %d; want 2, from 300", n, d.poster.cops[0].off)
	}
	d.poster.cops[0].rc, d.poster.cops[1].rc = 0, 0
	if again, partial := d.settlePosts(2); again || partial || d.pq.n.Load() != 0 || l.writesOut.Load() != maxWritesOut {
		t.Fatalf("last piece: refusal %v, partial %v, %d queued, %d writes out; want false, false, 0, %d",
			again, partial, d.pq.n.Load(), l.writesOut.Load(), maxWritesOut)
	}
}
