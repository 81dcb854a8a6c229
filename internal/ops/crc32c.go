package ops

import "github.com/ospreystore/osprey/internal/crc32c"

// CRC32CCombine returns the CRC32C of A||B from crcA, crcB and len(B)
// (crc32c.Combine): the store gets an object's CRC32C from its chunks'
// without a second pass over the bytes, and the SDK a multipart object's
// from its parts'.
func CRC32CCombine(crcA, crcB uint32, lenB int64) uint32 {
	return crc32c.Combine(crcA, crcB, lenB)
}
