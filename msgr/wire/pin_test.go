package wire

import (
	"bytes"
	"testing"
	"unsafe"
)

var pinLimits = Limits{MaxFront: 1 << 20, MaxData: 1 << 20}

// frontStream encodes n MESSAGE frames of a front of frontLen bytes and no
// data, each front patterned after its index.
func frontStream(t *testing.T, n, frontLen int) []byte {
	t.Helper()
	var out bytes.Buffer
	w := writerLink(&out, 0, false)
	for i := range n {
		if err := w.WriteFrames([]Frame{msgFrame(uint64(i), frontLen, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// heldMemory is what the frames held keep alive: the distinct read chunks
// other than the one the link reads into (the pinned ones), and the bytes
// of the buffers of their own that frames were copied into.
func heldMemory(l *StreamLink, held []Frame) (pinned, own, frontBytes int) {
	seen := map[*Buffer]bool{}
	for i := range held {
		b := held[i].Buf
		frontBytes += len(held[i].Front)
		if seen[b] {
			continue
		}
		seen[b] = true
		switch {
		case b == l.chunk:
		case unsafe.SliceData(held[i].Front) == unsafe.SliceData(b.B):
			// A copy: in a chunk a front comes after its preamble.
			own += cap(b.B)
		default:
			pinned += cap(b.B)
		}
	}
	return pinned, own, frontBytes
}

// TestHeldFramesPinBounded: a reader that holds one small frame out of
// every few hundred, in a stream that fills 256 KiB chunks, keeps at most
// pinAllowance plus one chunk of chunks alive, however many it holds;
// past that the frames it holds cost about their own size. Each held
// frame's bytes stay intact, and once all are released nothing is pinned.
func TestHeldFramesPinBounded(t *testing.T) {
	const n, frontLen, every = 60000, 64, 300
	stream := frontStream(t, n, frontLen)
	l := NewReaderLink(bytes.NewReader(stream), 0, pinLimits)
	var held []Frame
	for i := range n {
		var f Frame
		if err := l.ReadFrame(&f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if i%every != 0 {
			f.Release()
			continue
		}
		held = append(held, f)
		pinned, own, bytes := heldMemory(l, held)
		if got := int(l.Pinned()); got != pinned {
			t.Fatalf("frame %d: Pinned says %d bytes, the held frames keep %d bytes of chunks alive", i, got, pinned)
		}
		if pinned > pinAllowance+readChunkSize {
			t.Fatalf("frame %d: %d frames of %d bytes pin %d bytes of chunks, above %d", i, len(held), frontLen, pinned, pinAllowance+readChunkSize)
		}
		if own > 2*bytes {
			t.Fatalf("frame %d: held frames' own buffers take %d bytes for %d bytes of fronts", i, own, bytes)
		}
	}
	pinned, own, _ := heldMemory(l, held)
	t.Logf("%d held frames of %d bytes: %d bytes of chunks pinned, %d bytes of their own buffers", len(held), frontLen, pinned, own)
	if own == 0 || l.Copied() < int64(own/64) {
		t.Fatalf("%d bytes of held frames copied out of their chunks, Copied says %d frames", own, l.Copied())
	}
	for k := range held {
		want := msgFrame(uint64(k*every), frontLen, 0)
		checkFrame(t, k*every, &held[k], &want)
	}
	releaseAll(held)
	if p := l.Pinned(); p != 0 {
		t.Fatalf("%d bytes pinned with every frame released", p)
	}
}

// TestReleasedFramesAreNotCopied: frames released before the next is read,
// as a prompt dispatcher does, are all handed out in the read chunk: the
// bound costs them no copy.
func TestReleasedFramesAreNotCopied(t *testing.T) {
	for _, tc := range []struct{ n, frontLen int }{{20000, 64}, {2000, 4000}} {
		n, frontLen := tc.n, tc.frontLen
		l := NewReaderLink(bytes.NewReader(frontStream(t, n, frontLen)), 0, pinLimits)
		for i := range n {
			var f Frame
			if err := l.ReadFrame(&f); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			if f.Buf != l.chunk {
				t.Fatalf("%d-byte front %d was copied out of the read chunk", frontLen, i)
			}
			f.Release()
		}
		if p, c := l.Pinned(), l.Copied(); p != 0 || c != 0 {
			t.Fatalf("%d bytes pinned and %d frames copied with every frame released at once", p, c)
		}
	}
}

// TestFittedBuffers: buffers for kept bytes come from a class of at most twice
// their size (4 KiB and up: GetBuffer's), and go back to their pool.
func TestFittedBuffers(t *testing.T) {
	for _, n := range []int{1, 63, 64, 65, 100, 1000, 2047, 2048, 2049, 4096, 5000, 60000} {
		b := getFitted(n)
		if len(b.B) != n || cap(b.B) > max(2*n, 64) {
			t.Errorf("getFitted(%d): len %d cap %d", n, len(b.B), cap(b.B))
		}
		b.Release()
	}
}
