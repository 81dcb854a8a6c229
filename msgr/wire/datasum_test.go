package wire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// wantChunkCRCs is the CRC32C of each chunk-byte chunk of b, computed
// chunk by chunk.
func wantChunkCRCs(b []byte, chunk int) []uint32 {
	var crcs []uint32
	for i := 0; i < len(b); i += chunk {
		crcs = append(crcs, CRC(b[i:min(i+chunk, len(b))]))
	}
	return crcs
}

// TestDataSum: whatever pieces a segment arrives in, the sum gives each
// chunk's CRC32C and the whole segment's, and Finish may be called again.
func TestDataSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s DataSum
	for _, size := range []int{1, 100, 4096, 4097, 1 << 16, 3<<16 + 5} {
		b := pattern(size, byte(size))
		for _, chunk := range []int{0, 1, 7, 4096, 1 << 16, 1 << 20} {
			s.Start(chunk)
			for rest := b; len(rest) > 0; {
				k := min(len(rest), 1+rng.IntN(9000))
				s.Add(rest[:k])
				rest = rest[k:]
			}
			for range 2 {
				crc, crcs := s.Finish()
				if crc != CRC(b) {
					t.Fatalf("%d bytes in chunks of %d: crc %08x, want %08x", size, chunk, crc, CRC(b))
				}
				var want []uint32
				if chunk > 0 {
					want = wantChunkCRCs(b, chunk)
				}
				if !slicesEqual(crcs, want) {
					t.Fatalf("%d bytes in chunks of %d: chunk crcs %x, want %x", size, chunk, crcs, want)
				}
			}
		}
	}
}

func slicesEqual(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReadFrameChunkCRCs: with LinkOptions.DataChunk a link hands up each
// MESSAGE's data chunk CRCs and the data's CRC, for small frames and
// large, sent with a data CRC or without, read in random pieces; a
// corrupted data segment sent with a CRC still fails as a CRC error.
func TestReadFrameChunkCRCs(t *testing.T) {
	const chunk = 16 << 10
	rng := rand.New(rand.NewPCG(3, 4))
	var frames []Frame
	var b []byte
	for i, size := range []int{0, 1, 5000, chunk, chunk + 1, bigFrameBytes + 100, 5*chunk - 3, 300 << 10} {
		f := msgFrame(uint64(i+1), 20, size)
		if i%2 == 1 {
			f.Flags = FlagNoDataCRC
		}
		frames = append(frames, f)
		b = append(b, encodeFrame(f.Preamble, f.Front, f.Data)...)
	}
	l := NewReaderLink(&choppyReader{r: bytes.NewReader(b), rng: rng, max: 40000}, FeatureNoDataCRC, testLimits)
	l.dataChunk = chunk
	for i := range frames {
		var f Frame
		if err := l.ReadFrame(&f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		checkFrame(t, i, &f, &frames[i])
		want := wantChunkCRCs(frames[i].Data, chunk)
		if len(f.Data) == 0 {
			if f.DataChunkCRCs != nil || f.HasDataCRC {
				t.Fatalf("frame %d without data: chunk crcs %x, data crc %v", i, f.DataChunkCRCs, f.HasDataCRC)
			}
		} else if f.DataChunk != chunk || !slicesEqual(f.DataChunkCRCs, want) || !f.HasDataCRC || f.DataCRC != CRC(f.Data) {
			t.Fatalf("frame %d (%d bytes): chunk %d crcs %x (want %x), data crc %08x %v (want %08x)",
				i, len(f.Data), f.DataChunk, f.DataChunkCRCs, want, f.DataCRC, f.HasDataCRC, CRC(f.Data))
		}
		f.Release()
	}

	for _, size := range []int{5000, 300 << 10} {
		f := msgFrame(1, 20, size)
		enc := encodeFrame(f.Preamble, f.Front, f.Data)
		enc[PreambleSize+20+size/2] ^= 0x10
		l := NewReaderLink(bytes.NewReader(enc), 0, testLimits)
		l.dataChunk = chunk
		var got Frame
		if err := l.ReadFrame(&got); !errors.Is(err, ErrCRC) {
			t.Fatalf("%d-byte data segment corrupted: %v, want a crc error", size, err)
		}
	}
}

// TestReadFrameChunkCRCsOnePass: a large frame's data is checksummed once
// as it arrives, chunk CRCs or not; none is computed for a frame sent
// without a data CRC unless the link was asked for chunks.
func TestReadFrameChunkCRCsOnePass(t *testing.T) {
	f := msgFrame(1, 20, 300<<10)
	enc := encodeFrame(f.Preamble, f.Front, f.Data)
	nf := f
	nf.Flags = FlagNoDataCRC
	noCRC := encodeFrame(nf.Preamble, nf.Front, nf.Data)
	for _, tc := range []struct {
		name   string
		b      []byte
		chunk  int
		hasCRC bool
	}{
		{"crc", enc, 0, true},
		{"crc chunks", enc, 64 << 10, true},
		{"no crc", noCRC, 0, false},
		{"no crc chunks", noCRC, 64 << 10, true},
	} {
		l := NewReaderLink(bytes.NewReader(tc.b), FeatureNoDataCRC, testLimits)
		l.dataChunk = tc.chunk
		var got Frame
		if err := l.ReadFrame(&got); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got.HasDataCRC != tc.hasCRC || tc.hasCRC && got.DataCRC != CRC(f.Data) || l.sum.Len() != len(f.Data)*btoi(l.summing) {
			t.Fatalf("%s: data crc %08x %v, folded %d bytes", tc.name, got.DataCRC, got.HasDataCRC, l.sum.Len())
		}
		got.Release()
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
