//go:build rdma

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/wire"
)

// rdvDesc is the data segment of a rendezvous frame: where the payload is
// and the key to read it; of an RDV_READY frame: where to write it.
const rdvDescSize = 20 // u64 address, u32 length, u64 key

// rdvFrontDescSize is the data segment of a rendezvous frame whose front
// is in the payload (wire.FlagRendezvousFront): the descriptor, then the
// front's length (u32). The payload is the data and then the front.
const rdvFrontDescSize = rdvDescSize + 4

type rdvDesc struct {
	addr uint64
	n    int
	key  uint64
}

func (d rdvDesc) put(b []byte) {
	binary.LittleEndian.PutUint64(b, d.addr)
	binary.LittleEndian.PutUint32(b[8:], uint32(d.n))
	binary.LittleEndian.PutUint64(b[12:], d.key)
}

func parseDesc(b []byte) rdvDesc {
	return rdvDesc{binary.LittleEndian.Uint64(b), int(binary.LittleEndian.Uint32(b[8:])), binary.LittleEndian.Uint64(b[12:])}
}

// The write rendezvous's control frames: each link that offers it posts
// ctlRecvs receives for them beside its window (a peer has at most
// maxReads RDV_READY or RDV_DONE frames of one link unanswered), and
// sends them from ctlSlots small buffers after its send buffers.
const (
	ctlRecvs   = 2 * maxReads // RDV_READYs for our payloads, RDV_DONEs for the peer's
	ctlSlots   = 2 * maxReads
	ctlBufSize = 128 // an RDV_READY is 84 bytes, an RDV_DONE 56
)

// maxReads bounds the rendezvous transfers one link has in flight: reads
// it posted, or destinations it offered the peer's writes.
const maxReads = 16

// A payload the receiver reads is read in up to maxReadPieces pieces of
// about minReadPiece bytes or more, each an RDMA read with its own
// completion, and the reader checksums each piece as soon as it and those
// before it have landed (pendingRead.fold): while the bytes are still in
// the cache where the provider's copy (or a NIC's DMA, with cache
// injection) left them, and while the rest of the payload is still
// moving. One read of the whole payload left the pass until its last
// byte had come: on tcp, 4 MiB payloads checksummed at 0.15 CPU-s per GB
// against 0.09 in pieces, though tcp's own CPU rose as much with its
// request and response per piece (docs/rdma.md, "Reads in pieces").
// About 256 KiB or more, so that a piece's completion and wake-up stay
// small beside its transfer and checksum.
const (
	maxReadPieces = 4
	minReadPiece  = 256 << 10
)

// maxPiecesOut bounds the read pieces one link has posted and not seen
// complete, as maxReads bounded its reads before they were cut: a verbs
// queue pair has at most its initiator depth of RDMA reads outstanding
// (16 on common NICs), and reads past it wait in its send queue, in front
// of the link's sends. More pieces wait in their transfers (postPieces).
// It also bounds the read completions in readDone and the CQ.
const maxPiecesOut = maxReads

// readPieces is how a read of n bytes is cut: count pieces of size bytes
// (the last may be shorter), about equal, each at least about
// minReadPiece, and a whole number of wire.DataAlign blocks, so that
// every piece starts aligned in the destination.
func readPieces(n int) (size, count int) {
	count = min(max(n/minReadPiece, 1), maxReadPieces)
	size = (n + count - 1) / count
	size = max((size+wire.DataAlign-1)&^(wire.DataAlign-1), wire.DataAlign)
	return size, max(1, (n+size-1)/size)
}

// A read's completion context carries its transfer slot and its piece.
func pieceSlot(slot uint32, piece int) uint32 { return slot | uint32(piece)<<8 }

func splitPieceSlot(s uint32) (slot uint32, piece int) { return s & 0xff, int(s >> 8) }

// pendingRead is a received frame waiting for its turn: a rendezvous whose
// payload is moving (or waiting for a transfer slot), or an inline frame
// queued behind one.
type pendingRead struct {
	f        wire.Frame
	r        *region
	frontLen int
	size     int
	// xfer is the bytes the transfer moves: size, and frontLen more when
	// the front comes in the payload (frontMoved) rather than inline.
	xfer       int
	frontMoved bool
	epi        [wire.EpilogueSize]byte
	done       bool
	inline     bool
	err        error
	// id numbers the rendezvous frame on the link (rdvSeen); a waiting
	// frame keeps its receive buffer (buf) and the descriptor until a
	// transfer slot is free.
	id      uint32
	waiting bool
	// charge holds the payload's bytes of the messenger's receive
	// budget from before its destination is registered until the frame
	// takes it (finish).
	charge wire.Charge
	buf    *wire.Buffer
	src    rdvDesc
	// sum folds the payload into its data CRC and chunk CRCs (summed),
	// piece by piece as they land: folded is the bytes summed so far,
	// inOrder the bytes of the transfer landed with all before them.
	// A read's pieces are pieces of piece bytes each; posted of them were
	// posted, out of those are still to complete, and landed has a bit
	// for each that completed.
	sum     wire.DataSum
	summed  bool
	folded  int
	inOrder int
	piece   int
	pieces  int
	posted  int
	out     int
	landed  uint32
	slot    uint32 // the transfer slot, once it has one
}

// readDoneEv is the completion of one piece of a rendezvous read: slot is
// pieceSlot's.
type readDoneEv struct {
	slot uint32
	err  error
}

// rendezvous takes a rendezvous frame: it checks the descriptor and starts
// moving the payload, or queues the frame until a transfer slot is free.
func (l *link) rendezvous(f *wire.Frame, buf *wire.Buffer, b []byte) (*pendingRead, error) {
	moved := f.Flags&wire.FlagRendezvousFront != 0
	descSize := rdvDescSize
	if moved {
		descSize = rdvFrontDescSize // CheckAgreed saw to the tag and the front
	}
	if int(f.DataLen) != descSize || f.WireSize() != len(b) {
		buf.Release()
		return nil, &wire.Error{Kind: wire.ErrKindMalformed, Msg: "bad rendezvous descriptor"}
	}
	d := b[wire.PreambleSize+int(f.FrontLen):]
	src := parseDesc(d)
	size, frontLen := src.n, int(f.FrontLen)
	if moved {
		frontLen = int(binary.LittleEndian.Uint32(d[rdvDescSize:]))
		if frontLen == 0 || frontLen > src.n {
			buf.Release()
			return nil, &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("rendezvous payload of %d bytes said to hold a front of %d", src.n, frontLen)}
		}
		size -= frontLen
		if max := l.lim.FrontLimit(f.Tag); uint64(frontLen) > max {
			buf.Release()
			return nil, &wire.Error{Kind: wire.ErrKindTooLarge, Msg: fmt.Sprintf("front segment of %d bytes exceeds the limit of %d", frontLen, max)}
		}
	}
	if max := l.lim.DataLimit(f.Tag); uint64(size) > max {
		buf.Release()
		return nil, &wire.Error{Kind: wire.ErrKindTooLarge, Msg: fmt.Sprintf("rendezvous payload of %d bytes exceeds the limit of %d", size, max)}
	}
	if err := l.lim.CheckMessageSize(f.Tag, uint64(frontLen), uint64(size)); err != nil {
		buf.Release()
		return nil, err
	}
	p := l.newPending()
	p.f, p.buf, p.frontLen, p.size, p.src = *f, buf, frontLen, size, src
	p.xfer, p.frontMoved = src.n, moved
	// One pass over the payload, as it lands: the check of the sender's
	// data CRC, and the chunk CRCs the receiver asked for
	// (LinkOptions.DataChunk), which then give the data CRC.
	chunk := 0
	if f.Tag == wire.TagMessage && size > 0 {
		chunk = l.dataChunk
	}
	p.summed = chunk > 0 || f.Flags&wire.FlagNoDataCRC == 0
	p.sum.Start(chunk)
	p.id = l.rdvSeen
	l.rdvSeen++
	p.epi = [wire.EpilogueSize]byte(b[len(b)-wire.EpilogueSize:])
	if len(l.freeReads) == 0 || l.memWake != nil || l.budgetWait != nil {
		// No transfer slot, or those before it wait for registered
		// memory or the receive budget: it waits behind them, in order.
		p.waiting = true
		return p, nil
	}
	if err := l.startTransfer(p); err != nil {
		l.putPending(p)
		return nil, err
	}
	return p, nil
}

// startTransfer moves p's payload into a registered buffer of its own:
// it posts the RDMA read, or offers the buffer to the peer's RDMA write
// (RDV_READY). The frame's receive buffer goes back first.
//
// The payload goes to offset 0 of the buffer and the front right after
// it (rdvFrontAt), as a stream link places a small frame: a registered
// buffer is mmap'd, so it starts on a page and the data on a
// wire.DataAlign boundary, and the store can write it with O_DIRECT from
// where it lies. Putting the front first would need padding up to the
// boundary, a page more to register for every message (largeSize rounds
// the payload and front together to a sixteenth of a power of two).
//
// While the domain's registered-memory budget is spent, p waits, with
// its receive buffer, until memory comes back (l.memWake, ReadFrame),
// and those behind it wait too: a fault here made the session reconnect
// and replay what it had sent, into the same shortage, where the slow
// consumer that holds the memory should just push back (docs/messenger.md
// §5.3). The reader goes on taking frames meanwhile, so the link's own
// control (RDV_READY, RDV_DONE, the link word) still comes in; the
// session's acks and grants in the frames behind p wait with them, as
// frames are handed up in order.
//
// Before memory, a MESSAGE's payload (or a SEALED frame's, which holds
// one) takes its bytes of the messenger's receive budget
// (wire.LinkOptions.Budget, Options.MaxRecvBytes), as a stream link
// charges a frame before it reads it: so a messenger's held messages
// hold at most its budget of the domain's registered memory, and an
// OSD whose client messages may not take it all always has room to
// receive what its peers forward (docs/rdma.md, "Registered memory").
// A spent budget is a consumer that holds what it received: the
// transfer waits for a release, for as long as it takes, as a stream
// link's reader does.
func (l *link) startTransfer(p *pendingRead) error {
	if l.budgetWait != nil {
		p.waiting = true // the first in line waits for the budget
		return nil
	}
	if n := int64(p.size + p.frontLen); p.charge.Bytes() == 0 && l.charges(p.f.Tag, n) {
		if w := l.budget.Reserve(&p.charge, n); w != nil {
			p.waiting = true
			l.budgetWait, l.budgetReady = w, w.Ready()
			return nil
		}
	}
	r, wait, err := l.d.tryLarge(p.size+p.frontLen, &l.memShort)
	if err == nil && r == nil {
		if l.memSince.IsZero() {
			l.memSince = time.Now()
		}
		left := memWaitMax - time.Since(l.memSince)
		if left > 0 {
			p.waiting = true
			l.memWake = wait
			if l.memTimer == nil {
				l.memTimer = time.NewTimer(left)
			} else {
				l.memTimer.Reset(left)
			}
			l.memTimeout = l.memTimer.C
			return nil
		}
		err = errMemWait // a cycle, most likely: the fault breaks it
		l.d.memw.giveUps.Add(1)
	}
	l.stopMemWait()
	buf := p.buf
	p.buf, p.waiting = nil, false
	if err != nil {
		buf.Release()
		return err
	}
	if !p.frontMoved {
		copy(r.mem[rdvFrontAt(p):], buf.B[wire.PreambleSize:wire.PreambleSize+p.frontLen])
	}
	buf.Release()
	slot := l.freeReads[len(l.freeReads)-1]
	l.epMu.RLock()
	if l.dead.Load() {
		l.epMu.RUnlock()
		l.d.putLarge(r)
		return net.ErrClosed
	}
	p.r = r
	l.freeReads = l.freeReads[:len(l.freeReads)-1]
	l.readSlots[slot] = p
	l.readsOut++
	l.d.transfers.Add(1)
	if !l.rdvWrite {
		p.piece, p.pieces = readPieces(p.xfer)
		p.slot = slot
		l.postPieces(p)
		l.d.reads.Add(1)
		l.epMu.RUnlock()
		return nil
	}
	l.epMu.RUnlock()
	l.sendCtl(wire.TagRdvReady, uint64(slot)<<32|uint64(p.id), rdvDesc{r.remoteAddr(0), p.xfer, r.key})
	return nil
}

// postPieces posts the next pieces of p's read, as many as the link's
// budget (maxPiecesOut) allows; the rest go as pieces complete
// (pieceDone). Pieces are posted in order, and a provider completes them
// in order where it can, so each usually finds those before it landed and
// is checksummed at once. A piece the provider refuses comes back as a
// failed piece (post.go). REQUIRES: epMu read-locked, the link not dead.
func (l *link) postPieces(p *pendingRead) {
	n0 := p.posted
	for p.posted < p.pieces && l.piecesOut < maxPiecesOut {
		off := p.posted * p.piece
		l.d.pq.push(postOp{l: l, kind: opRead, slot: pieceSlot(p.slot, p.posted), buf: p.r.ptr(off),
			n: min(p.piece, p.xfer-off), desc: p.r.desc, raddr: p.src.addr + uint64(off), rkey: p.src.key})
		p.posted++
		p.out++
		l.piecesOut++
		l.piecesHigh = max(l.piecesHigh, l.piecesOut)
	}
	if n := p.posted - n0; n > 0 {
		l.d.readPieces.Add(uint64(n))
		l.d.kickPosts() // one call for them all
	}
}

// morePieces posts pieces that wait for the budget, oldest transfer first.
func (l *link) morePieces() {
	if l.piecesOut >= maxPiecesOut {
		return
	}
	l.epMu.RLock()
	defer l.epMu.RUnlock()
	if l.dead.Load() {
		return // ReadFrame ends at l.closed
	}
	for _, p := range l.pend {
		if p.r != nil && p.err == nil && p.posted < p.pieces {
			l.postPieces(p)
		}
	}
}

// rdvFrontAt is where p's front lies in its rendezvous buffer: after the
// payload, which starts the buffer (startTransfer), as it lies in the
// sender's source when it comes with the payload (frontMoved).
func rdvFrontAt(p *pendingRead) int { return p.size }

// pieceDone takes the completion of a piece of the read in a transfer
// slot: it checksums what has now landed in order, ends the transfer with
// its last piece, and posts pieces that waited for the budget. A failed
// piece fails the frame, and with it the link, when its turn comes; the
// transfer no longer counts as moving, but its slot stays taken, so that
// the pieces still out cannot complete into another transfer.
func (l *link) pieceDone(ev readDoneEv) {
	slot, piece := splitPieceSlot(ev.slot)
	if slot >= maxReads {
		return
	}
	p := l.readSlots[slot]
	if p == nil || p.out == 0 {
		return // dropped with the link
	}
	p.out--
	l.piecesOut--
	switch {
	case p.err != nil:
	case ev.err != nil:
		p.done, p.err = true, ev.err
		l.readsOut--
		l.d.transfers.Add(-1)
	default:
		p.landed |= 1 << piece
		p.fold()
		if p.inOrder == p.xfer { // every piece landed
			l.transferDone(slot)
		}
	}
	l.morePieces()
}

// fold checksums the pieces that have landed in order and were not yet:
// their data (a front moved with it is checked whole, in finish).
func (p *pendingRead) fold() {
	for p.inOrder < p.xfer && p.landed&(1<<(p.inOrder/p.piece)) != 0 {
		p.inOrder += min(p.piece, p.xfer-p.inOrder)
		p.add(max(min(p.inOrder, p.size), p.folded))
	}
}

// add checksums the payload up to byte end.
func (p *pendingRead) add(end int) {
	if p.summed {
		p.sum.Add(p.r.mem[p.folded:end])
	}
	p.folded = end
}

// transferDone marks the transfer in slot finished (its last read piece
// completed or its RDV_DONE came) and starts those waiting for a slot, in
// order.
func (l *link) transferDone(slot uint32) {
	p := l.readSlots[slot]
	if p == nil {
		return // dropped with the link
	}
	l.readSlots[slot] = nil
	l.freeReads = append(l.freeReads, slot)
	l.readsOut--
	l.d.transfers.Add(-1)
	p.done = true
	l.startWaiting()
}

// startWaiting starts the transfers that wait, in order, while a transfer
// slot is free and registered memory is to be had: one that finds the
// budget spent waits again (startTransfer), and those behind it with it.
func (l *link) startWaiting() {
	for _, q := range l.pend {
		if !q.waiting {
			continue
		}
		if q.inline {
			if !l.chargeInline(q, true) {
				break
			}
			continue
		}
		if len(l.freeReads) == 0 {
			break
		}
		if err := l.startTransfer(q); err != nil {
			q.done, q.err = true, err
			continue
		}
		if q.waiting {
			break
		}
	}
}

// memReady reports whether registered memory came back for a transfer
// that waits for it (startTransfer), or its wait is over: the reader then
// tries again.
func (l *link) memReady() bool {
	if l.memWake == nil {
		return false
	}
	select {
	case <-l.memWake:
		return true
	default:
		return time.Since(l.memSince) >= memWaitMax
	}
}

// budgetGranted reports whether the receive budget admitted a transfer
// that waits for it: the reader then starts it.
func (l *link) budgetGranted() bool {
	select {
	case <-l.budgetReady: // nil unless one waits
		return true
	default:
		return false
	}
}

// stopMemWait ends the link's wait for registered memory, if any.
func (l *link) stopMemWait() {
	l.d.endShort(&l.memShort)
	l.memSince, l.memWake, l.memTimeout = time.Time{}, nil, nil
	if l.memTimer != nil {
		l.memTimer.Stop()
	}
}

// control handles the write rendezvous's frames: an RDV_READY asks us to
// write a payload we sent, an RDV_DONE says the peer wrote one we receive.
// It returns errConsumed, or the error that ends the link.
func (l *link) control(f *wire.Frame, buf *wire.Buffer, b []byte) error {
	dst, err := l.checkControl(f, b)
	// Posted again before anything is sent: the peer's next control
	// frame may need it.
	buf.Release()
	if err != nil {
		return err
	}
	if f.Tag == wire.TagRdvDone {
		l.transferDone(uint32(f.Seq >> 32))
		return errConsumed
	}
	return l.writePayload(f.Seq, dst)
}

// checkControl validates a control frame in b and returns an RDV_READY's
// destination.
func (l *link) checkControl(f *wire.Frame, b []byte) (rdvDesc, error) {
	if !l.rdvWrite {
		return rdvDesc{}, &wire.Error{Kind: wire.ErrKindProtocol, Msg: fmt.Sprintf("%v frame, but the write rendezvous was not agreed", f.Tag)}
	}
	if f.WireSize() != len(b) {
		return rdvDesc{}, &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("%v frame says %d bytes, the receive got %d", f.Tag, f.WireSize(), len(b))}
	}
	id, slot := uint32(f.Seq), uint32(f.Seq>>32)
	if f.Tag == wire.TagRdvDone {
		if slot >= maxReads || l.readSlots[slot] == nil || l.readSlots[slot].id != id {
			return rdvDesc{}, &wire.Error{Kind: wire.ErrKindProtocol, Msg: fmt.Sprintf("RDV_DONE for rendezvous %d in slot %d, which is not being written", id, slot)}
		}
		return rdvDesc{}, nil
	}
	if f.DataLen != rdvDescSize {
		return rdvDesc{}, &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("RDV_READY with %d bytes of data, want %d", f.DataLen, rdvDescSize)}
	}
	d := b[wire.PreambleSize : wire.PreambleSize+rdvDescSize]
	if err := wire.CheckEpilogue(b[len(b)-wire.EpilogueSize:], nil, d, false); err != nil {
		return rdvDesc{}, err
	}
	return parseDesc(d), nil
}

// writePayload writes the payload of our rendezvous frame number
// uint32(seq) where the peer's RDV_READY says, and sends RDV_DONE behind
// it: the provider processes a send after the writes posted before it
// (FI_ORDER_SAW, checked when the domain opened), so the payload is in
// place when RDV_DONE arrives. The source stays ours until the peer's link
// word says it handed the frame up, as after a read.
func (l *link) writePayload(seq uint64, dst rdvDesc) error {
	l.epMu.RLock()
	if l.dead.Load() {
		l.epMu.RUnlock()
		return net.ErrClosed
	}
	l.rdvMu.Lock()
	k := uint32(seq) - l.rdvFreed
	var src rdvSource
	ok := k < uint32(len(l.rdvOut))
	if ok {
		src = l.rdvOut[k]
	}
	l.rdvMu.Unlock()
	if !ok || src.n != dst.n {
		l.epMu.RUnlock()
		return &wire.Error{Kind: wire.ErrKindProtocol, Msg: fmt.Sprintf("RDV_READY for rendezvous %d of %d bytes, which is not outstanding", uint32(seq), dst.n)}
	}
	// A write the provider refuses fails the link (post.go).
	l.d.post(postOp{l: l, kind: opWrite, buf: src.ptr, n: dst.n, desc: src.desc, raddr: dst.addr, rkey: dst.key})
	l.d.writes.Add(1)
	l.epMu.RUnlock()
	l.sendCtl(wire.TagRdvDone, seq, rdvDesc{})
	return errConsumed
}

// sendCtl sends a control frame from one of the link's control buffers,
// with dst as its data when dst.n > 0 (RDV_READY).
// One is free but for a moment: a peer has at most maxReads of our
// RDV_READY and maxReads of our RDV_DONE unanswered, and each is
// answered only after it was delivered.
func (l *link) sendCtl(tag wire.Tag, seq uint64, dst rdvDesc) {
	slot, ok := takeSlot(l.ctlFree, l.closed)
	if !ok {
		return
	}
	l.epMu.RLock()
	defer l.epMu.RUnlock()
	if l.dead.Load() {
		return
	}
	off := l.d.t.cfg.SendSlots*l.bufSize + int(slot)*ctlBufSize
	b := l.send.mem[off : off+ctlBufSize]
	p := wire.Preamble{Tag: tag, Seq: seq, LinkWord: l.rdvReadCnt.Load()}
	if dst.n > 0 {
		p.DataLen = rdvDescSize
	}
	n := p.WireSize()
	p.Put(b)
	if dst.n > 0 {
		desc := b[wire.PreambleSize : wire.PreambleSize+rdvDescSize]
		dst.put(desc)
		wire.PutEpilogue(b[n-wire.EpilogueSize:], 0, wire.CRC(desc))
	}
	l.d.post(postOp{l: l, kind: opCtl, slot: slot, buf: unsafe.Pointer(&b[0]), n: n, desc: l.send.desc,
		imm: l.peerSRX, data: l.peerTag})
}

// ctlDone gives a control buffer back once its send is over.
func (l *link) ctlDone(slot uint32) {
	select {
	case l.ctlFree <- slot:
	default:
	}
}

// newPending and putPending recycle pendingReads (reader goroutine only),
// so a rendezvous costs no allocation.
func (l *link) newPending() *pendingRead {
	if n := len(l.pendFree); n > 0 {
		p := l.pendFree[n-1]
		l.pendFree = l.pendFree[:n-1]
		return p
	}
	return new(pendingRead)
}

func (l *link) putPending(p *pendingRead) {
	p.charge.Release()
	*p = pendingRead{sum: p.sum} // its chunk CRC array is reused
	l.pendFree = append(l.pendFree, p)
}

// finish hands a pending frame over once its turn has come.
func (l *link) finish(p *pendingRead, f *wire.Frame) error {
	defer l.putPending(p)
	if p.inline {
		*f = p.f
		return nil
	}
	if p.err != nil {
		// The provider may still write into the buffer: retire it
		// rather than put it back in the cache.
		if p.r != nil {
			l.d.inUse.Add(-1)
			l.d.retire(p.r, l)
		}
		return p.err
	}
	l.rdvReadCnt.Add(1)
	at := rdvFrontAt(p)
	data := p.r.mem[:p.size]
	front := p.r.mem[at : at+p.frontLen]
	// The payload's CRCs, folded as its pieces landed; a payload the
	// peer wrote (RDV_DONE) is checksummed here, whole.
	p.add(p.size)
	var dcrc uint32
	var crcs []uint32
	if p.summed {
		dcrc, crcs = p.sum.Finish()
	}
	g := p.f
	g.Flags &^= wire.FlagRendezvous | wire.FlagRendezvousFront
	g.FrontLen, g.DataLen = uint32(p.frontLen), uint32(p.size)
	if err := g.CheckEpilogue(p.epi[:], front, dcrc, p.summed); err != nil {
		l.d.putLarge(p.r)
		return err
	}
	*f = g
	f.Charge, p.charge = p.charge, wire.Charge{}
	f.Front, f.Data = front, data
	f.Buf = p.r.buffer(p.size + p.frontLen)
	if crcs != nil {
		f.DataChunkCRCs, f.DataChunk = f.Buf.SetChunkCRCs(crcs), p.sum.Chunk()
	}
	return nil
}

// peerReadsDone frees our rendezvous source buffers the peer has moved,
// as its link word (count) says. A count behind ours is ignored: control
// frames, sent by the reader, can pass the writer's frames with an older
// count.
func (l *link) peerReadsDone(count uint32) {
	if l.rdvOutN.Load() == 0 {
		// Nothing of ours outstanding, the common case for small
		// messages: no lock on every frame. A source appended meanwhile
		// cannot be counted in this frame's word yet.
		return
	}
	l.rdvMu.Lock()
	k := 0
	if ahead := count - l.rdvFreed; int32(ahead) > 0 {
		k = min(int(ahead), len(l.rdvOut))
	}
	for i := range k {
		l.rdvOut[i].release(l.d)
	}
	l.rdvFreed += uint32(k)
	if k > 0 {
		n := copy(l.rdvOut, l.rdvOut[k:])
		clear(l.rdvOut[n:])
		l.rdvOut = l.rdvOut[:n]
		l.rdvOutN.Store(int32(n))
	}
	l.rdvMu.Unlock()
}

// rdvSource is what a rendezvous frame's payload is moved from until the
// peer has it: a registered copy (r), or the caller's own registered
// buffer (b), on which the link holds a reference; ptr, n and desc are the
// payload for an RDMA write of ours.
type rdvSource struct {
	r    *region
	b    *wire.Buffer
	ptr  unsafe.Pointer
	n    int
	desc C.uintptr_t
}

func (s rdvSource) release(d *domain) {
	d.transfers.Add(-1)
	s.drop(d)
}

// drop lets go of a source, which no peer reads (any more).
func (s rdvSource) drop(d *domain) {
	if s.b != nil {
		s.b.Release()
		return
	}
	d.putSource(s.r)
}

// rendezvousSource returns where the peer reads f's payload from: straight
// from the caller's buffer when it is memory this domain registered
// (AllocPayload), else from a registered copy, for which it waits while
// the domain's registered memory is spent (getSource), until the link
// closes. With moveFront the payload is the data and then the front, in a
// copy: a front too large to go inline is rare (a multipart object's
// list of parts), and the copy of its data then costs less than a second
// descriptor on every rendezvous.
func (l *link) rendezvousSource(f *wire.Frame, moveFront bool) (src rdvSource, addr, key uint64, err error) {
	n := len(f.Data)
	if f.Buf != nil && !moveFront {
		if r, ok := f.Buf.Owner.(*region); ok && r.d == l.d {
			if off, ok := r.holds(f.Data); ok {
				f.Buf.Ref()
				l.d.zeroCopy.Add(1)
				return rdvSource{b: f.Buf, ptr: r.ptr(off), n: n, desc: r.desc}, r.remoteAddr(off), r.key, nil
			}
		}
	}
	if moveFront {
		n += len(f.Front)
	}
	r, err := l.d.getSource(n, l.closed)
	if err != nil {
		return rdvSource{}, 0, 0, err
	}
	copy(r.mem, f.Data)
	if moveFront {
		copy(r.mem[len(f.Data):], f.Front)
	}
	l.d.copied.Add(1)
	return rdvSource{r: r, ptr: r.ptr(0), n: n, desc: r.desc}, r.remoteAddr(0), r.key, nil
}
