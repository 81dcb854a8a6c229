package wire

import (
	"bytes"
	"errors"
	"testing"
)

// TestSourceCRC: a frame whose data CRC is its source's claim
// (Frame.SourceCRC) goes to a peer that agreed SOURCE_CRC with
// FLAG_SOURCE_CRC and that CRC, and no pass over the data; the reader
// takes it whether the claim holds or not, hands up the CRC of the bytes
// it got, says whether they differed, and reads on. A peer that did not
// agree gets a computed CRC in a plain frame; a link that skips data
// CRCs sends none. Inline and large frames, with and without the
// reader's chunk CRCs.
func TestSourceCRC(t *testing.T) {
	// Bytes, not calls: the frame without data behind each costs none.
	var summed int
	testHookDataCRC = func(n int) { summed += n }
	defer func() { testHookDataCRC = nil }()
	// write encodes a source-CRC frame with data d and claim crc, then a
	// plain frame, as a link of the features and noCRC writes them.
	write := func(d []byte, crc uint32, features uint64, noCRC bool) []byte {
		var out bytes.Buffer
		f := msgFrame(1, 50, 0)
		f.Data, f.DataCRC, f.HasDataCRC, f.SourceCRC = d, crc, true, true
		if err := writerLink(&out, features, noCRC).WriteFrames([]Frame{f}); err != nil {
			t.Fatal(err)
		}
		next := msgFrame(2, 5, 0) // no data: no pass either way
		if err := writerLink(&out, features, noCRC).WriteFrames([]Frame{next}); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	// read reads both frames back and returns the first.
	read := func(b []byte, features uint64, chunk int) Frame {
		t.Helper()
		l := NewReaderLink(bytes.NewReader(b), features, testLimits)
		l.dataChunk = chunk
		var f, next Frame
		if err := l.ReadFrame(&f); err != nil {
			t.Fatalf("source-crc frame: %v", err)
		}
		if err := l.ReadFrame(&next); err != nil || next.Seq != 2 {
			t.Fatalf("the frame after it: seq %d, %v", next.Seq, err)
		}
		next.Release()
		return f
	}
	agreed := FeatureSourceCRC | FeatureNoDataCRC
	for _, size := range []int{300, 20 << 10, bigFrameBytes + 1000} {
		d := pattern(size, 5)
		for _, chunk := range []int{0, 4096} {
			for _, wrong := range []bool{false, true} {
				claim := CRC(d)
				if wrong {
					claim ^= 0x5a
				}
				summed = 0
				b := write(d, claim, agreed, false)
				if summed != 0 {
					t.Fatalf("%d bytes, agreed: %d bytes checksummed to write, want 0", size, summed)
				}
				if b[1] != FlagSourceCRC {
					t.Fatalf("%d bytes, agreed: flags %#x, want FLAG_SOURCE_CRC", size, b[1])
				}
				f := read(b, agreed, chunk)
				if !f.HasDataCRC || f.DataCRC != CRC(d) || f.SourceCRCMismatch != wrong || !bytes.Equal(f.Data, d) {
					t.Fatalf("%d bytes, chunk %d, claim wrong %v: data crc %08x %v (want %08x), mismatch %v",
						size, chunk, wrong, f.DataCRC, f.HasDataCRC, CRC(d), f.SourceCRCMismatch)
				}
				f.Release()

				// Not agreed: an honest CRC in a plain frame.
				summed = 0
				b = write(d, claim, FeatureNoDataCRC, false)
				if summed != size || b[1] != 0 {
					t.Fatalf("%d bytes, not agreed: %d bytes checksummed, flags %#x; want all and none", size, summed, b[1])
				}
				f = read(b, FeatureNoDataCRC, chunk)
				if f.DataCRC != CRC(d) || f.SourceCRCMismatch {
					t.Fatalf("%d bytes, not agreed: data crc %08x, mismatch %v", size, f.DataCRC, f.SourceCRCMismatch)
				}
				f.Release()
			}
		}
		// A link that skips data CRCs sends no claim either.
		summed = 0
		b := write(d, CRC(d)^1, agreed, true)
		if summed != 0 || b[1] != FlagNoDataCRC {
			t.Fatalf("%d bytes, no data crc: %d bytes checksummed, flags %#x", size, summed, b[1])
		}
		f := read(b, agreed, 0)
		if f.HasDataCRC || f.SourceCRCMismatch {
			t.Fatalf("%d bytes, no data crc: received data crc %v, mismatch %v", size, f.HasDataCRC, f.SourceCRCMismatch)
		}
		f.Release()
	}
}

// TestSourceCRCFrontStaysStrict: under FLAG_SOURCE_CRC only the data CRC
// is a claim; a bad front CRC is corruption still.
func TestSourceCRCFrontStaysStrict(t *testing.T) {
	b := encodeFrame(Preamble{Tag: TagMessage, Flags: FlagSourceCRC}, []byte("front"), []byte("data"))
	b[len(b)-EpilogueSize] ^= 1
	var f Frame
	if err := NewReaderLink(bytes.NewReader(b), FeatureSourceCRC, testLimits).ReadFrame(&f); !errors.Is(err, ErrCRC) {
		t.Fatalf("bad front crc under FLAG_SOURCE_CRC: %v, want ErrCRC", err)
	}
}

// TestCheckAgreedSourceCRC: FLAG_SOURCE_CRC needs the feature, and a
// MESSAGE with data and a data CRC to make a claim about.
func TestCheckAgreedSourceCRC(t *testing.T) {
	msg := func(flags uint8, front, data uint32) Preamble {
		return Preamble{Tag: TagMessage, Flags: flags, FrontLen: front, DataLen: data}
	}
	for _, tc := range []struct {
		name   string
		p      Preamble
		agreed uint64
		want   error
	}{
		{"agreed", msg(FlagSourceCRC, 1, 10), FeatureSourceCRC, nil},
		{"not agreed", msg(FlagSourceCRC, 1, 10), KnownFeatures &^ FeatureSourceCRC, ErrProtocol},
		{"with no data crc", msg(FlagSourceCRC|FlagNoDataCRC, 1, 10), KnownFeatures, ErrMalformed},
		{"no data", msg(FlagSourceCRC, 10, 0), KnownFeatures, ErrMalformed},
		{"not a message", Preamble{Tag: TagHello, Flags: FlagSourceCRC, FrontLen: 10}, KnownFeatures, ErrMalformed},
		{"no segments", Preamble{Tag: TagAck, Flags: FlagSourceCRC}, KnownFeatures, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.CheckAgreed(tc.agreed, false)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestCheckAgreedRendezvousFront: FLAG_RENDEZVOUS_FRONT needs its feature,
// the rendezvous flag, a MESSAGE or SEALED frame, and no front inline.
func TestCheckAgreedRendezvousFront(t *testing.T) {
	rdv := func(tag Tag, flags uint8, front uint32) Preamble {
		return Preamble{Tag: tag, Flags: flags, FrontLen: front, DataLen: 24}
	}
	both := FlagRendezvous | FlagRendezvousFront
	for _, tc := range []struct {
		name   string
		p      Preamble
		agreed uint64
		want   error
	}{
		{"agreed", rdv(TagMessage, both, 0), KnownFeatures, nil},
		{"sealed", rdv(TagSealed, both, 0), KnownFeatures, nil},
		{"not agreed", rdv(TagMessage, both, 0), KnownFeatures &^ FeatureRendezvousFront, ErrProtocol},
		{"not a rendezvous", rdv(TagMessage, FlagRendezvousFront, 0), KnownFeatures, ErrMalformed},
		{"a front inline too", rdv(TagMessage, both, 10), KnownFeatures, ErrMalformed},
		{"not a message", rdv(TagRdvReady, both, 0), KnownFeatures, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.CheckAgreed(tc.agreed, true)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}
