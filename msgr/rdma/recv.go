//go:build rdma

package rdma

import (
	"errors"
	"fmt"
	"net"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/wire"
)

// errConsumed: the receive held a frame of the link's own, which is not
// handed up.
var errConsumed = errors.New("rdma: link control frame")

type rxEvent struct {
	slot uint32
	n    int
	err  error
	eof  bool // err is the peer's shutdown (endOfStream)
}

// postRecv queues a receive into buffer slot; a failure to post fails the
// link (post.go).
func (l *link) postRecv(slot uint32, lazy bool) {
	l.ledgerPost()
	if l.dead.Load() {
		return
	}
	l.ledger.slots.posting("a link", slot)
	b := l.recvBufs[slot].B
	l.d.postMaybeLater(postOp{l: l, kind: opRecv, slot: slot, buf: unsafe.Pointer(&b[:1][0]), n: l.bufSize, desc: l.recvDesc}, lazy)
}

// repost gives a receive buffer back to the provider once the frame in it
// is released; after Close it only counts the buffer as returned.
func (l *link) repost(slot uint32) {
	l.recvBufs[slot].Reset(l.bufSize)
	l.postRecv(slot, true)
	l.held.Add(-1)
	l.maybeFreeRecv()
}

func (l *link) complete(op uint8, slot uint32, n int, err error) {
	switch op {
	case opRecv:
		if !l.srx {
			l.countPosted(-1) // the pool counts its own
			l.ledger.slots.completed("a link", slot)
		}
		if err != nil {
			l.fail(err)
			return
		}
		select {
		case l.rx <- rxEvent{slot: slot, n: n}:
		default:
			// More completions than posted receives: impossible unless
			// the provider misbehaves.
			l.unread(rxEvent{slot: slot, n: n})
			l.fail(errors.New("rdma: receive completions overflow"))
		}
	case opSend:
		l.freeSendSlot(slot)
		if err != nil {
			l.fail(err)
		}
	case opRead:
		if l.readsPosted.Add(-1) == 0 && l.draining.Load() {
			l.pokeDrain() // waitReads
		}
		select {
		case l.readDone <- readDoneEv{slot: slot, err: err}:
		default:
		}
	case opCtl:
		l.ctlDone(slot)
		if err != nil {
			l.fail(err)
		}
	case opWrite:
		l.writesOut.Add(-1)
		if err != nil {
			l.fail(err)
		}
	}
}

// countPosted tracks this link's posted receives in the domain's
// counter; once the link is dead its receives were written off by Close.
func (l *link) countPosted(n int64) {
	l.postMu.Lock()
	if !l.dead.Load() {
		l.postedN += n
		l.d.posted.Add(n)
	}
	l.postMu.Unlock()
}

// maybeFreeRecv frees the receive region once the endpoint is closed and
// no frame above holds a buffer of it; Close and the last release call it.
func (l *link) maybeFreeRecv() {
	if l.epClosed.Load() && l.held.Load() <= 0 {
		l.rdvMu.Lock()
		r := l.recv
		l.recv = nil
		l.rdvMu.Unlock()
		if r != nil {
			l.d.freeClosed(r)
		}
	}
}

// ReadFrame returns the next frame. Inline frames point into the receive
// buffer, which is posted again when the frame is released; a rendezvous
// frame's payload is first moved into a registered buffer of its own, by
// our RDMA read or by the peer's RDMA write (Config.Rendezvous).
func (l *link) ReadFrame(f *wire.Frame) (err error) {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	defer func() {
		if err != nil {
			l.dropPending()
			l.d.dropDuty(l)
		}
	}()
	for {
		// Frames leave in the order they arrived: a rendezvous frame
		// whose payload is still moving holds back the ones behind it.
		if len(l.pend) > 0 && l.pend[0].done {
			p := l.pend[0]
			// Shift rather than reslice, so the queue's array is reused.
			n := copy(l.pend, l.pend[1:])
			l.pend[n] = nil
			l.pend = l.pend[:n]
			return l.finish(p, f)
		}
		// Poll for our own completions rather than sleep, if no other
		// reader of the domain does; the select below then finds them.
		// Receives are taken even with every transfer slot busy: the
		// RDV_DONE that frees one comes as a receive.
		l.d.pollFor(l)
		if len(l.pend) == 0 {
			// The common case, a frame with nothing ahead of it, without
			// the multi-way select below. Only with nothing pending: a
			// read's completion must not wait behind a stream of frames.
			select {
			case ev := <-l.rx:
				if done, err := l.received(ev, f); done {
					return err
				}
				continue
			default:
			}
		}
		select {
		case ev := <-l.rx:
			if done, err := l.received(ev, f); done {
				return err
			}
		case d := <-l.readDone:
			l.pieceDone(d)
		case <-l.memWake: // nil unless a transfer waits for memory
			l.memWake = nil
			l.startWaiting()
		case <-l.budgetReady: // nil unless a transfer waits for the budget
			l.budgetWait, l.budgetReady = nil, nil
			l.startWaiting()
		case <-l.memTimeout: // its wait is over (memWaitMax)
			l.memWake, l.memTimeout = nil, nil
			l.startWaiting()
		case <-l.closed:
			select {
			case ev := <-l.rx:
				if len(l.pend) > 0 {
					l.unread(ev)
					return net.ErrClosed
				}
				p, err := l.frameFrom(ev, f)
				if p != nil {
					l.pend = append(l.pend, p) // for dropPending
				}
				if err == nil && p != nil || err == errConsumed {
					return net.ErrClosed // its payload cannot come now
				}
				return err
			default:
				return net.ErrClosed
			}
		}
	}
}

// received takes the receive ev for ReadFrame: done when f is the next
// frame (or err ends the read); otherwise it was the link's own frame or it
// joined the pending queue.
//
// An inline MESSAGE (or SEALED frame) takes its bytes of the receive
// budget here, in arrival order with the rendezvous frames (which take
// theirs before their transfer, startTransfer), and waits for them as
// they do, in the queue, while the reader goes on. Were it charged above,
// once handed up (the messenger's linkRun.charge), a rendezvous behind it
// already charged could hold the bytes it waits for, and could only give
// them back once delivered, behind it: the whole budget would stop.
func (l *link) received(ev rxEvent, f *wire.Frame) (done bool, err error) {
	p, err := l.frameFrom(ev, f)
	switch {
	case err == errConsumed:
		return false, nil
	case err != nil:
		return true, err
	case p == nil && len(l.pend) == 0 && (!l.charges(f.Tag, frameBytes(f)) || l.budget.TryGrow(&f.Charge, frameBytes(f))):
		return true, nil // an inline frame with nothing ahead of it
	case p == nil:
		q := l.newPending()
		q.f, q.inline = *f, true
		*f = wire.Frame{}
		l.pend = append(l.pend, q)
		q.waiting = true
		l.chargeInline(q, false)
	default:
		l.pend = append(l.pend, p)
	}
	return false, nil
}

// charges reports whether a frame of tag t and n bytes (front and data)
// takes them from the receive budget at the link: inline ones as they
// arrive (received), rendezvous ones before their transfer
// (startTransfer).
func (l *link) charges(t wire.Tag, n int64) bool {
	return l.budget != nil && t.CarriesMessage() && n > 0
}

func frameBytes(f *wire.Frame) int64 { return int64(len(f.Front) + len(f.Data)) }

// chargeInline charges q, a waiting inline frame, if nothing before it
// waits (inTurn: the caller, startWaiting, knows none does): it is then
// done, or it waits for the budget (l.budgetWait). It reports whether q
// is done.
func (l *link) chargeInline(q *pendingRead, inTurn bool) bool {
	for _, x := range l.pend {
		if inTurn || x == q {
			break
		}
		if x.waiting {
			return false // its turn comes after x's (startWaiting)
		}
	}
	switch {
	case !l.charges(q.f.Tag, frameBytes(&q.f)): // none
	case q.f.Charge.Bytes() > 0:
		// Granted: the one wait was q's, whether or not ReadFrame has
		// seen its Ready yet (startWaiting may run first, at a transfer's
		// end). Left set, it would point into q once q is recycled, and
		// a Cancel at the link's end would give q's bytes back twice.
		l.budgetWait, l.budgetReady = nil, nil
	case l.budgetWait != nil:
		return false
	default:
		if w := l.budget.Reserve(&q.f.Charge, frameBytes(&q.f)); w != nil {
			l.budgetWait, l.budgetReady = w, w.Ready()
			return false
		}
	}
	q.waiting, q.done = false, true
	return true
}

// unread gives back the buffer of a receive the reader will not take: a
// shared pool's goes back to the pool (a link's own dies with its region).
func (l *link) unread(ev rxEvent) {
	if l.srx && ev.err == nil {
		l.d.srx.repost(ev.slot)
	}
}

// dropPending lets go of frames the reader will never deliver, after an
// error ended the link: inline ones and those waiting for a transfer slot
// release their receive buffer, transfers retire their destination (the
// provider may still write into it until the endpoint is gone).
func (l *link) dropPending() {
	if l.budgetWait != nil {
		// First: the wait holds a pointer to its frame's charge.
		l.budgetWait.Cancel()
		l.budgetWait, l.budgetReady = nil, nil
	}
	for i, p := range l.pend {
		switch {
		case p.inline:
			p.f.Release()
		case p.waiting:
			p.buf.Release()
		case p.r != nil:
			l.d.inUse.Add(-1)
			l.d.retire(p.r, l)
		}
		p.charge.Release()
		l.pend[i] = nil
	}
	l.pend = l.pend[:0]
	l.stopMemWait()
	l.d.transfers.Add(-int64(l.readsOut))
	l.readsOut, l.piecesOut = 0, 0
	clear(l.readSlots[:])
}

// frameFrom turns a receive completion into an inline frame in f, or, for
// a rendezvous frame, starts moving its payload and returns it; a control
// frame of the link's own is handled here (errConsumed).
func (l *link) frameFrom(ev rxEvent, f *wire.Frame) (*pendingRead, error) {
	if ev.err != nil {
		if ev.eof {
			// The peer's shutdown, after its last frames (endOfStream):
			// the link is done. Not inline: the reader holds readMu,
			// which Close takes.
			go l.Close()
		}
		return nil, ev.err
	}
	var buf *wire.Buffer
	if l.srx {
		if l.dead.Load() {
			l.unread(ev)
			return nil, net.ErrClosed
		}
		buf = l.d.srx.bufs[ev.slot]
	} else {
		// held first, then dead: Close sets dead first, then looks at
		// held, so the region cannot be unmapped under us.
		l.held.Add(1)
		if l.dead.Load() {
			l.held.Add(-1)
			l.maybeFreeRecv()
			return nil, net.ErrClosed
		}
		buf = l.recvBufs[ev.slot]
	}
	b := buf.B[:ev.n]
	if err := f.Preamble.Parse(b, l.lim); err != nil {
		buf.Release()
		return nil, err
	}
	if err := f.Preamble.CheckAgreed(l.features, true); err != nil {
		buf.Release()
		return nil, err
	}
	l.peerReadsDone(f.LinkWord)
	if f.Tag.LinkOnly() {
		err := l.control(f, buf, b)
		l.ledgerRead(f.Tag)
		return nil, err
	}
	l.ledgerRead(f.Tag)
	if f.Flags&wire.FlagRendezvous != 0 {
		return l.rendezvous(f, buf, b)
	}
	if f.WireSize() != ev.n {
		buf.Release()
		return nil, &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("frame says %d bytes, the receive got %d", f.WireSize(), ev.n)}
	}
	if !f.HasSegments() {
		buf.Release() // posted again now: nothing points into it
		l.ledgerSlotted(f.Tag)
		f.Front, f.Data, f.Buf = nil, nil, nil
		return nil, nil
	}
	// An inline frame's data stays where the receive put it, right after
	// the preamble and front in its BufSize (16 KiB) receive buffer, so it
	// is not on a wire.DataAlign boundary as a rendezvous payload is
	// (finish). Placing it would cost a copy per small message to save
	// one that does not happen: an object this small goes into the
	// store's Pebble, not to an O_DIRECT data file, and the receive
	// buffer must go back to be posted soon anyway.
	front := b[wire.PreambleSize : wire.PreambleSize+int(f.FrontLen)]
	data := b[wire.PreambleSize+len(front) : ev.n-wire.EpilogueSize]
	epi := b[ev.n-wire.EpilogueSize:]
	summed := f.Flags&wire.FlagNoDataCRC == 0
	var dcrc uint32
	if summed {
		dcrc = wire.CRC(data)
	}
	if err := f.CheckEpilogue(epi, front, dcrc, summed); err != nil {
		buf.Release()
		return nil, err
	}
	f.Front, f.Data, f.Buf = front, data, buf
	return nil, nil
}
