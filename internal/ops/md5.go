package ops

import (
	"crypto/md5"
	"hash"
	"sync"

	md5simd "github.com/minio/md5-simd"
)

// md5Server hashes the large MD5s of the process in SIMD lanes (MinIO's
// md5-simd): the SDK's ETags (client Options.MD5), the S3 gateway's
// Content-MD5 checks and the OSDs' ETags of uploaded parts. A chunk is
// handed over as soon as it is read, so the MD5 runs in the server's
// goroutine alongside the reading of the next chunk rather than after
// it. One server for all: its AVX-512 code hashes up to 16 streams for
// about the cost of one, but only streams with a block waiting at the
// same moment, so a second server (one per OSD, say) would split the
// streams and empty the lanes of both.
var md5Server = sync.OnceValue(md5simd.NewServer)

// NewMD5 starts an MD5 of about size bytes (-1: not known): on the
// process's md5-simd server, or, up to InlineMD5Max bytes, crypto/md5 on
// the caller's goroutine. Close releases its lane. Any number of bytes
// may be written, whatever size announced; only the cost depends on it.
func NewMD5(size int64) md5simd.Hasher {
	if size >= 0 && size <= InlineMD5Max {
		return inlineMD5{md5.New()}
	}
	return md5Server().NewHash()
}

// InlineMD5Max is the largest body whose MD5 is cheaper inline. A stream
// on the md5-simd server costs a fixed part besides its bytes (joining
// the server, the handoff of each block and of the sum, and the server's
// goroutine polling every stream's channel for blocks): about 165 µs of
// CPU per 4 KiB PUT through the S3 gateway, where crypto/md5 hashes 4 KiB
// in 8 µs (docs/s3.md). Its lanes save about 1.2 µs a KiB over crypto/md5
// on a large body, so below some 128 KiB the fixed part outweighs them.
const InlineMD5Max = 128 << 10

// inlineMD5 is crypto/md5 as an md5simd.Hasher: no lane to release.
type inlineMD5 struct{ hash.Hash }

func (inlineMD5) Close() {}
