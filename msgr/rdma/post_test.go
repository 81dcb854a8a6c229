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

	// round plays one call: C posted a piece of the write (off after it;
	// 0 for none) with rc (1: more to post, 0: all posted or refused),
	// and posted nposted ops.
	round := func(wantOff uint64, off uint64, rc int32, nposted int) (again bool) {
		t.Helper()
		n := d.preparePosts() // a C.int, which set can then fill
		if n != 2 {
			t.Fatalf("%d ops to post, want the write and the send", n)
		}
		c := &d.poster.cops[0]
		if uint64(c.off) != wantOff || uint64(c.chunk) != 300 || uint64(c.len) != 1000 {
			t.Fatalf("the write goes to C with off %d, chunk %d, len %d; want off %d, chunk 300, len 1000", c.off, c.chunk, c.len, wantOff)
		}
		if off != 0 {
			set(&c.off, off)
		}
		set(&c.rc, rc)
		d.poster.cops[1].rc = 0
		set(&n, int32(nposted))
		return d.settlePosts(n)
	}
	check := func(queued int, pieces uint64) {
		t.Helper()
		if n := int(d.pq.n.Load()); n != queued {
			t.Fatalf("%d ops queued, want %d", n, queued)
		}
		if p := d.writePieces.Load(); p != pieces {
			t.Fatalf("%d pieces counted, want %d", p, pieces)
		}
	}
	if round(0, 300, 1, 0) {
		t.Fatal("a piece posted read as a refusal")
	}
	check(2, 1)
	if round(300, 600, 1, 0) {
		t.Fatal("a piece posted read as a refusal")
	}
	check(2, 2)
	// Refused: nothing posted, off stays.
	if !round(600, 0, 0, 0) {
		t.Fatal("a refusal not reported")
	}
	check(2, 2)
	if round(600, 900, 1, 0) {
		t.Fatal("a piece posted read as a refusal")
	}
	check(2, 3)
	// The last piece, then the send, in one call.
	if round(900, 1000, 0, 2) {
		t.Fatal("a call that posted everything reported a refusal")
	}
	check(0, 4)
}

// set stores v in a field of a cgo type (a test file cannot name C types).
func set[T ~uint64 | ~int32, V uint64 | int32](p *T, v V) { *p = T(v) }
