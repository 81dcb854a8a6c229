// Package crc32c combines CRC32C (Castagnoli) values: the CRC of A||B from
// the CRCs of A and B and the length of B, so that code that checksummed
// the pieces of some bytes gets the CRC of the whole without a second pass.
// It imports nothing of Osprey, so the messenger and the store share it.
package crc32c

import (
	"hash/crc32"
	"sync"
)

// Combine returns the CRC32C of A||B from crcA, crcB and len(B) (zlib's
// crc32_combine, for the Castagnoli polynomial).
func Combine(crcA, crcB uint32, lenB int64) uint32 {
	return appendZeros(crcA, lenB) ^ crcB
}

// OfChunks is the CRC32C of size bytes from the CRC32Cs of their chunks
// of chunk bytes (the last one the remainder); 0, the CRC32C of nothing,
// for no chunks.
func OfChunks(crcs []uint32, chunk, size int64) uint32 {
	if len(crcs) == 0 {
		return 0
	}
	sum := crcs[0]
	for i := 1; i < len(crcs); i++ {
		l := chunk
		if i == len(crcs)-1 {
			l = size - int64(i)*chunk
		}
		sum = Combine(sum, crcs[i], l)
	}
	return sum
}

// zeroOps[k] is the GF(2) matrix (column i: the image of bit i) that
// advances a CRC32C register over 2^k zero bytes.
var zeroOps = sync.OnceValue(func() *[64][32]uint32 {
	var ops [64][32]uint32
	// One zero bit: the reflected polynomial, then the shifts of a reflected
	// register; squared three times, one zero byte.
	var bit [32]uint32
	bit[0] = crc32.Castagnoli
	for i := 1; i < 32; i++ {
		bit[i] = 1 << (i - 1)
	}
	gf2Square(&ops[0], &bit)
	gf2Square(&bit, &ops[0])
	gf2Square(&ops[0], &bit)
	for k := 1; k < 64; k++ {
		gf2Square(&ops[k], &ops[k-1])
	}
	return &ops
})

// appendZeros advances a CRC32C register crc over n zero bytes: at most 64
// matrix-vector products, one per bit of n.
func appendZeros(crc uint32, n int64) uint32 {
	ops := zeroOps()
	for k := 0; n > 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			crc = gf2Times(&ops[k], crc)
		}
	}
	return crc
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := range 32 {
		square[n] = gf2Times(mat, mat[n])
	}
}
