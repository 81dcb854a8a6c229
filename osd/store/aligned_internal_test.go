package store

import (
	"testing"
	"unsafe"
)

// TestAlignedClasses: an extent's allocation holds it, starts on a
// dataAlign boundary, and costs at most a quarter more than its size
// (4 KiB at the least); memory given back serves the next extent of its
// class.
func TestAlignedClasses(t *testing.T) {
	sizes := []int{1, 4095, 4096, 4097, 8192, 12288, 16384, 20480, 20481, 4<<20 + 1, 4_500_000, 5 << 20, 8 << 20, 100 << 20, 128 << 20}
	for n := 4096; n <= 1<<20; n += 4096 {
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		c := alignedClass(n)
		if c < 0 || c >= alignedClasses {
			t.Fatalf("%d bytes: class %d", n, c)
		}
		size := alignedClassSize(c)
		if size < n || size > max(n+n/4, 4096) {
			t.Fatalf("%d bytes: class %d of %d bytes", n, c, size)
		}
		if c > 0 && alignedClassSize(c-1) >= n {
			t.Fatalf("%d bytes: class %d, where %d (%d bytes) holds it", n, c, c-1, alignedClassSize(c-1))
		}
	}
	if c := alignedClass(128<<20 + 1); c != -1 {
		t.Fatalf("an extent past 128 MiB has class %d", c)
	}
	b, mem := getAligned(4_500_000)
	if len(b) != 4_500_000 || cap(*mem) != 5<<20 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%dataAlign != 0 {
		t.Fatalf("getAligned(4.5 MB): len %d, cap %d, at %p", len(b), cap(*mem), unsafe.SliceData(b))
	}
	putAligned(mem)
	if _, again := getAligned(4_400_000); again != mem {
		t.Fatal("memory given back not reused for its class")
	}
}
