package wire

import (
	"testing"
)

func TestSizeClass(t *testing.T) {
	tests := []struct{ n, class int }{
		{0, 0}, {1, 0}, {4096, 0}, {4097, 1}, {5120, 1}, {5121, 2}, {8192, 4}, {8193, 5},
		{1 << 20, 32}, {1<<20 + 1, 33},
		{4<<20 + 4096, 41}, // a 4 MiB object's body with its front: 5 MiB, not 8
		{1 << maxClassShift, numClasses - 1}, {1<<maxClassShift + 1, -1},
	}
	for _, tc := range tests {
		if got := sizeClass(tc.n); got != tc.class {
			t.Errorf("sizeClass(%d) = %d, want %d", tc.n, got, tc.class)
		}
	}
	// Every size lands in the smallest class that holds it, and no class
	// is more than a quarter larger than the one below it.
	for c := 1; c < numClasses; c++ {
		lo, hi := classSize(c-1), classSize(c)
		if hi <= lo || hi > lo+lo/4+1<<minClassShift/4 {
			t.Fatalf("class %d holds %d, class %d %d", c-1, lo, c, hi)
		}
		for _, n := range []int{lo + 1, hi} {
			if got := sizeClass(n); got != c {
				t.Fatalf("sizeClass(%d) = %d, want %d (classes hold %d, %d)", n, got, c, lo, hi)
			}
		}
	}
}

func TestGetBuffer(t *testing.T) {
	for _, n := range []int{0, 1, 100, 4096, 4097, 65536, 65537, readChunkSize, 3 << 20} {
		b := GetBuffer(n)
		if len(b.B) != n {
			t.Fatalf("GetBuffer(%d): len %d", n, len(b.B))
		}
		c := sizeClass(n)
		if int(b.class) != c {
			t.Fatalf("GetBuffer(%d): class %d, want %d", n, b.class, c)
		}
		if want := classSize(c); cap(b.B) != want {
			t.Fatalf("GetBuffer(%d): cap %d, want %d", n, cap(b.B), want)
		}
		if r := b.refs.Load(); r != 1 {
			t.Fatalf("GetBuffer(%d): %d refs", n, r)
		}
		b.Release()
	}
	// Above the largest class: allocated exactly, never pooled.
	if testing.Short() {
		return
	}
	b := GetBuffer(1<<maxClassShift + 1)
	if b.class != -1 || len(b.B) != 1<<maxClassShift+1 {
		t.Fatalf("huge buffer: class %d len %d", b.class, len(b.B))
	}
	b.Release()
}

func TestBufferRefRelease(t *testing.T) {
	b := GetBuffer(100)
	b.Ref()
	b.Ref()
	b.Release()
	b.Release()
	if r := b.refs.Load(); r != 1 {
		t.Fatalf("%d refs left, want 1", r)
	}
	b.Release()
	defer func() {
		if recover() == nil {
			t.Fatal("releasing a buffer once too often did not panic")
		}
	}()
	b.Release()
}

func TestBufferReuse(t *testing.T) {
	// sync.Pool may drop anything (the race detector drops a quarter of
	// Puts on purpose), so look for reuse over several tries.
	reused := false
	for range 64 {
		a := GetBuffer(5500)
		a.B[0] = 0xaa
		a.Release()
		b := GetBuffer(6000) // same class (6 KiB)
		if len(b.B) != 6000 || cap(b.B) != 6144 || b.refs.Load() != 1 {
			t.Fatalf("len %d cap %d refs %d", len(b.B), cap(b.B), b.refs.Load())
		}
		if a == b {
			reused = true
		}
		b.Release()
		if reused {
			break
		}
	}
	if !reused {
		t.Skip("the pool never handed a buffer back (allowed by sync.Pool)")
	}
}

func TestFrameRelease(t *testing.T) {
	b := GetBuffer(10)
	b.Ref()
	f := Frame{Front: b.B[:3], Data: b.B[3:], Buf: b}
	f.Release()
	if f.Buf != nil || f.Front != nil || f.Data != nil {
		t.Fatalf("after Release: %+v", f)
	}
	f.Release() // a second Release is harmless
	if r := b.refs.Load(); r != 1 {
		t.Fatalf("%d refs, want 1", r)
	}
	b.Release()
}

func TestExternalBuffer(t *testing.T) {
	mem := make([]byte, 1000)
	var freed []*Buffer
	b := NewExternalBuffer(mem[:100], func(b *Buffer) { freed = append(freed, b) })
	if len(b.B) != 100 || b.refs.Load() != 1 {
		t.Fatalf("len %d refs %d", len(b.B), b.refs.Load())
	}
	b.Ref()
	b.Release()
	if len(freed) != 0 {
		t.Fatal("freed with a reference left")
	}
	b.Release()
	if len(freed) != 1 || freed[0] != b {
		t.Fatalf("free called %d times", len(freed))
	}
	// Reused by its owner: one reference again, the same memory.
	b.Reset(500)
	if len(b.B) != 500 || &b.B[0] != &mem[0] || b.refs.Load() != 1 {
		t.Fatalf("after Reset: len %d refs %d", len(b.B), b.refs.Load())
	}
	b.Release()
	if len(freed) != 2 {
		t.Fatalf("free called %d times after reuse", len(freed))
	}
	// An external buffer never lands in the pool.
	for range 16 {
		if g := GetBuffer(100); g == b {
			t.Fatal("the pool handed out an external buffer")
		} else {
			g.Release()
		}
	}
}
