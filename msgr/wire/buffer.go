package wire

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Buffer is a reference-counted byte buffer from a size-classed pool. The
// receive path reads frames into Buffers and hands out slices of them, so a
// message costs no allocation and no copy; the last Release returns the
// buffer to its pool.
type Buffer struct {
	B     []byte
	refs  atomic.Int32
	class int8
	free  func(*Buffer) // for buffers this pool does not own
	// Owner is set by whoever allocated an external buffer (a
	// transport's registered region, say) so that it can recognise its
	// own memory when the buffer comes back to it in a frame; everyone
	// else ignores it.
	Owner any
	// Lent marks a buffer a transport lends for one received frame and
	// needs back to receive more: an RDMA receive buffer, which must be
	// posted again before the credit for it is granted. Whoever keeps
	// received bytes past the message's release copies them out of such
	// a buffer (msgr's Message.KeepData) instead of taking a reference.
	Lent bool
	// crcs holds the chunk CRC32Cs of a received data segment in b
	// (Frame.DataChunkCRCs); the array stays with b in its pool, so a
	// frame hands them up without an allocation.
	crcs []uint32
	// pin, set by a stream link on a read chunk it lets go while frames
	// still point into it, is the link's count of such chunks' bytes;
	// the last Release takes the chunk off it.
	pin *atomic.Int64
}

// NewExternalBuffer wraps memory the caller owns (registered memory, say)
// with one reference; the last Release calls free instead of pooling.
func NewExternalBuffer(b []byte, free func(*Buffer)) *Buffer {
	buf := &Buffer{B: b, class: -1, free: free}
	buf.refs.Store(1)
	return buf
}

// External reports whether b is memory its allocator owns outside the
// pool (NewExternalBuffer): a transport's registered memory, say, which is
// scarcer than the heap and bounded by the transport's budget.
func (b *Buffer) External() bool { return b.free != nil }

// Reset gives an external buffer one reference again, for reuse.
func (b *Buffer) Reset(n int) {
	b.B = b.B[:n]
	b.refs.Store(1)
}

// Size classes: 4 KiB, then four per doubling (5, 6, 7, 8 KiB, 10, 12,
// 14, 16 KiB, ...) up to 128 MiB, so a buffer wastes at most a fifth of
// itself: with one class per power of two a 4 MiB object's body and its
// front took an 8 MiB buffer.
const (
	minClassShift = 12 // 4 KiB
	maxClassShift = 27 // 128 MiB
	classSteps    = 4  // classes per doubling
	numClasses    = 1 + (maxClassShift-minClassShift)*classSteps
)

// Small classes, 64 B to 2 KiB in powers of two, after the others: only
// getFitted hands them out, for bytes copied out of a read chunk, so that
// a small message kept that way costs about its size. Elsewhere buffers
// start at 4 KiB, on a page (GetAligned relies on it).
const (
	minSmallShift   = 6  // 64 B
	maxSmallShift   = 11 // 2 KiB
	numSmallClasses = maxSmallShift - minSmallShift + 1
)

var bufPools [numClasses + numSmallClasses]sync.Pool

// classSize is the capacity of class c's buffers.
func classSize(c int) int {
	if c == 0 {
		return 1 << minClassShift
	}
	base := 1 << (minClassShift + (c-1)/classSteps)
	return base + ((c-1)%classSteps+1)*(base/classSteps)
}

// GetBuffer returns a buffer with len(B) == n and one reference. Sizes above
// the largest class are allocated and not pooled.
func GetBuffer(n int) *Buffer {
	c := sizeClass(n)
	if c < 0 {
		b := &Buffer{B: make([]byte, n), class: -1}
		b.refs.Store(1)
		return b
	}
	if v := bufPools[c].Get(); v != nil {
		b := v.(*Buffer)
		b.B = b.B[:n]
		b.refs.Store(1)
		return b
	}
	b := &Buffer{B: make([]byte, n, classSize(c)), class: int8(c)}
	b.refs.Store(1)
	return b
}

// getFitted is GetBuffer for a buffer that is kept for its bytes rather
// than read into: below 2 KiB it comes from a class of at most twice n,
// not a 4 KiB one, and it need not start on a page.
func getFitted(n int) *Buffer {
	if n > 1<<maxSmallShift {
		return GetBuffer(n)
	}
	shift := minSmallShift
	if n > 1<<minSmallShift {
		shift = bits.Len(uint(n - 1)) // n <= 1<<shift
	}
	c := numClasses + shift - minSmallShift
	if v := bufPools[c].Get(); v != nil {
		b := v.(*Buffer)
		b.B = b.B[:n]
		b.refs.Store(1)
		return b
	}
	b := &Buffer{B: make([]byte, n, 1<<shift), class: int8(c)}
	b.refs.Store(1)
	return b
}

// sizeClass is the smallest class whose buffers hold n bytes, -1 above
// the largest.
func sizeClass(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	shift := bits.Len(uint(n - 1)) // 1<<(shift-1) < n <= 1<<shift
	if shift > maxClassShift {
		return -1
	}
	base := 1 << (shift - 1)
	step := base / classSteps
	q := (n - base + step - 1) / step // 1 to classSteps
	return 1 + (shift-1-minClassShift)*classSteps + q - 1
}

// SetChunkCRCs copies crcs into storage that lives with b and returns it:
// a link's chunk CRC32Cs of the data segment it read into b, valid for as
// long as b is referenced.
func (b *Buffer) SetChunkCRCs(crcs []uint32) []uint32 {
	b.crcs = append(b.crcs[:0], crcs...)
	return b.crcs
}

// Ref adds a reference.
func (b *Buffer) Ref() { b.refs.Add(1) }

// Refs is the references held now, for checks (msgr's invariants build
// asserts that nobody else holds a Lent buffer when its message is
// released).
func (b *Buffer) Refs() int32 { return b.refs.Load() }

// Release drops a reference; the last one returns the buffer to the pool.
func (b *Buffer) Release() {
	switch n := b.refs.Add(-1); {
	case n == 0:
		if p := b.pin; p != nil {
			b.pin = nil
			p.Add(-int64(cap(b.B)))
		}
		if b.free != nil {
			b.free(b)
		} else if b.class >= 0 {
			bufPools[b.class].Put(b)
		}
	case n < 0:
		panic("wire: Buffer released more times than referenced")
	}
}

// DataAlign is where a received data segment starts: on a multiple of
// DataAlign in memory, so the store can write it with O_DIRECT from where
// it lies, as Ceph's msgr2 places data segments on a page boundary.
const DataAlign = 4096

// GetAligned returns a buffer with one reference and n bytes of it, b,
// whose byte at (which may lie past n) falls on a DataAlign boundary: a
// frame's body placed so that its data segment, at offset at, is aligned.
// The bytes of buf.B before b are unused. Pooled buffers start on a page, so the placement
// costs no larger size class unless the bytes before at spill over it.
func GetAligned(n, at int) (buf *Buffer, b []byte) {
	buf = GetBuffer(n)
	s := alignedStart(buf.B, at)
	if s+n > cap(buf.B) {
		buf.Release()
		buf = GetBuffer(n + DataAlign - 1)
		s = alignedStart(buf.B, at)
	}
	buf.B = buf.B[:s+n]
	return buf, buf.B[s : s+n]
}

// alignedStart is the offset in b from which byte at of a run falls on a
// DataAlign boundary.
func alignedStart(b []byte, at int) int {
	base := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	return -(base + at) & (DataAlign - 1)
}
