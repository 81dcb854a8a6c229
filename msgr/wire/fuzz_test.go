package wire

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// fuzzLimits are small enough that the fuzzer cannot make a run allocate
// much, and large enough to reach the big-frame path.
var fuzzLimits = Limits{MaxFront: 1 << 17, MaxData: 1 << 20}

// streamSeeds are valid streams, and near misses of them.
func streamSeeds() [][]byte {
	var all []byte
	frames := []Frame{
		{Preamble: Preamble{Tag: TagHello}, Front: []byte("\x0a\x05osd.1\x10\x07")},
		{Preamble: Preamble{Tag: TagAuthRequest}, Front: []byte("\x0a\x04none")},
		{Preamble: Preamble{Tag: TagAck, Ack: 3, GrantMsgs: 100, GrantBytes: 1 << 20}},
		{Preamble: Preamble{Tag: TagKeepalive, Seq: 1234}},
		msgFrame(1, 10, 100),
		msgFrame(2, 0, 0),
		msgFrame(3, 0, 7),
		{Preamble: Preamble{Tag: TagClose}},
	}
	seeds := [][]byte{nil, {0}, make([]byte, PreambleSize)}
	for _, f := range frames {
		b := encodeFrame(f.Preamble, f.Front, f.Data)
		seeds = append(seeds, b, b[:len(b)-1])
		all = append(all, b...)
	}
	seeds = append(seeds, all)
	noCRC := msgFrame(4, 3, 30)
	noCRC.Flags = FlagNoDataCRC
	seeds = append(seeds, encodeFrame(noCRC.Preamble, noCRC.Front, noCRC.Data))
	// A source's data CRC, right and wrong (a mismatch, not an error).
	source := msgFrame(6, 3, 30)
	source.Flags = FlagSourceCRC
	b := encodeFrame(source.Preamble, source.Front, source.Data)
	seeds = append(seeds, b, bytes.Clone(b))
	seeds[len(seeds)-1][len(b)-1] ^= 0x10
	// The preamble of a frame big enough for a buffer of its own, with
	// part of its body. No complete one: an input above 64 KiB makes each
	// run slow, and the fuzzer's minimizer runs new inputs thousands of
	// times. The unit tests cover complete big frames.
	big := msgFrame(5, 5, bigFrameBytes+10)
	seeds = append(seeds, encodeFrame(big.Preamble, big.Front, big.Data)[:PreambleSize+100])
	return seeds
}

// FuzzReadFrame feeds arbitrary bytes to the stream decoder. It must never
// panic; every frame it returns must be within its limits, consistent, and
// encode back to exactly the bytes it was read from; every error must be
// a *wire.Error or an I/O error of the reader, and a bare io.EOF only at a
// frame boundary. With mode's 0x40 bit the link computes chunk CRCs
// (LinkOptions.DataChunk), which must be those of the data it returns.
func FuzzReadFrame(f *testing.F) {
	for _, s := range streamSeeds() {
		f.Add(uint8(0), s)
		f.Add(uint8(FeatureNoDataCRC|0x80), s)
		f.Add(uint8(FeatureNoDataCRC|0x40|0x14), s)
		f.Add(uint8(FeatureSourceCRC|0x80), s)
		f.Add(uint8(FeatureSourceCRC|0x40|0x14), s)
	}
	f.Fuzz(func(t *testing.T, mode uint8, b []byte) {
		features := uint64(mode) & KnownFeatures
		var r io.Reader = bytes.NewReader(b)
		if mode&0x80 != 0 {
			// Short reads, so frames arrive in pieces. One byte at a
			// time would make each run of a large input slow, and the
			// fuzzer's minimizer runs large inputs many times.
			r = &choppyReader{r: r, rng: rand.New(rand.NewPCG(uint64(len(b)), 0)), max: 512}
		}
		l := NewReaderLink(r, features, fuzzLimits)
		if mode&0x40 != 0 {
			l.dataChunk = 1 + int(mode&0x3c)*16
		}
		off := 0
		for {
			var fr Frame
			err := l.ReadFrame(&fr)
			if err != nil {
				var we *Error
				switch {
				case errors.As(err, &we):
					if we.Kind == 0 || errKindNames[we.Kind] == "" {
						t.Fatalf("error of unknown kind %d: %v", we.Kind, err)
					}
				case err == io.EOF:
					if off != len(b) {
						t.Fatalf("bare io.EOF at offset %d of %d", off, len(b))
					}
				case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				default:
					t.Fatalf("unexpected error %T: %v", err, err)
				}
				if fr.Buf != nil {
					t.Fatalf("error %v with a buffer attached", err)
				}
				if l.chunk != nil {
					t.Fatal("the link kept its chunk after an error")
				}
				return
			}
			checkFuzzedFrame(t, &fr, features, b[off:])
			checkFuzzedChunks(t, &fr, l.dataChunk)
			off += fr.WireSize()
			fr.Release()
		}
	})
}

func checkFuzzedFrame(t *testing.T, fr *Frame, features uint64, rest []byte) {
	t.Helper()
	if !fr.Tag.Valid() || fr.Flags&^knownFlags != 0 || fr.LinkWord != 0 || fr.Flags&FlagRendezvous != 0 || fr.Tag.LinkOnly() {
		t.Fatalf("invalid frame returned: %+v", fr.Preamble)
	}
	if fr.Flags&FlagNoDataCRC != 0 && features&FeatureNoDataCRC == 0 {
		t.Fatalf("no-data-crc frame without the feature: %+v", fr.Preamble)
	}
	if fr.Flags&FlagSourceCRC != 0 && (features&FeatureSourceCRC == 0 || fr.Tag != TagMessage || fr.DataLen == 0 || fr.Flags&FlagNoDataCRC != 0) {
		t.Fatalf("source-crc frame without the feature or a data crc: %+v", fr.Preamble)
	}
	if fr.DataLen > 0 && fr.Flags&FlagNoDataCRC == 0 && (!fr.HasDataCRC || fr.DataCRC != CRC(fr.Data)) {
		t.Fatalf("data crc %08x %v, want that of the data, %08x", fr.DataCRC, fr.HasDataCRC, CRC(fr.Data))
	}
	if fr.FrontLen > fuzzLimits.MaxFront || fr.DataLen > fuzzLimits.MaxData ||
		fr.Tag == TagMessage && uint64(fr.FrontLen)+uint64(fr.DataLen) > uint64(fuzzLimits.MaxData) {
		t.Fatalf("frame above the limits: %+v", fr.Preamble)
	}
	if len(fr.Front) != int(fr.FrontLen) || len(fr.Data) != int(fr.DataLen) {
		t.Fatalf("segments %d/%d, preamble %d/%d", len(fr.Front), len(fr.Data), fr.FrontLen, fr.DataLen)
	}
	if fr.HasSegments() != (fr.Buf != nil) {
		t.Fatalf("segments %v but buffer %v", fr.HasSegments(), fr.Buf != nil)
	}
	if fr.Buf != nil && fr.Buf.refs.Load() < 1 {
		t.Fatalf("frame buffer has %d refs", fr.Buf.refs.Load())
	}
	n := fr.WireSize()
	if n > len(rest) {
		t.Fatalf("frame of %d bytes from %d remaining", n, len(rest))
	}
	re := encodeFrame(fr.Preamble, fr.Front, fr.Data)
	orig := rest[:n]
	if fr.Flags&(FlagNoDataCRC|FlagSourceCRC) != 0 {
		// The data CRC is not checked, or a claim that may be wrong;
		// whatever the sender put there.
		if mismatch := EpilogueDataCRC(orig[n-EpilogueSize:]) != CRC(fr.Data); fr.Flags&FlagSourceCRC != 0 && mismatch != fr.SourceCRCMismatch {
			t.Fatalf("source crc mismatch %v, want %v", fr.SourceCRCMismatch, mismatch)
		}
		orig = bytes.Clone(orig)
		copy(orig[n-4:], re[n-4:])
	} else if fr.SourceCRCMismatch {
		t.Fatalf("source crc mismatch on a frame without FLAG_SOURCE_CRC: %+v", fr.Preamble)
	}
	if !bytes.Equal(re, orig) {
		t.Fatalf("frame %+v does not encode back to the bytes it came from", fr.Preamble)
	}
}

// checkFuzzedChunks checks the chunk CRCs a link with DataChunk chunk
// handed up with fr, and the data CRC they give.
func checkFuzzedChunks(t *testing.T, fr *Frame, chunk int) {
	t.Helper()
	if chunk == 0 || fr.Tag != TagMessage || len(fr.Data) == 0 {
		if fr.DataChunkCRCs != nil {
			t.Fatalf("chunk crcs %x on a %v frame with %d data bytes, chunk %d", fr.DataChunkCRCs, fr.Tag, len(fr.Data), chunk)
		}
		return
	}
	if want := wantChunkCRCs(fr.Data, chunk); fr.DataChunk != chunk || !slicesEqual(fr.DataChunkCRCs, want) {
		t.Fatalf("chunk crcs %x of %d, want %x of %d", fr.DataChunkCRCs, fr.DataChunk, want, chunk)
	}
	if !fr.HasDataCRC || fr.DataCRC != CRC(fr.Data) {
		t.Fatalf("data crc %08x %v, want %08x", fr.DataCRC, fr.HasDataCRC, CRC(fr.Data))
	}
}

// FuzzBanner: ParseBanner and Negotiate on arbitrary bytes never panic,
// a parsed banner encodes back, and negotiation is symmetric.
func FuzzBanner(f *testing.F) {
	for _, bn := range []Banner{
		{Version: Version, Supported: KnownFeatures},
		{Version: Version, Supported: KnownFeatures, Required: FeatureNoDataCRC},
		{Version: Version + 1, Supported: 1 << 63, Required: 1 << 63},
		{},
	} {
		var b [BannerSize]byte
		bn.Put(b[:])
		f.Add(b[:])
		f.Add(b[:BannerSize-1])
	}
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		peer, err := ParseBanner(b)
		if err != nil {
			if !errors.Is(err, ErrBanner) {
				t.Fatalf("ParseBanner: %v is not ErrBanner", err)
			}
			return
		}
		var re [BannerSize]byte
		peer.Put(re[:])
		// Put zeroes the reserved bytes; everything else must survive.
		orig := bytes.Clone(b[:BannerSize])
		clear(orig[10:16])
		if !bytes.Equal(re[:], orig) {
			t.Fatalf("banner %+v does not encode back", peer)
		}
		for _, mine := range []Banner{
			{Version: Version, Supported: KnownFeatures},
			{Version: Version, Supported: FeatureRendezvous, Required: FeatureRendezvous},
			{Version: peer.Version, Supported: peer.Supported, Required: peer.Required},
		} {
			ab, errA := Negotiate(mine, peer)
			ba, errB := Negotiate(peer, mine)
			if (errA == nil) != (errB == nil) {
				t.Fatalf("asymmetric: %v / %v", errA, errB)
			}
			if errA != nil {
				if !errors.Is(errA, ErrBanner) || !errors.Is(errB, ErrBanner) {
					t.Fatalf("negotiate errors %v, %v", errA, errB)
				}
				continue
			}
			if ab != ba || ab&^mine.Supported != 0 || ab&^peer.Supported != 0 {
				t.Fatalf("agreed %#x / %#x from %#x and %#x", ab, ba, mine.Supported, peer.Supported)
			}
			// A banner that requires what it does not support is
			// nonsense; see TestNegotiateRequiresUnsupported.
			if mine.Required&^mine.Supported == 0 && peer.Required&^peer.Supported == 0 &&
				(mine.Required&^ab != 0 || peer.Required&^ab != 0) {
				t.Fatalf("agreed %#x lacks a required feature (%#x, %#x)", ab, mine.Required, peer.Required)
			}
		}
	})
}
