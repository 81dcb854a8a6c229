package client

import (
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// wholeCRC32C is the CRC32C of an object's bytes: the one its metadata
// holds for an object put in one op, and for a multipart object (whose
// manifest holds only its parts' CRC32Cs) their combination, as S3's
// full-object CRC32C of a multipart upload is.
func wholeCRC32C(m *osdpb.ObjectMeta) uint32 {
	if len(m.GetParts()) == 0 {
		return m.GetCrc32C()
	}
	var crc uint32 // of no bytes
	for _, p := range m.Parts {
		crc = ops.CRC32CCombine(crc, p.GetCrc32C(), int64(p.GetSize()))
	}
	return crc
}
