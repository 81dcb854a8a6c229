package ops

import (
	"hash/crc32"
	"sync"
)

// CRC32CCombine returns the CRC32C of A||B from crcA, crcB and len(B)
// (zlib's crc32_combine, for the Castagnoli polynomial): the store gets an
// object's CRC32C from its chunks' without a second pass over the bytes,
// and the SDK a multipart object's from its parts'.
func CRC32CCombine(crcA, crcB uint32, lenB int64) uint32 {
	return appendZeros(crcA, lenB) ^ crcB
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
