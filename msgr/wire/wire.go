// Package wire is the msgr wire format: the banner, frame preambles, segment
// CRCs, limits, and the Link/Transport seam that transports implement.
//
// It is the only place that parses bytes from the network for the messenger,
// so every decoder here returns a typed *Error for bad input and must never
// panic, whatever the bytes. docs/protocol.md is the normative description;
// this file must match it.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// castagnoli is the CRC32C table; the stdlib uses the SSE4.2/ARMv8
// instructions for it, which is why CRC32C and not IEEE.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC returns the CRC32C of b.
func CRC(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// UpdateCRC extends crc with b.
func UpdateCRC(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// Tag says what a frame is.
type Tag uint8

const (
	TagMessage      Tag = 1  // a dispatcher message: seq, type, front, data
	TagAck          Tag = 2  // explicit ack and credit grant, no segments
	TagKeepalive    Tag = 3  // Seq carries the sender's clock in ns
	TagKeepaliveAck Tag = 4  // echoes a keepalive's Seq
	TagHello        Tag = 5  // handshake: entity names (msgrpb.Hello)
	TagAuthRequest  Tag = 6  // handshake: auth methods (msgrpb.AuthRequest)
	TagAuthDone     Tag = 7  // handshake: chosen method (msgrpb.AuthDone)
	TagSessionReq   Tag = 8  // handshake: open or resume (msgrpb.SessionRequest)
	TagSessionReady Tag = 9  // handshake: accepted (msgrpb.SessionReady)
	TagSessionReset Tag = 10 // handshake: unknown session (msgrpb.SessionReset)
	TagWait         Tag = 11 // handshake: lost a connect race (msgrpb.Wait)
	TagClose        Tag = 12 // deliberate close: the session ends, no reconnect
	// The RDMA link's own frames for a rendezvous by RDMA write
	// (docs/protocol.md §13.3). They never reach the session; a stream
	// link rejects them.
	TagRdvReady Tag = 13 // receiver to sender: a destination to write a payload into
	TagRdvDone  Tag = 14 // sender to receiver: that payload is written
	// TagAuthMore carries a round of an auth method that takes several
	// (msgrpb.AuthMore), between AUTH_REQUEST and AUTH_DONE.
	TagAuthMore Tag = 15
	// Secure mode's frames (docs/protocol.md §5.5): each carries one
	// whole frame of the session's, sealed with AES-256-GCM. A handshake
	// frame sealed (SESSION_REQUEST and after, once auth chose secure)
	// travels as SEALED_HANDSHAKE with the sealed bytes as its front, so
	// a link still in its handshake phase takes it under its handshake
	// limits; every other frame as SEALED with them as its data, so a
	// transport moves a large sealed frame as it moves a large payload
	// (an RDMA rendezvous).
	TagSealedHandshake Tag = 16
	TagSealed          Tag = 17
	tagMax             Tag = TagSealed
)

var tagNames = [...]string{
	TagMessage: "MESSAGE", TagAck: "ACK", TagKeepalive: "KEEPALIVE",
	TagKeepaliveAck: "KEEPALIVE_ACK", TagHello: "HELLO", TagAuthRequest: "AUTH_REQUEST",
	TagAuthDone: "AUTH_DONE", TagSessionReq: "SESSION_REQUEST", TagSessionReady: "SESSION_READY",
	TagSessionReset: "SESSION_RESET", TagWait: "WAIT", TagClose: "CLOSE",
	TagRdvReady: "RDV_READY", TagRdvDone: "RDV_DONE", TagAuthMore: "AUTH_MORE",
	TagSealedHandshake: "SEALED_HANDSHAKE", TagSealed: "SEALED",
}

func (t Tag) String() string {
	if t >= 1 && t <= tagMax {
		return tagNames[t]
	}
	return fmt.Sprintf("TAG(%d)", uint8(t))
}

// Valid reports whether t is a tag this version knows.
func (t Tag) Valid() bool { return t >= 1 && t <= tagMax }

// LinkOnly reports whether t belongs to the RDMA link rather than the
// session: such frames are consumed by the link that receives them.
func (t Tag) LinkOnly() bool { return t == TagRdvReady || t == TagRdvDone }

// Frame flags.
const (
	// FlagRendezvous: the data segment is a descriptor of a remote buffer
	// the receiver pulls (RDMA), not the payload itself.
	FlagRendezvous uint8 = 1 << 0
	// FlagNoDataCRC: the sender did not compute the data CRC (the epilogue
	// carries zero for it); only allowed when FeatureNoDataCRC was agreed.
	FlagNoDataCRC uint8 = 1 << 1
	// FlagSourceCRC: the epilogue's data CRC is the one the sender's
	// source recorded for the data (a store's chunk CRCs), not one the
	// sender computed over the bytes it sent: a claim the receiver
	// checks, not a promise. A mismatch is not corruption on the link but
	// data its source got wrong, so the receiver hands the frame up with
	// the CRC of the bytes as they arrived (Frame.SourceCRCMismatch)
	// instead of failing the link, which would replay the same bytes
	// forever. Only on a MESSAGE with data and a data CRC, and only when
	// FeatureSourceCRC was agreed.
	FlagSourceCRC uint8 = 1 << 2
	// FlagRendezvousFront: on a rendezvous frame, the front is not
	// inline: the payload the descriptor names is the data and then the
	// front, and the descriptor is followed by the front's length (u32).
	// The frame itself has no front segment; its epilogue's front CRC is
	// that of the front the payload carries. Only on a MESSAGE or SEALED
	// frame, and only when FeatureRendezvousFront was agreed.
	FlagRendezvousFront uint8 = 1 << 3
	knownFlags                = FlagRendezvous | FlagNoDataCRC | FlagSourceCRC | FlagRendezvousFront
)

// PreambleSize is the fixed size of every frame's preamble; EpilogueSize the
// size of the segment CRCs that follow the segments when there are any.
const (
	PreambleSize = 56
	EpilogueSize = 8
)

// Preamble is the fixed header of a frame. Seq, Ack and the grants ride on
// every frame so acks and credits need no frames of their own while traffic
// flows.
//
// Layout (little endian):
//
//	0  u8  tag          1 u8 flags        2 u16 message type
//	4  u32 front length 8 u32 data length
//	12 u32 link word (transport-owned; zero on stream links)
//	16 u64 seq          24 u64 ack
//	32 u32 message credit grant (cumulative, mod 2^32)
//	36 u64 byte credit grant (cumulative)
//	44 u64 tid (MESSAGE only)
//	52 u32 CRC32C of bytes 0..51
type Preamble struct {
	Tag        Tag
	Flags      uint8
	Type       uint16
	FrontLen   uint32
	DataLen    uint32
	Seq        uint64
	Ack        uint64
	GrantMsgs  uint32
	GrantBytes uint64
	// LinkWord belongs to the transport, not the session: the RDMA link
	// carries its count of rendezvous frames handed up in it, so the peer
	// can free its registered source buffers without a frame of its own.
	// Stream links require zero.
	LinkWord uint32
	// Tid is a MESSAGE's request id, chosen by the sender of a request and
	// echoed by its reply, so replies are matched to requests without
	// decoding the front. The messenger does not interpret it.
	Tid uint64
}

// Put encodes p into b[:PreambleSize].
func (p *Preamble) Put(b []byte) {
	_ = b[PreambleSize-1]
	b[0] = byte(p.Tag)
	b[1] = p.Flags
	binary.LittleEndian.PutUint16(b[2:], p.Type)
	binary.LittleEndian.PutUint32(b[4:], p.FrontLen)
	binary.LittleEndian.PutUint32(b[8:], p.DataLen)
	binary.LittleEndian.PutUint32(b[12:], p.LinkWord)
	binary.LittleEndian.PutUint64(b[16:], p.Seq)
	binary.LittleEndian.PutUint64(b[24:], p.Ack)
	binary.LittleEndian.PutUint32(b[32:], p.GrantMsgs)
	binary.LittleEndian.PutUint64(b[36:], p.GrantBytes)
	binary.LittleEndian.PutUint64(b[44:], p.Tid)
	binary.LittleEndian.PutUint32(b[52:], CRC(b[:52]))
}

// HasSegments reports whether an epilogue follows the preamble.
func (p *Preamble) HasSegments() bool { return p.FrontLen != 0 || p.DataLen != 0 }

// WireSize is the number of bytes the whole frame takes on a stream.
func (p *Preamble) WireSize() int {
	n := PreambleSize + int(p.FrontLen) + int(p.DataLen)
	if p.HasSegments() {
		n += EpilogueSize
	}
	return n
}

// Limits bound what a peer may make us allocate.
type Limits struct {
	MaxFront uint32 // largest front segment
	// MaxData bounds the data segment, and a MESSAGE's front and data
	// together: it is the max_message a side announces.
	MaxData uint32
	// HandshakeOnly refuses every frame but the handshake's (HELLO to
	// WAIT), as a link does before its session is established.
	HandshakeOnly bool
}

// MaxHandshakeFront bounds the front of a handshake frame. The largest
// are the auth method's: TLS 1.3's flights carry a certificate and a key
// share (a post-quantum hybrid share alone is 1.2 KB), 2-3 KB in all;
// HELLO carries an entity name (at most 128 bytes) and an address.
const MaxHandshakeFront = 16 << 10

// HandshakeLimits are a link's limits before its session is established:
// handshake frames only, with a small front and no data, so a peer that
// has not finished the handshake can make us allocate a few KiB at most.
var HandshakeLimits = Limits{MaxFront: MaxHandshakeFront, HandshakeOnly: true}

// Handshake reports whether t is a handshake frame's tag.
func (t Tag) Handshake() bool {
	return t >= TagHello && t <= TagWait || t == TagAuthMore || t == TagSealedHandshake
}

// Sealed reports whether t carries a sealed frame (secure mode).
func (t Tag) Sealed() bool { return t == TagSealed || t == TagSealedHandshake }

// CarriesMessage reports whether a frame of tag t carries a message: a
// MESSAGE, or a SEALED frame, which most often seals one. Only these hold
// bytes of a receive budget, are bounded by MessageLimit and may move
// their front by rendezvous.
func (t Tag) CarriesMessage() bool { return t == TagMessage || t == TagSealed }

// SealTagSize is what sealing adds to the bytes it seals: the AEAD tag
// (16 bytes for GCM).
const SealTagSize = 16

// SealedOverhead is what a sealed frame's segment holds beyond the frame
// it seals: that frame's preamble and the AEAD tag. The sealed frame has
// no epilogue of its own inside: the tag authenticates it.
const SealedOverhead = PreambleSize + SealTagSize

// SealRecordSize is the size of the records a large sealed frame's data
// is sealed in (docs/protocol.md §6.7), each with its own SealTagSize tag.
const SealRecordSize = 64 << 10

// DataLimit is the largest data segment lim lets a frame of tag t carry:
// MaxData, or for a SEALED frame the largest frame it may seal (front,
// data and SealedOverhead).
func (lim Limits) DataLimit(t Tag) uint64 {
	if t == TagSealed {
		return uint64(lim.MaxData) + uint64(lim.MaxFront) + SealedOverhead
	}
	return uint64(lim.MaxData)
}

// FrontLimit is the largest front segment lim lets a frame of tag t
// carry: MaxFront, or for a SEALED frame in two parts (its front the
// sealed front and preamble of the frame it carries) MaxFront and
// SealedOverhead.
func (lim Limits) FrontLimit(t Tag) uint64 {
	if t == TagSealed {
		return uint64(lim.MaxFront) + SealedOverhead
	}
	return uint64(lim.MaxFront)
}

// MessageLimit is the most a MESSAGE or SEALED frame may carry in its
// front and data together: MaxData, for a SEALED frame plus what sealing a
// message of that size adds (SealedOverhead, and a tag per record).
func (lim Limits) MessageLimit(t Tag) uint64 {
	if t == TagSealed {
		records := (uint64(lim.MaxData) + SealRecordSize - 1) / SealRecordSize
		return uint64(lim.MaxData) + SealedOverhead + SealTagSize*max(records, 1)
	}
	return uint64(lim.MaxData)
}

// CheckMessageSize refuses a MESSAGE or SEALED frame whose front and data
// (a rendezvous payload's length, not its descriptor's) together exceed
// MessageLimit: checked apart, they would let one message take MaxFront
// and MaxData, above what this side announced.
func (lim Limits) CheckMessageSize(t Tag, front, data uint64) error {
	if !t.CarriesMessage() {
		return nil
	}
	if max := lim.MessageLimit(t); front+data > max {
		return &Error{Kind: ErrKindTooLarge, Msg: fmt.Sprintf("%v of %d bytes (front %d, data %d) exceeds the limit of %d", t, front+data, front, data, max)}
	}
	return nil
}

// Parse decodes and validates a preamble. It checks the CRC, the tag, the
// flags and the segment sizes against lim, so the caller may size buffers
// from the result.
func (p *Preamble) Parse(b []byte, lim Limits) error {
	if len(b) < PreambleSize {
		return &Error{Kind: ErrKindShort, Msg: fmt.Sprintf("preamble needs %d bytes, have %d", PreambleSize, len(b))}
	}
	if got, want := binary.LittleEndian.Uint32(b[52:]), CRC(b[:52]); got != want {
		return &Error{Kind: ErrKindCRC, Msg: fmt.Sprintf("preamble crc %08x, computed %08x", got, want)}
	}
	p.Tag = Tag(b[0])
	p.Flags = b[1]
	p.Type = binary.LittleEndian.Uint16(b[2:])
	p.FrontLen = binary.LittleEndian.Uint32(b[4:])
	p.DataLen = binary.LittleEndian.Uint32(b[8:])
	p.LinkWord = binary.LittleEndian.Uint32(b[12:])
	p.Seq = binary.LittleEndian.Uint64(b[16:])
	p.Ack = binary.LittleEndian.Uint64(b[24:])
	p.GrantMsgs = binary.LittleEndian.Uint32(b[32:])
	p.GrantBytes = binary.LittleEndian.Uint64(b[36:])
	p.Tid = binary.LittleEndian.Uint64(b[44:])
	if !p.Tag.Valid() {
		return &Error{Kind: ErrKindMalformed, Msg: fmt.Sprintf("unknown frame tag %d", uint8(p.Tag))}
	}
	if p.Flags&^knownFlags != 0 {
		return &Error{Kind: ErrKindMalformed, Msg: fmt.Sprintf("unknown frame flags %#x", p.Flags)}
	}
	if lim.HandshakeOnly && !p.Tag.Handshake() {
		return &Error{Kind: ErrKindProtocol, Msg: fmt.Sprintf("%v frame before the handshake completed", p.Tag)}
	}
	if max := lim.FrontLimit(p.Tag); uint64(p.FrontLen) > max {
		return &Error{Kind: ErrKindTooLarge, Msg: fmt.Sprintf("front segment of %d bytes exceeds the limit of %d", p.FrontLen, max)}
	}
	if max := lim.DataLimit(p.Tag); uint64(p.DataLen) > max {
		return &Error{Kind: ErrKindTooLarge, Msg: fmt.Sprintf("data segment of %d bytes exceeds the limit of %d", p.DataLen, max)}
	}
	if err := lim.CheckMessageSize(p.Tag, uint64(p.FrontLen), uint64(p.DataLen)); err != nil {
		return err
	}
	switch p.Tag {
	case TagMessage:
	case TagSealed:
		// One part: the sealed frame is the data segment (or its
		// rendezvous descriptor), no front. Two parts: the front is the
		// sealed front and preamble, the data segment the sealed data.
		minData := uint32(SealedOverhead)
		if p.FrontLen != 0 {
			minData = SealTagSize
		}
		if p.FrontLen != 0 && p.FrontLen < SealedOverhead || p.DataLen < minData && p.Flags&FlagRendezvous == 0 {
			return &Error{Kind: ErrKindMalformed, Msg: fmt.Sprintf("%v frame with a %d-byte front and %d-byte data segment", p.Tag, p.FrontLen, p.DataLen)}
		}
	case TagSealedHandshake: // the sealed frame is the front
		if p.DataLen != 0 || p.FrontLen < SealedOverhead {
			return &Error{Kind: ErrKindMalformed, Msg: fmt.Sprintf("%v frame with a %d-byte front and %d-byte data segment", p.Tag, p.FrontLen, p.DataLen)}
		}
	case TagAck, TagKeepalive, TagKeepaliveAck, TagClose, TagRdvDone:
		if p.HasSegments() {
			return &Error{Kind: ErrKindMalformed, Msg: fmt.Sprintf("%v frame carries segments", p.Tag)}
		}
	case TagRdvReady: // a data segment only: the destination's descriptor
		if p.FrontLen != 0 {
			return &Error{Kind: ErrKindMalformed, Msg: fmt.Sprintf("%v frame carries a front segment", p.Tag)}
		}
	default: // handshake frames carry a front only
		if p.DataLen != 0 {
			return &Error{Kind: ErrKindMalformed, Msg: fmt.Sprintf("%v frame carries a data segment", p.Tag)}
		}
	}
	return nil
}

// CheckAgreed checks what Parse cannot know of a received frame: that its
// flags and link-only tag use only features the banners agreed (agreed),
// and, on a link whose transport does not own the link word (rdmaLink
// false: a stream or in-memory link), that it is zero and no rendezvous
// frame comes at all. Every transport calls it, so a peer cannot get a
// frame past one that another refuses.
func (p *Preamble) CheckAgreed(agreed uint64, rdmaLink bool) error {
	rendezvous := p.Flags&FlagRendezvous != 0 || p.Tag.LinkOnly()
	switch {
	case !rdmaLink && p.LinkWord != 0:
		return &Error{Kind: ErrKindMalformed, Msg: "link word is not zero on a stream link"}
	case !rdmaLink && rendezvous:
		return &Error{Kind: ErrKindProtocol, Msg: "rendezvous frame on a stream link"}
	case rendezvous && agreed&FeatureRendezvous == 0:
		return &Error{Kind: ErrKindProtocol, Msg: fmt.Sprintf("%v rendezvous frame, but that feature was not agreed", p.Tag)}
	// A sealed frame's AEAD tag protects its data better than a CRC, so
	// it may go without one whatever the banners agreed.
	case p.Flags&FlagNoDataCRC != 0 && agreed&FeatureNoDataCRC == 0 && !p.Tag.Sealed():
		return &Error{Kind: ErrKindProtocol, Msg: "frame without data crc, but that feature was not agreed"}
	case p.Flags&FlagSourceCRC != 0 && agreed&FeatureSourceCRC == 0:
		return &Error{Kind: ErrKindProtocol, Msg: "frame with a source data crc, but that feature was not agreed"}
	case p.Flags&FlagRendezvousFront != 0 && agreed&FeatureRendezvousFront == 0:
		return &Error{Kind: ErrKindProtocol, Msg: "rendezvous frame with its front in the payload, but that feature was not agreed"}
	case p.Flags&FlagRendezvousFront != 0 && (p.Flags&FlagRendezvous == 0 || !p.Tag.CarriesMessage() || p.FrontLen != 0):
		return &Error{Kind: ErrKindMalformed, Msg: fmt.Sprintf("%v frame (flags %#x, %d-byte front) with its front in a rendezvous payload", p.Tag, p.Flags, p.FrontLen)}
	// A source CRC is a claim about a message's data: a frame without
	// data, or without a data CRC, has none to make.
	case p.Flags&FlagSourceCRC != 0 && (p.Tag != TagMessage || p.DataLen == 0 || p.Flags&FlagNoDataCRC != 0):
		return &Error{Kind: ErrKindMalformed, Msg: fmt.Sprintf("%v frame (flags %#x, %d-byte data segment) with a source data crc", p.Tag, p.Flags, p.DataLen)}
	}
	return nil
}

// PutEpilogue writes the segment CRCs into b[:EpilogueSize].
func PutEpilogue(b []byte, frontCRC, dataCRC uint32) {
	binary.LittleEndian.PutUint32(b[0:], frontCRC)
	binary.LittleEndian.PutUint32(b[4:], dataCRC)
}

// EpilogueDataCRC returns the data CRC an epilogue carries: once
// CheckEpilogue accepted it without noDataCRC, the CRC32C of the data.
func EpilogueDataCRC(epi []byte) uint32 { return binary.LittleEndian.Uint32(epi[4:]) }

// CheckEpilogue verifies the segment CRCs in epi against front and data.
// With noDataCRC the data CRC is not checked (the sender set FlagNoDataCRC).
// It is strict: for a received frame, which may carry FlagSourceCRC, use
// Frame.CheckEpilogue.
func CheckEpilogue(epi, front, data []byte, noDataCRC bool) error {
	var dataCRC uint32
	if !noDataCRC && len(epi) >= EpilogueSize {
		dataCRC = CRC(data)
	}
	return CheckEpilogueCRC(epi, front, dataCRC, noDataCRC)
}

// CheckEpilogueCRC is CheckEpilogue for a link that computed the data
// segment's CRC32C, dataCRC, as the segment arrived.
func CheckEpilogueCRC(epi, front []byte, dataCRC uint32, noDataCRC bool) error {
	if len(epi) < EpilogueSize {
		return &Error{Kind: ErrKindShort, Msg: "short epilogue"}
	}
	if got, want := binary.LittleEndian.Uint32(epi[0:]), CRC(front); got != want {
		return &Error{Kind: ErrKindCRC, Msg: fmt.Sprintf("front segment crc %08x, computed %08x", got, want)}
	}
	if !noDataCRC {
		if got := binary.LittleEndian.Uint32(epi[4:]); got != dataCRC {
			return &Error{Kind: ErrKindCRC, Msg: fmt.Sprintf("data segment crc %08x, computed %08x", got, dataCRC)}
		}
	}
	return nil
}

// CheckEpilogue verifies the segment CRCs in epi, as CheckEpilogueCRC
// does, for the received frame f, whose data segment's CRC32C the link
// computed as dataCRC if summed (it must have, but under FlagNoDataCRC).
// Under FlagSourceCRC a data CRC other than dataCRC is no error: the
// frame is good, the source's CRC was wrong, and f.SourceCRCMismatch says
// so. When summed and f has data it hands dataCRC up with f (DataCRC,
// HasDataCRC): checked against the sender's, or the CRC of the bytes as
// they arrived.
func (f *Frame) CheckEpilogue(epi, front []byte, dataCRC uint32, summed bool) error {
	noDataCRC := f.Flags&FlagNoDataCRC != 0
	source := f.Flags&FlagSourceCRC != 0
	if err := CheckEpilogueCRC(epi, front, dataCRC, noDataCRC || source); err != nil {
		return err
	}
	f.SourceCRCMismatch = source && EpilogueDataCRC(epi) != dataCRC
	if summed && f.DataLen > 0 {
		f.DataCRC, f.HasDataCRC = dataCRC, true
	}
	return nil
}

// ErrKind classifies wire errors.
type ErrKind uint8

const (
	ErrKindMalformed ErrKind = iota + 1 // structurally invalid
	ErrKindCRC                          // checksum mismatch
	ErrKindTooLarge                     // a size above the configured limit
	ErrKindShort                        // not enough bytes
	ErrKindBanner                       // bad magic, version or features
	ErrKindProtocol                     // a valid frame at the wrong time
)

var errKindNames = map[ErrKind]string{
	ErrKindMalformed: "malformed frame", ErrKindCRC: "crc mismatch", ErrKindTooLarge: "too large",
	ErrKindShort: "short input", ErrKindBanner: "bad banner", ErrKindProtocol: "protocol violation",
}

// Error is a wire-level error: the peer sent something we cannot accept.
// The connection that saw it is closed; nothing else is affected.
type Error struct {
	Kind ErrKind
	Msg  string
	// err is what it also is (Unwrap): io.ErrUnexpectedEOF for a stream
	// cut short, so errors.Is finds both that and ErrShort.
	err error
}

func (e *Error) Error() string { return "msgr wire: " + errKindNames[e.Kind] + ": " + e.Msg }

func (e *Error) Unwrap() error { return e.err }

// truncated is the error of a stream that ended inside a frame or a
// banner: ErrShort, and io.ErrUnexpectedEOF as a stream's reader says it.
func truncated(format string, args ...any) error {
	return &Error{Kind: ErrKindShort, Msg: fmt.Sprintf(format, args...), err: io.ErrUnexpectedEOF}
}

// Is makes errors.Is(err, ErrMalformed) and friends match by kind.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Msg == "" && t.Kind == e.Kind
}

// Sentinels for errors.Is.
var (
	ErrMalformed = &Error{Kind: ErrKindMalformed}
	ErrCRC       = &Error{Kind: ErrKindCRC}
	ErrTooLarge  = &Error{Kind: ErrKindTooLarge}
	ErrShort     = &Error{Kind: ErrKindShort}
	ErrBanner    = &Error{Kind: ErrKindBanner}
	ErrProtocol  = &Error{Kind: ErrKindProtocol}
)

// Protocolf builds an ErrKindProtocol error.
func Protocolf(format string, args ...any) error {
	return &Error{Kind: ErrKindProtocol, Msg: fmt.Sprintf(format, args...)}
}
