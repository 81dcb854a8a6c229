package msgr

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestSealedLinkForms: a frame with at least sealSplitMinData of data and
// a front of at most sealSplitMaxFront goes in two parts (the outer
// frame's front the sealed front and preamble, its data the sealed
// data, as records from sealRecordMinData), any other in one; either way
// it comes out as it went in, its data where the link placed the outer
// frame's data segment, or in records on a DataAlign boundary.
func TestSealedLinkForms(t *testing.T) {
	for _, front := range []int{0, 16, sealSplitMaxFront, sealSplitMaxFront + 1} {
		for _, size := range []int{0, 1, sealSplitMinData - 1, sealSplitMinData, sealSplitMinData + 1, 1 << 20} {
			t.Run(fmt.Sprintf("front=%d/data=%d", front, size), func(t *testing.T) {
				w, r, q := sealedPair(t)
				in := wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Type: 7, Seq: 3, Ack: 2, GrantMsgs: 9, GrantBytes: 1 << 33, Tid: 42},
					Front: bytes.Repeat([]byte{'f'}, front), Data: bytes.Repeat([]byte{'d', 0x5a}, size/2+size%2)[:size]}
				if err := w.WriteFrames([]wire.Frame{in}); err != nil {
					t.Fatal(err)
				}
				out := q.q[0]
				twoParts := size >= sealSplitMinData && front <= sealSplitMaxFront
				if out.Tag != wire.TagSealed || (len(out.Front) != 0) != twoParts {
					t.Fatalf("went as a %v frame with a %d-byte front, want two parts: %v", out.Tag, len(out.Front), twoParts)
				}
				k, records := sealedRecords(size)
				if !records {
					k = 1
				}
				if twoParts && (len(out.Front) != front+wire.SealedOverhead || len(out.Data) != size+k*auth.Overhead) {
					t.Fatalf("parts of %d and %d bytes, want %d records", len(out.Front), len(out.Data), k)
				}
				if bytes.Contains(out.Data, []byte("d\x5ad\x5ad\x5a")) || front > 3 && bytes.Contains(out.Front, []byte("ffff")) {
					t.Fatal("plaintext on the wire")
				}
				placed := out.Data
				var got wire.Frame
				if err := r.ReadFrame(&got); err != nil {
					t.Fatal(err)
				}
				defer got.Release()
				in.FrontLen, in.DataLen = uint32(front), uint32(size)
				if got.Preamble != in.Preamble || !bytes.Equal(got.Front, in.Front) || !bytes.Equal(got.Data, in.Data) {
					t.Fatalf("got %+v, want %+v", got.Preamble, in.Preamble)
				}
				switch {
				case twoParts && records:
					// Opened out of place, into a buffer of its own.
					if uintptr(unsafe.Pointer(&got.Data[0]))%wire.DataAlign != 0 {
						t.Fatal("the data of a frame in records is not aligned")
					}
				case size > 0 && &got.Data[0] != &placed[0]:
					t.Fatal("the data does not lie where the link placed the data segment")
				}
			})
		}
	}
}

// twoPartFrame is a frame that goes in two parts.
var twoPartFrame = wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 1}, Front: []byte("front"), Data: bytes.Repeat([]byte{7}, sealSplitMinData)}

// sealParts seals a two-part frame by hand, with w's sealer: head is the
// plaintext of the front and preamble part (front, then p), data that of
// the data part.
func sealParts(t *testing.T, w *sealedLink, front []byte, p wire.Preamble, data []byte) wire.Frame {
	t.Helper()
	head := append(append([]byte(nil), front...), make([]byte, wire.PreambleSize)...)
	p.Put(head[len(front):])
	sh, err := w.seal.Seal(nil, head, sealedHeadAD)
	if err != nil {
		t.Fatal(err)
	}
	sd, err := w.seal.Seal(nil, data, sealedDataAD)
	if err != nil {
		t.Fatal(err)
	}
	return wire.Frame{Preamble: wire.Preamble{Tag: wire.TagSealed, Flags: wire.FlagNoDataCRC}, Front: sh, Data: sd}
}

// pair writes twoPartFrame twice, then mangle alters what the link below
// holds.
func pair(mangle func(q *queueLink)) func(t *testing.T, w *sealedLink, q *queueLink) {
	return func(t *testing.T, w *sealedLink, q *queueLink) {
		if err := w.WriteFrames([]wire.Frame{twoPartFrame, twoPartFrame}); err != nil {
			t.Fatal(err)
		}
		mangle(q)
	}
}

// TestSealedLinkTwoPartsRefused: a two-part frame with either part
// altered, its data part swapped with another frame's, cut short or
// dropped, a part sent as a one-part frame, or a front and preamble part
// whose data length is not that of the data part, is refused, and
// nothing of it is delivered. A part that does not open is auth.ErrOpen
// and leaves the link refusing every frame after it.
func TestSealedLinkTwoPartsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// send puts the frames to read in the link below, sealed by w:
		// mostly (pair) twoPartFrame twice, then altered.
		send func(t *testing.T, w *sealedLink, q *queueLink)
		want error
	}{
		{"head altered", pair(func(q *queueLink) { q.q[0].Front[3] ^= 1 }), auth.ErrOpen},
		{"data altered", pair(func(q *queueLink) { q.q[0].Data[len(q.q[0].Data)/2] ^= 1 }), auth.ErrOpen},
		{"tag altered", pair(func(q *queueLink) { q.q[0].Data[len(q.q[0].Data)-1] ^= 1 }), auth.ErrOpen},
		{"data parts swapped", pair(func(q *queueLink) {
			q.q[0].Data, q.q[1].Data = q.q[1].Data, q.q[0].Data
		}), auth.ErrOpen},
		{"data part truncated", pair(func(q *queueLink) { q.q[0].Data = q.q[0].Data[:len(q.q[0].Data)-1] }), wire.ErrMalformed},
		{"data part dropped", pair(func(q *queueLink) { q.q[0].Data = nil }), wire.ErrMalformed},
		{"head as a one-part frame", pair(func(q *queueLink) {
			q.q[0].Data, q.q[0].Front = q.q[0].Front, nil
		}), auth.ErrOpen},
		{"data part as a one-part frame", pair(func(q *queueLink) { q.q[0].Front = nil }), auth.ErrOpen},
		{"one-part frame as a head", func(t *testing.T, w *sealedLink, q *queueLink) {
			w.WriteFrames([]wire.Frame{{Preamble: wire.Preamble{Tag: wire.TagMessage}, Front: []byte("front")}, twoPartFrame})
			q.q[0].Front, q.q[0].Data = q.q[0].Data, q.q[1].Data
		}, auth.ErrOpen},
		{"head says more data", func(t *testing.T, w *sealedLink, q *queueLink) {
			p := twoPartFrame.Preamble
			p.FrontLen, p.DataLen = 5, sealSplitMinData+1
			q.WriteFrames([]wire.Frame{sealParts(t, w, []byte("front"), p, twoPartFrame.Data)})
		}, wire.ErrMalformed},
		{"head says less data", func(t *testing.T, w *sealedLink, q *queueLink) {
			p := twoPartFrame.Preamble
			p.FrontLen, p.DataLen = 5, sealSplitMinData-1
			q.WriteFrames([]wire.Frame{sealParts(t, w, []byte("front"), p, twoPartFrame.Data)})
		}, wire.ErrMalformed},
		{"head says another front", func(t *testing.T, w *sealedLink, q *queueLink) {
			p := twoPartFrame.Preamble
			p.FrontLen, p.DataLen = 4, sealSplitMinData
			q.WriteFrames([]wire.Frame{sealParts(t, w, []byte("front"), p, twoPartFrame.Data)})
		}, wire.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, r, q := sealedPair(t)
			tc.send(t, w, q)
			readRefused(t, w, r, q, tc.want, twoPartFrame)
		})
	}
}

// readRefused reads the frame at the head of q with r and checks that it
// is refused with want and nothing of it delivered; after auth.ErrOpen,
// that next, sealed by w, is refused too.
func readRefused(t *testing.T, w, r *sealedLink, q *queueLink, want error, next wire.Frame) {
	t.Helper()
	var f wire.Frame
	err := r.ReadFrame(&f)
	if !errors.Is(err, want) {
		t.Fatalf("read %v, want %v", err, want)
	}
	if f.Buf != nil || f.Data != nil || f.Front != nil || f.Tag != 0 {
		t.Fatalf("delivered %+v with %d bytes of data", f.Preamble, len(f.Data))
	}
	if want == auth.ErrOpen {
		w.WriteFrames([]wire.Frame{next})
		q.q = q.q[len(q.q)-1:]
		if err := r.ReadFrame(&f); !errors.Is(err, auth.ErrOpen) {
			t.Fatalf("the frame after a refused one: %v", err)
		}
	}
}

// BenchmarkSealedForms: a frame sealed, moved (copied, as a transport
// receives it) and opened in one part and in two, by data size, for
// sealSplitMinData: the second AEAD message's fixed cost against the
// copy of the data it saves.
func BenchmarkSealedForms(b *testing.B) {
	for _, size := range []int{1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 64 << 10, 1 << 20} {
		for _, split := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%d/two-parts=%v", size, split), func(b *testing.B) {
				w, r, q := sealedPair(b)
				msg := wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage}, Front: make([]byte, 100), Data: make([]byte, size)}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					var of wire.Frame
					if err := w.sealFrame(&of, &msg, split); err != nil {
						b.Fatal(err)
					}
					q.WriteFrames([]wire.Frame{of})
					w.releaseBatch()
					var got wire.Frame
					if err := r.ReadFrame(&got); err != nil {
						b.Fatal(err)
					}
					got.Release()
				}
			})
		}
	}
}

// TestSealedLinkPassesCharge: what the link below charged of the receive
// budget for a sealed frame (before reading it) is held by the MESSAGE
// opened from it, in either form, until that is released; a frame that
// is not a MESSAGE, or one refused, lets it go at once.
func TestSealedLinkPassesCharge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		f      wire.Frame
		refuse bool
		held   bool
	}{
		{"one part", wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage}, Front: []byte("f"), Data: []byte("data")}, false, true},
		{"two parts", twoPartFrame, false, true},
		{"ack", wire.Frame{Preamble: wire.Preamble{Tag: wire.TagAck, Ack: 3}}, false, false},
		{"refused", twoPartFrame, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := wire.NewBudget(1 << 30)
			w, r, q := sealedPair(t)
			if err := w.WriteFrames([]wire.Frame{tc.f}); err != nil {
				t.Fatal(err)
			}
			in := &q.q[0]
			if tc.refuse {
				in.Data[0] ^= 1
			}
			n := int64(len(in.Front) + len(in.Data))
			if !b.Grow(&in.Charge, n, nil) {
				t.Fatal("not charged")
			}
			var got wire.Frame
			err := r.ReadFrame(&got)
			if (err != nil) != tc.refuse {
				t.Fatalf("read: %v", err)
			}
			if want := map[bool]int64{true: n}[tc.held]; got.Charge.Bytes() != want || b.Stats().InFlight != want {
				t.Fatalf("the opened %v holds %d bytes of the budget, %d held in all, want %d", got.Tag, got.Charge.Bytes(), b.Stats().InFlight, want)
			}
			got.Release()
			if st := b.Stats(); st.InFlight != 0 {
				t.Fatalf("%d bytes held after the frame's release", st.InFlight)
			}
		})
	}
}
