package wire

import (
	"context"
	"errors"
)

// Frame is one frame as a transport moves it. On the write side Front and
// Data belong to the caller and are only read during WriteFrames. On the read
// side they point into Buf, which carries one reference for the caller.
type Frame struct {
	Preamble
	Front []byte
	Data  []byte
	// Buf is the buffer the segments live in: on a received frame, the
	// reference the frame holds; on a frame to write, the buffer Data
	// lives in when the sender has one (nil otherwise), so a transport
	// can recognise memory it registered and take its own reference
	// instead of copying.
	Buf *Buffer
	// Charge, on a received MESSAGE or SEALED frame, is what its
	// segments hold of LinkOptions.Budget (zero if the link does not
	// charge).
	Charge Charge
	// DataCRC is the CRC32C of Data when HasDataCRC is set. On a frame to
	// write, the sender already knows it (the client computed it, the
	// store keeps it) and a link that checksums the data segment puts it
	// in the epilogue instead of computing it: a wrong one makes the peer
	// refuse the frame as corrupt. On a received frame, the link verified
	// Data against it (or, under FlagSourceCRC, computed it as Data
	// arrived), so the receiver need not checksum Data again.
	DataCRC    uint32
	HasDataCRC bool
	// SourceCRC, on a frame to write, says DataCRC (with HasDataCRC) is
	// the claim of the data's source (a store's recorded chunk CRCs),
	// not known to be the CRC of Data: a link sends it as such
	// (FlagSourceCRC) when the peer agreed FeatureSourceCRC, so that a
	// wrong one reaches the receiver as a mismatch, not a corrupt frame,
	// and otherwise computes the CRC of Data (SendDataCRC).
	SourceCRC bool
	// SourceCRCMismatch, on a received frame sent with FlagSourceCRC,
	// says the source's CRC was not that of the data as it arrived;
	// DataCRC is the latter.
	SourceCRCMismatch bool
	// DataChunkCRCs, on a received frame, are the CRC32Cs of Data's
	// DataChunk-byte chunks from its start (the last one the remainder),
	// which the link computed as the bytes arrived (LinkOptions.DataChunk);
	// DataCRC is then their combination. They live with Buf. Nil when the
	// link did not compute them.
	DataChunkCRCs []uint32
	DataChunk     int
}

// SendDataCRC returns the data CRC a link puts in the epilogue of f, whose
// preamble as the link writes it is p (FlagNoDataCRC decided), to a peer
// that agreed the features agreed: none under FlagNoDataCRC; the
// sender's (HasDataCRC), one pass over the data fewer, setting
// FlagSourceCRC in p for a source's claim (SourceCRC) if the peer takes
// it; else the CRC of f.Data. A source CRC to a peer without
// FeatureSourceCRC is not sent as a promise: the peer would refuse a
// wrong one as corrupt.
func (f *Frame) SendDataCRC(p *Preamble, agreed uint64) uint32 {
	switch {
	case p.Flags&FlagNoDataCRC != 0:
		return 0
	case f.HasDataCRC && f.SourceCRC && len(f.Data) > 0 && p.Tag == TagMessage:
		if agreed&FeatureSourceCRC == 0 {
			return dataCRC(f.Data)
		}
		p.Flags |= FlagSourceCRC
		return f.DataCRC
	case f.HasDataCRC && !f.SourceCRC:
		return f.DataCRC
	}
	return dataCRC(f.Data)
}

// Release drops the frame's hold on its receive buffer and budget.
func (f *Frame) Release() {
	if f.Buf != nil {
		f.Buf.Release()
		f.Buf = nil
	}
	f.Charge.Release()
	f.Front, f.Data = nil, nil
	f.DataChunkCRCs, f.DataChunk = nil, 0
}

// LinkOptions are what the messenger tells a transport about a link.
type LinkOptions struct {
	// Banner is this side's banner; the transport exchanges banners before
	// it returns a Link and refuses peers that fail Negotiate.
	Banner Banner
	// Limits bound incoming segment sizes.
	Limits Limits
	// RecvWindow is the link's receive window in frames, which the
	// session takes while the link is attached. A transport whose
	// receives must be posted ahead (RDMA) posts this many, so one credit
	// is one posted receive.
	RecvWindow int
	// SmallWindow, on a Dial, says the session's traffic is light both
	// ways (a side session): the acceptor's transport may post no more
	// receives for the link than this side's RecvWindow, and no more
	// than it needs beside them. Links that post no receives ignore it.
	SmallWindow bool
	// NoDataCRC asks the link to skip the data CRC on frames it writes,
	// when the peer agreed to FeatureNoDataCRC.
	NoDataCRC bool
	// DataChunk, when positive, asks the link to compute the CRC32C of
	// each DataChunk-byte chunk of a received MESSAGE's data segment as
	// the bytes arrive, whether or not the sender sent a data CRC, and
	// hand them up (Frame.DataChunkCRCs): a store that keeps chunks of
	// that size then needs no pass over the data of its own. A data CRC
	// in the epilogue is checked by combining them. Links that cannot
	// (sealed frames, which carry no data CRC) hand up none.
	DataChunk int
	// Handshake starts the link in its handshake phase: until
	// EndHandshake it reads only handshake frames of at most
	// HandshakeLimits, and refuses anything else before allocating for it.
	// Links that cannot (none of the built-in ones) apply Limits.
	Handshake bool
	// Inbound, on a Listen, accounts for the connections accepted: each
	// is admitted before anything is spent on it (the connection limits)
	// and released when it closes; an accepted link implements
	// InboundLink, so that the messenger can mark its peer authenticated.
	// Nil admits everything.
	Inbound *Inbound
	// Budget bounds the bytes of received messages held over all the
	// messenger's links. A link that honours it charges each MESSAGE or
	// SEALED frame's segments (Frame.Charge) before reading them, waiting
	// while the budget is spent; the messenger charges frames from links
	// that do not, once read. Nil: no bound.
	Budget *Budget
}

// SealedLedger is implemented by links that, in the invariants build,
// check each grant they carry against the receives they posted
// (msgr/rdma). A secure session's frames reach such a link sealed, their
// grants and tags hidden in the SEALED frame, so the layer that seals and
// opens them tells the link what it hides. Both methods are no-ops
// outside the invariants build.
type SealedLedger interface {
	// SealedGrant checks the grant of p, a frame sealed for the link,
	// before the sealed frame is written.
	SealedGrant(p Preamble)
	// OpenedControl records a frame without segments, tagged t, opened
	// from a sealed frame read on the link, once the sealed frame's
	// buffer was let go.
	OpenedControl(t Tag)
}

// HandshakeEnder is implemented by links that honour
// LinkOptions.Handshake. The messenger calls EndHandshake once the session
// is established, before its reader starts; from then on the link applies
// LinkOptions.Limits. Only the reader side may call it.
type HandshakeEnder interface {
	EndHandshake()
}

// Link moves whole frames between two endpoints, in order, reliably, until
// it fails; a failed link is never reused (the messenger dials a new one and
// resumes the session above it). One goroutine writes and one reads.
type Link interface {
	// WriteFrames writes frames in order. When it returns the frames'
	// segments are no longer referenced, except through a reference the
	// link took on a frame's Buf.
	WriteFrames(frames []Frame) error
	// ReadFrame reads the next frame into f. A frame without segments
	// comes back with f.Buf == nil. Malformed input returns a *Error; the
	// link is then unusable.
	ReadFrame(f *Frame) error
	// Features returns the features both banners agreed on.
	Features() uint64
	LocalAddr() string
	RemoteAddr() string
	// Close ends the link; blocked reads and writes return errors.
	Close() error
}

// InboundLink is implemented by accepted links that carry their listener's
// account of them (Inbound.Admit), for the messenger to tell it when the
// peer has authenticated; a link that wraps another passes it on
// (InboundOf), or its sessions count as not authenticated for good.
type InboundLink interface {
	Inbound() *InboundConn
}

// InboundOf is l's listener's account of it, or nil (a dialed link, or a
// transport that keeps none).
func InboundOf(l Link) *InboundConn {
	if il, ok := l.(InboundLink); ok {
		return il.Inbound()
	}
	return nil
}

// PayloadAllocator is implemented by links that can hand out buffers a
// frame's data moves from without a copy (registered memory on RDMA). A
// buffer from it works on any link, and without a copy on links of the same
// transport and device.
type PayloadAllocator interface {
	// AllocPayload returns a buffer with len(B) == n and one reference.
	AllocPayload(n int) (*Buffer, error)
}

// Listener yields links whose banner exchange has succeeded.
type Listener interface {
	Accept(ctx context.Context) (Link, error)
	// Addr is the bound address, with the port filled in.
	Addr() string
	Close() error
}

// Transport creates links. addr is the transport-specific part of an
// address (host:port for tcp, a name for mem).
type Transport interface {
	Scheme() string
	Listen(ctx context.Context, addr string, opts LinkOptions) (Listener, error)
	Dial(ctx context.Context, addr string, opts LinkOptions) (Link, error)
}

// RegisteredMemory is implemented by transports that receive large
// payloads into memory registered with a NIC, out of a budget (msgr/rdma:
// Config.MemBudget, per domain). A daemon whose received messages wait on
// its peers before they are let go (an OSD's client bodies, held until its
// replicas have read them) keeps their receive budget well below it, so
// that what its peers send it always finds room.
type RegisteredMemory interface {
	RegisteredBudget() int64
}

// ErrRegisteredPressure is the error, wrapped, of a transport's
// allocation of long-lived registered memory (msgr.Messenger.
// AllocRegistered) refused because a transfer waits for that memory: not
// a failure, the caller uses ordinary memory until the wait is over.
var ErrRegisteredPressure = errors.New("a transfer waits for registered memory")

// MissingTransport stands in for a transport this binary was built
// without, so that an address asking for it fails with Err, which says how
// to get it, rather than as an unknown scheme. The messenger recognises it
// and fails Listen and Connect at once: a dial that can never succeed must
// not be retried in the background.
type MissingTransport struct {
	Name string // the scheme it stands in for
	Err  error
}

func (t MissingTransport) Scheme() string { return t.Name }

func (t MissingTransport) Listen(context.Context, string, LinkOptions) (Listener, error) {
	return nil, t.Err
}

func (t MissingTransport) Dial(context.Context, string, LinkOptions) (Link, error) {
	return nil, t.Err
}
