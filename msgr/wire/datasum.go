package wire

import "github.com/ospreystore/osprey/internal/crc32c"

// DataSum folds a data segment into CRC32Cs as its bytes arrive, while
// they are still in the cache: the CRC of each chunk of a chosen size,
// aligned to the segment's start, and so of the whole segment. A link
// that receives a data segment in pieces checksums it so in one pass
// (LinkOptions.DataChunk); the zero value is ready for Start.
type DataSum struct {
	chunk int      // bytes per chunk; 0: one CRC over the whole segment
	n     int      // bytes folded
	cur   uint32   // CRC of the chunk in progress
	crcs  []uint32 // chunks done; the array is reused from segment to segment
}

// Start begins a segment, in chunks of chunk bytes (0 or less: one CRC
// for the whole segment, no chunks).
func (s *DataSum) Start(chunk int) {
	s.chunk, s.n, s.cur, s.crcs = max(chunk, 0), 0, 0, s.crcs[:0]
}

// Chunk is the chunk size Start was given (0: none).
func (s *DataSum) Chunk() int { return s.chunk }

// Len is the number of bytes folded since Start.
func (s *DataSum) Len() int { return s.n }

// Add folds in the segment's next bytes.
func (s *DataSum) Add(p []byte) {
	if s.chunk == 0 {
		s.cur = UpdateCRC(s.cur, p)
		s.n += len(p)
		return
	}
	for len(p) > 0 {
		k := min(len(p), s.chunk-s.n%s.chunk)
		s.cur = UpdateCRC(s.cur, p[:k])
		s.n += k
		p = p[k:]
		if s.n%s.chunk == 0 {
			s.crcs = append(s.crcs, s.cur)
			s.cur = 0
		}
	}
}

// Finish ends the segment and returns its CRC32C, and the CRC32Cs of its
// chunks (nil without chunks), which stay valid until the next Start. It
// may be called again, with the same result, until then.
func (s *DataSum) Finish() (crc uint32, chunks []uint32) {
	if s.chunk == 0 {
		return s.cur, nil
	}
	if len(s.crcs) < (s.n+s.chunk-1)/s.chunk { // the last chunk, short
		s.crcs = append(s.crcs, s.cur)
	}
	return crc32c.OfChunks(s.crcs, int64(s.chunk), int64(s.n)), s.crcs
}
