package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// testLimits are the limits most tests decode with.
var testLimits = Limits{MaxFront: 1 << 20, MaxData: 16 << 20}

// encodeFrame encodes one frame as a stream link puts it on the wire:
// preamble, then (when there are segments) front, data and the epilogue.
// FrontLen and DataLen are taken from the segments.
func encodeFrame(p Preamble, front, data []byte) []byte {
	p.FrontLen, p.DataLen = uint32(len(front)), uint32(len(data))
	b := make([]byte, PreambleSize, p.WireSize())
	p.Put(b)
	if !p.HasSegments() {
		return b
	}
	b = append(b, front...)
	b = append(b, data...)
	var dcrc uint32
	if p.Flags&FlagNoDataCRC == 0 {
		dcrc = CRC(data)
	}
	var epi [EpilogueSize]byte
	PutEpilogue(epi[:], CRC(front), dcrc)
	return append(b, epi[:]...)
}

// rawPreamble encodes p, lets mutate change the bytes, and then fixes the
// CRC, so Parse gets past the CRC check to the field checks.
func rawPreamble(p Preamble, mutate func(b []byte)) []byte {
	b := make([]byte, PreambleSize)
	p.Put(b)
	mutate(b)
	binary.LittleEndian.PutUint32(b[52:], CRC(b[:52]))
	return b
}

// pattern returns n bytes that differ from frame to frame and position to
// position, so a misplaced slice shows.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// allTags lists every tag this version knows.
func allTags() []Tag {
	var tags []Tag
	for t := Tag(1); t <= tagMax; t++ {
		tags = append(tags, t)
	}
	return tags
}

// segmentsFor returns front and data lengths a frame of tag t may carry.
func segmentsFor(t Tag) (front, data uint32) {
	switch t {
	case TagMessage:
		return 123, 4567
	case TagAck, TagKeepalive, TagKeepaliveAck, TagClose, TagRdvDone:
		return 0, 0
	case TagRdvReady:
		return 0, 20
	case TagSealed:
		return 0, 4567
	default:
		return 89, 0
	}
}

func wantKind(t *testing.T, err error, kind ErrKind) {
	t.Helper()
	var we *Error
	if !errors.As(err, &we) {
		t.Fatalf("got %v (%T), want a *wire.Error of kind %q", err, err, errKindNames[kind])
	}
	if we.Kind != kind {
		t.Fatalf("got kind %q (%v), want %q", errKindNames[we.Kind], err, errKindNames[kind])
	}
}

func TestPreambleRoundTripEveryTag(t *testing.T) {
	for _, tag := range allTags() {
		t.Run(tag.String(), func(t *testing.T) {
			fl, dl := segmentsFor(tag)
			for _, flags := range []uint8{0, FlagRendezvous, FlagNoDataCRC, FlagRendezvous | FlagNoDataCRC} {
				in := Preamble{
					Tag: tag, Flags: flags, Type: 0xbeef, FrontLen: fl, DataLen: dl,
					Seq: 0x0102030405060708, Ack: ^uint64(0) - 1,
					GrantMsgs: 0xfffffff0, GrantBytes: 1<<40 + 3, LinkWord: 0xdeadbeef,
					Tid: 0xf1f2f3f4f5f6f7f8,
				}
				var b [PreambleSize]byte
				in.Put(b[:])
				var out Preamble
				if err := out.Parse(b[:], testLimits); err != nil {
					t.Fatalf("flags %#x: %v", flags, err)
				}
				if out != in {
					t.Fatalf("flags %#x: round trip\n got %+v\nwant %+v", flags, out, in)
				}
			}
		})
	}
}

func TestPreambleLayout(t *testing.T) {
	// The layout is part of the protocol: pin the offsets.
	p := Preamble{Tag: TagMessage, Flags: FlagRendezvous, Type: 0x0a0b, FrontLen: 0x11223344,
		DataLen: 0x55667788, LinkWord: 0x0c0d0e0f, Seq: 0x99, Ack: 0xaa, GrantMsgs: 0xbbccddee, GrantBytes: 0x0102030405060708,
		Tid: 0x1112131415161718}
	var b [PreambleSize]byte
	p.Put(b[:])
	le := binary.LittleEndian
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"tag", uint64(b[0]), uint64(TagMessage)},
		{"flags", uint64(b[1]), uint64(FlagRendezvous)},
		{"type", uint64(le.Uint16(b[2:])), 0x0a0b},
		{"front", uint64(le.Uint32(b[4:])), 0x11223344},
		{"data", uint64(le.Uint32(b[8:])), 0x55667788},
		{"link word", uint64(le.Uint32(b[12:])), 0x0c0d0e0f},
		{"seq", le.Uint64(b[16:]), 0x99},
		{"ack", le.Uint64(b[24:]), 0xaa},
		{"grant msgs", uint64(le.Uint32(b[32:])), 0xbbccddee},
		{"grant bytes", le.Uint64(b[36:]), 0x0102030405060708},
		{"tid", le.Uint64(b[44:]), 0x1112131415161718},
		{"crc", uint64(le.Uint32(b[52:])), uint64(CRC(b[:52]))},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

func TestPreambleParseRejects(t *testing.T) {
	lim := Limits{MaxFront: 1000, MaxData: 5000}
	msg := Preamble{Tag: TagMessage, FrontLen: 10, DataLen: 20}
	le := binary.LittleEndian
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"bad crc", func() []byte {
			var b [PreambleSize]byte
			msg.Put(b[:])
			b[52] ^= 1
			return b[:]
		}(), ErrCRC},
		{"flipped field under crc", func() []byte {
			var b [PreambleSize]byte
			msg.Put(b[:])
			b[20] ^= 0x40 // in seq
			return b[:]
		}(), ErrCRC},
		{"flipped tid under crc", func() []byte {
			var b [PreambleSize]byte
			msg.Put(b[:])
			b[47] ^= 0x01 // in tid
			return b[:]
		}(), ErrCRC},
		{"tag zero", rawPreamble(msg, func(b []byte) { b[0] = 0 }), ErrMalformed},
		{"tag above max", rawPreamble(msg, func(b []byte) { b[0] = byte(tagMax) + 1 }), ErrMalformed},
		{"tag 255", rawPreamble(msg, func(b []byte) { b[0] = 255 }), ErrMalformed},
		{"unknown flag 0x10", rawPreamble(msg, func(b []byte) { b[1] = 0x10 }), ErrMalformed},
		{"unknown flag 0x80 with known ones", rawPreamble(msg, func(b []byte) { b[1] = 0x80 | FlagNoDataCRC }), ErrMalformed},
		{"front above limit", rawPreamble(msg, func(b []byte) { le.PutUint32(b[4:], lim.MaxFront+1) }), ErrTooLarge},
		{"front 4 GiB", rawPreamble(msg, func(b []byte) { le.PutUint32(b[4:], ^uint32(0)) }), ErrTooLarge},
		{"data above limit", rawPreamble(msg, func(b []byte) { le.PutUint32(b[8:], lim.MaxData+1) }), ErrTooLarge},
		{"data 4 GiB", rawPreamble(msg, func(b []byte) { le.PutUint32(b[8:], ^uint32(0)) }), ErrTooLarge},
	}
	for _, tag := range []Tag{TagAck, TagKeepalive, TagKeepaliveAck, TagClose, TagRdvDone} {
		p := Preamble{Tag: tag}
		tests = append(tests,
			struct {
				name string
				b    []byte
				want error
			}{fmt.Sprintf("%v with front", tag), rawPreamble(p, func(b []byte) { le.PutUint32(b[4:], 1) }), ErrMalformed},
			struct {
				name string
				b    []byte
				want error
			}{fmt.Sprintf("%v with data", tag), rawPreamble(p, func(b []byte) { le.PutUint32(b[8:], 1) }), ErrMalformed},
		)
	}
	for _, tag := range []Tag{TagHello, TagAuthRequest, TagAuthDone, TagSessionReq, TagSessionReady, TagSessionReset, TagWait} {
		p := Preamble{Tag: tag, FrontLen: 5}
		tests = append(tests, struct {
			name string
			b    []byte
			want error
		}{fmt.Sprintf("%v with data", tag), rawPreamble(p, func(b []byte) { le.PutUint32(b[8:], 1) }), ErrMalformed})
	}
	tests = append(tests, struct {
		name string
		b    []byte
		want error
	}{"RDV_READY with front", rawPreamble(Preamble{Tag: TagRdvReady, DataLen: 20}, func(b []byte) { le.PutUint32(b[4:], 1) }), ErrMalformed})
	sentinels := []error{ErrMalformed, ErrCRC, ErrTooLarge, ErrShort, ErrBanner, ErrProtocol}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Preamble
			err := p.Parse(tc.b, lim)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			for _, s := range sentinels {
				if s != tc.want && errors.Is(err, s) {
					t.Errorf("%v also matches %v", err, s)
				}
			}
			// Wrapped, it still classifies.
			if !errors.Is(fmt.Errorf("reading: %w", err), tc.want) {
				t.Errorf("wrapped %v does not match %v", err, tc.want)
			}
		})
	}
}

func TestPreambleParseAtLimits(t *testing.T) {
	lim := Limits{MaxFront: 1000, MaxData: 5000}
	for _, p := range []Preamble{
		{Tag: TagMessage, FrontLen: lim.MaxFront, DataLen: lim.MaxData - lim.MaxFront},
		{Tag: TagMessage, DataLen: lim.MaxData},
		{Tag: TagMessage},
		{Tag: TagHello, FrontLen: lim.MaxFront},
		{Tag: TagHello}, // an empty handshake front decodes as an empty protobuf
	} {
		var b [PreambleSize]byte
		p.Put(b[:])
		var got Preamble
		if err := got.Parse(b[:], lim); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	// The link word belongs to the transport; Parse passes it through (a
	// stream link refuses it, see TestStreamLinkRejects).
	var lw [PreambleSize]byte
	(&Preamble{Tag: TagAck, LinkWord: 42}).Put(lw[:])
	var got0 Preamble
	if err := got0.Parse(lw[:], lim); err != nil || got0.LinkWord != 42 {
		t.Errorf("link word: %d, %v", got0.LinkWord, err)
	}
	// Zero limits refuse any segment at all.
	var b [PreambleSize]byte
	(&Preamble{Tag: TagMessage, DataLen: 1}).Put(b[:])
	var got Preamble
	if err := got.Parse(b[:], Limits{}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("zero limits: got %v, want ErrTooLarge", err)
	}
}

func TestPreambleParseShort(t *testing.T) {
	var b [PreambleSize]byte
	(&Preamble{Tag: TagAck}).Put(b[:])
	for n := range PreambleSize {
		var p Preamble
		err := p.Parse(b[:n], testLimits)
		wantKind(t, err, ErrKindShort)
	}
	// Extra bytes after the preamble are not its business.
	long := append(b[:], 1, 2, 3)
	var p Preamble
	if err := p.Parse(long, testLimits); err != nil {
		t.Fatal(err)
	}
}

func TestTagNames(t *testing.T) {
	seen := map[string]bool{}
	for _, tag := range allTags() {
		if !tag.Valid() {
			t.Errorf("%d not valid", tag)
		}
		s := tag.String()
		if s == "" || strings.HasPrefix(s, "TAG(") || seen[s] {
			t.Errorf("tag %d: name %q", tag, s)
		}
		seen[s] = true
	}
	for _, tag := range []Tag{0, tagMax + 1, 200, 255} {
		if tag.Valid() {
			t.Errorf("%d valid", tag)
		}
		if got, want := tag.String(), fmt.Sprintf("TAG(%d)", uint8(tag)); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestWireSize(t *testing.T) {
	tests := []struct {
		p    Preamble
		want int
	}{
		{Preamble{Tag: TagAck}, PreambleSize},
		{Preamble{Tag: TagMessage}, PreambleSize},
		{Preamble{Tag: TagMessage, FrontLen: 1}, PreambleSize + 1 + EpilogueSize},
		{Preamble{Tag: TagMessage, DataLen: 1}, PreambleSize + 1 + EpilogueSize},
		{Preamble{Tag: TagMessage, FrontLen: 10, DataLen: 20}, PreambleSize + 30 + EpilogueSize},
		{Preamble{Tag: TagMessage, FrontLen: ^uint32(0), DataLen: ^uint32(0)}, PreambleSize + 2*int(^uint32(0)) + EpilogueSize},
	}
	for _, tc := range tests {
		if got := tc.p.WireSize(); got != tc.want {
			t.Errorf("%+v: got %d, want %d", tc.p, got, tc.want)
		}
	}
}

func TestEpilogue(t *testing.T) {
	front, data := []byte("front"), []byte("data bytes")
	var epi [EpilogueSize]byte
	PutEpilogue(epi[:], CRC(front), CRC(data))
	if err := CheckEpilogue(epi[:], front, data, false); err != nil {
		t.Fatal(err)
	}
	bad := epi
	bad[1] ^= 1
	if err := CheckEpilogue(bad[:], front, data, false); !errors.Is(err, ErrCRC) {
		t.Errorf("bad front crc: %v", err)
	}
	bad = epi
	bad[6] ^= 1
	if err := CheckEpilogue(bad[:], front, data, false); !errors.Is(err, ErrCRC) {
		t.Errorf("bad data crc: %v", err)
	}
	// Without data CRC the data half is not looked at; the front still is.
	if err := CheckEpilogue(bad[:], front, data, true); err != nil {
		t.Errorf("no data crc: %v", err)
	}
	bad = epi
	bad[0] ^= 1
	if err := CheckEpilogue(bad[:], front, data, true); !errors.Is(err, ErrCRC) {
		t.Errorf("no data crc, bad front crc: %v", err)
	}
	wantKind(t, CheckEpilogue(epi[:7], front, data, false), ErrKindShort)
}

func TestCRC(t *testing.T) {
	// The CRC32C check value.
	if got := CRC([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("CRC32C(123456789) = %#x", got)
	}
	b := pattern(1000, 3)
	if got, want := UpdateCRC(CRC(b[:400]), b[400:]), CRC(b); got != want {
		t.Fatalf("UpdateCRC %#x, CRC %#x", got, want)
	}
}

func TestErrorIs(t *testing.T) {
	err := Protocolf("seq %d", 7)
	if !errors.Is(err, ErrProtocol) || errors.Is(err, ErrMalformed) {
		t.Fatalf("Protocolf: %v", err)
	}
	if !strings.Contains(err.Error(), "protocol violation") || !strings.Contains(err.Error(), "seq 7") {
		t.Fatalf("message %q", err)
	}
	// A specific error is not a sentinel for another specific error.
	if errors.Is(err, Protocolf("seq %d", 7)) {
		t.Fatal("two specific errors match each other")
	}
	if errors.Is(io.EOF, ErrProtocol) {
		t.Fatal("io.EOF is ErrProtocol")
	}
}

// TestSealedFrameShapes: a SEALED frame may carry a sealed frame of the
// largest front and data the limits allow, no more, as its data segment
// (one part) or as a front of at least a sealed preamble and a data
// segment of at least a tag (two parts); a SEALED_HANDSHAKE frame only as
// its front.
func TestSealedFrameShapes(t *testing.T) {
	lim := Limits{MaxFront: 100, MaxData: 1000}
	for _, tc := range []struct {
		p    Preamble
		kind ErrKind // 0: accepted
	}{
		// One part: a message of MaxData, front and data, sealed.
		{Preamble{Tag: TagSealed, DataLen: 1000 + SealedOverhead}, 0},
		{Preamble{Tag: TagSealed, DataLen: 1000 + SealedOverhead + SealTagSize + 1}, ErrKindTooLarge},
		{Preamble{Tag: TagSealed, DataLen: 1000 + 100 + SealedOverhead}, ErrKindTooLarge},
		{Preamble{Tag: TagSealed, DataLen: SealedOverhead - 1}, ErrKindMalformed},
		{Preamble{Tag: TagSealed, Flags: FlagRendezvous, DataLen: 20}, 0},
		{Preamble{Tag: TagSealed, FrontLen: 1, DataLen: SealedOverhead}, ErrKindMalformed},
		{Preamble{Tag: TagSealed, FrontLen: SealedOverhead - 1, DataLen: SealedOverhead}, ErrKindMalformed},
		{Preamble{Tag: TagSealed, FrontLen: SealedOverhead, DataLen: SealTagSize}, 0},
		{Preamble{Tag: TagSealed, FrontLen: SealedOverhead, DataLen: SealTagSize - 1}, ErrKindMalformed},
		{Preamble{Tag: TagSealed, FrontLen: SealedOverhead, Flags: FlagRendezvous, DataLen: 20}, 0},
		// Two parts: the largest front, and data up to MaxData in all.
		{Preamble{Tag: TagSealed, FrontLen: 100 + SealedOverhead, DataLen: 900 + SealTagSize}, 0},
		{Preamble{Tag: TagSealed, FrontLen: 100 + SealedOverhead, DataLen: 900 + SealTagSize + 1}, ErrKindTooLarge},
		{Preamble{Tag: TagSealed, FrontLen: 100 + SealedOverhead + 1, DataLen: SealTagSize}, ErrKindTooLarge},
		{Preamble{Tag: TagMessage, FrontLen: 101}, ErrKindTooLarge},
		{Preamble{Tag: TagSealedHandshake, FrontLen: SealedOverhead}, 0},
		{Preamble{Tag: TagSealedHandshake, FrontLen: SealedOverhead, DataLen: 1}, ErrKindMalformed},
		{Preamble{Tag: TagSealedHandshake, FrontLen: 10}, ErrKindMalformed},
	} {
		var b [PreambleSize]byte
		tc.p.Put(b[:])
		var got Preamble
		err := got.Parse(b[:], lim)
		if tc.kind == 0 {
			if err != nil {
				t.Errorf("%+v: %v", tc.p, err)
			}
			continue
		}
		var we *Error
		if !errors.As(err, &we) || we.Kind != tc.kind {
			t.Errorf("%+v: %v, want %s", tc.p, err, errKindNames[tc.kind])
		}
	}
	if got := HandshakeLimits.DataLimit(TagSealed); got != MaxHandshakeFront+SealedOverhead {
		t.Errorf("handshake DataLimit(SEALED) = %d", got)
	}
}

// TestMessageSizeBoundsFrontPlusData: a MESSAGE's front and data together
// are bounded by MaxData (the max_message a side announces), not each by
// its own limit; a SEALED frame in records by that plus a tag per record.
func TestMessageSizeBoundsFrontPlusData(t *testing.T) {
	lim := Limits{MaxFront: 100, MaxData: 1000}
	big := Limits{MaxFront: 1 << 20, MaxData: 4 << 20} // 64 records at most
	for _, tc := range []struct {
		lim  Limits
		p    Preamble
		kind ErrKind // 0: accepted
	}{
		{lim, Preamble{Tag: TagMessage, FrontLen: 100, DataLen: 900}, 0},
		{lim, Preamble{Tag: TagMessage, FrontLen: 100, DataLen: 901}, ErrKindTooLarge},
		{lim, Preamble{Tag: TagMessage, FrontLen: 1, DataLen: 1000}, ErrKindTooLarge},
		{lim, Preamble{Tag: TagMessage, DataLen: 1000}, 0},
		{lim, Preamble{Tag: TagMessage, FrontLen: 100, DataLen: 20, Flags: FlagRendezvous}, 0},
		{big, Preamble{Tag: TagMessage, FrontLen: 1 << 20, DataLen: 3 << 20}, 0},
		{big, Preamble{Tag: TagMessage, FrontLen: 1 << 20, DataLen: 4 << 20}, ErrKindTooLarge},
		{big, Preamble{Tag: TagSealed, FrontLen: SealedOverhead, DataLen: 4<<20 + 64*SealTagSize}, 0},
		{big, Preamble{Tag: TagSealed, FrontLen: SealedOverhead, DataLen: 4<<20 + 64*SealTagSize + 1}, ErrKindTooLarge},
	} {
		var b [PreambleSize]byte
		tc.p.Put(b[:])
		var got Preamble
		err := got.Parse(b[:], tc.lim)
		if tc.kind == 0 {
			if err != nil {
				t.Errorf("%+v: %v", tc.p, err)
			}
			continue
		}
		var we *Error
		if !errors.As(err, &we) || we.Kind != tc.kind || !errors.Is(err, ErrTooLarge) {
			t.Errorf("%+v: %v, want %s", tc.p, err, errKindNames[tc.kind])
		}
	}
}
