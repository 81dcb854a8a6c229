//go:build rdma

package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/wire"
)

// freeSendSlot gives a send buffer back after its send completed or failed.
func (l *link) freeSendSlot(slot uint32) {
	select {
	case l.sendFree <- slot:
	default:
	}
	if l.draining.Load() && len(l.sendFree) == cap(l.sendFree) {
		l.pokeDrain()
	}
}

// pokeDrain wakes Close's drain, if it waits.
func (l *link) pokeDrain() {
	select {
	case l.sendsIdle <- struct{}{}:
	default:
	}
}

// takeSlot takes a free buffer's index from free, waiting for one unless
// closed is closed first.
func takeSlot(free chan uint32, closed chan struct{}) (uint32, bool) {
	if s, ok := takeFreeSlot(free); ok { // the common case, without the two-way select
		return s, true
	}
	select {
	case s := <-free:
		return s, true
	case <-closed:
		return 0, false
	}
}

// takeFreeSlot takes a free buffer's index from free if one is there now.
func takeFreeSlot(free chan uint32) (uint32, bool) {
	select {
	case s := <-free:
		return s, true
	default:
		return 0, false
	}
}

// AllocPayload hands out registered memory for a payload too large to go
// inline whatever the front, so the rendezvous reads it where the caller
// wrote it; smaller payloads are copied into a send buffer anyway and get an
// ordinary pooled buffer. Either way the caller holds one reference.
func (l *link) AllocPayload(n int) (*wire.Buffer, error) {
	if n+wire.PreambleSize+wire.EpilogueSize <= l.sendLimit {
		return wire.GetBuffer(n), nil
	}
	r, err := l.d.getLarge(n)
	if errors.Is(err, errMemBudget) {
		// Registered memory is short for now: an ordinary buffer, which
		// the send copies into registered memory, waiting for it there
		// if need be, rather than an error (or a wait here, for memory
		// the caller may hold itself).
		return wire.GetBuffer(n), nil
	}
	if err != nil {
		return nil, err
	}
	return r.buffer(n), nil
}

// WriteFrames posts one send per frame, inline when it fits a buffer,
// else as a rendezvous descriptor over a registered copy of the payload.
// The sends are queued and go to the provider together, in one call
// (post.go), not a call each: a batch of small frames costs one cgo call
// and one turn of the domain's token. What is queued goes early wherever the
// writer could hold its own sends back: before it waits for a send buffer
// (queued sends free them as they complete) and before the long CRC and
// copy of a rendezvous payload.
func (l *link) WriteFrames(frames []wire.Frame) error {
	defer l.d.kickPosts()
	for i := range frames {
		if err := l.writeFrame(&frames[i]); err != nil {
			return err
		}
	}
	return nil
}

// writeFrame queues the send of f; the caller posts the queue.
//
// A rendezvous payload's registered source is taken first, before a send
// buffer and with no lock held: the copy may wait for registered memory
// (getSource) until the link closes, and Close must be free to close it.
func (l *link) writeFrame(f *wire.Frame) error {
	p := f.Preamble
	p.FrontLen, p.DataLen = uint32(len(f.Front)), uint32(len(f.Data))
	n := p.WireSize()
	rdv := n > l.sendLimit
	// moveFront: the front does not fit inline beside the descriptor,
	// so it goes in the payload, after the data
	// (wire.FlagRendezvousFront).
	moveFront := false
	var src rdvSource
	var addr, key uint64
	if rdv {
		// Rendezvous: the descriptor goes inline, the payload stays in
		// registered memory until the peer has read it.
		if l.features&wire.FeatureRendezvous == 0 {
			return &wire.Error{Kind: wire.ErrKindTooLarge, Msg: fmt.Sprintf("rdma: a %d-byte frame does not fit a %d-byte buffer, and the peer did not agree to rendezvous", n, l.sendLimit)}
		}
		if wire.PreambleSize+len(f.Front)+rdvDescSize+wire.EpilogueSize > l.sendLimit {
			if l.features&wire.FeatureRendezvousFront == 0 || !p.Tag.CarriesMessage() {
				return &wire.Error{Kind: wire.ErrKindTooLarge, Msg: fmt.Sprintf("rdma: front of %d bytes does not fit a %d-byte buffer, and the peer did not agree to move it by rendezvous", len(f.Front), l.sendLimit)}
			}
			moveFront = true
		}
		// What is queued goes before the long copy (and CRC) of the
		// payload, and before a wait for memory.
		l.d.kickPosts()
		var err error
		if src, addr, key, err = l.rendezvousSource(f, moveFront); err != nil {
			return err
		}
	}
	slot, ok := takeFreeSlot(l.sendFree)
	if !ok {
		l.d.kickPosts()
		if slot, ok = takeSlot(l.sendFree, l.closed); !ok {
			if rdv {
				src.drop(l.d)
			}
			return net.ErrClosed
		}
	}
	l.epMu.RLock()
	defer l.epMu.RUnlock()
	if l.dead.Load() {
		if rdv {
			src.drop(l.d)
		}
		return net.ErrClosed
	}
	sb := l.send.mem[int(slot)*l.bufSize : (int(slot)+1)*l.bufSize]
	l.checkGrant(&p)
	p.LinkWord = l.rdvReadCnt.Load()
	noCRC := (l.noCRC && l.features&wire.FeatureNoDataCRC != 0 || p.Tag.Sealed() && p.Flags&wire.FlagNoDataCRC != 0) && len(f.Data) > 0
	if noCRC {
		p.Flags |= wire.FlagNoDataCRC
	}
	// The sender's CRC (Message.SetDataCRC, SetSourceCRC), if it has
	// one, is not checked here: the receiver refuses a wrong one as
	// corrupt (or reports a wrong source CRC), and recomputing it would
	// launder data that changed after its CRC was taken (protocol.md §4.2).
	var dcrc uint32
	if p.HasSegments() {
		dcrc = f.SendDataCRC(&p, l.features)
	}
	if rdv {
		p.Flags |= wire.FlagRendezvous
		front := f.Front
		p.DataLen = rdvDescSize
		if moveFront {
			p.Flags |= wire.FlagRendezvousFront
			front, p.FrontLen, p.DataLen = nil, 0, rdvFrontDescSize
		}
		n = p.WireSize()
		p.Put(sb)
		copy(sb[wire.PreambleSize:], front)
		d := sb[wire.PreambleSize+len(front):]
		rdvDesc{addr, src.n, key}.put(d)
		if moveFront {
			binary.LittleEndian.PutUint32(d[rdvDescSize:], uint32(len(f.Front)))
		}
		// The front's CRC is that of the front wherever it goes.
		wire.PutEpilogue(sb[n-wire.EpilogueSize:], wire.CRC(f.Front), dcrc)
		l.rdvMu.Lock()
		l.rdvOut = append(l.rdvOut, src)
		l.rdvOutN.Store(int32(len(l.rdvOut)))
		l.d.transfers.Add(1)
		l.rdvMu.Unlock()
	} else {
		p.Put(sb)
		if p.HasSegments() {
			copy(sb[wire.PreambleSize:], f.Front)
			copy(sb[wire.PreambleSize+len(f.Front):], f.Data)
			wire.PutEpilogue(sb[n-wire.EpilogueSize:], wire.CRC(f.Front), dcrc)
		}
	}
	// A send the provider refuses fails the link (post.go).
	l.d.pq.push(postOp{l: l, kind: opSend, slot: slot, buf: unsafe.Pointer(&sb[0]), n: n, desc: l.send.desc,
		imm: l.peerSRX, data: l.peerTag})
	return nil
}

// WriteSpace tells the messenger how much a write can take without
// waiting: the free send buffers. A sender with room writes its message
// itself (the messenger's writeInline), saving the hand-off to the writer
// goroutine on each side of a request and its reply.
func (l *link) WriteSpace() int { return len(l.sendFree) * l.sendLimit }
