//go:build rdma

package rdma

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/ospreystore/osprey/msgr/wire"
)

// The write rendezvous's control frames come from the peer, so every bad one
// must end the link with a clear error and touch nothing: these tests feed
// them to a link that is not connected, with one transfer in flight (slot
// 3, rendezvous 7) and no payload of ours outstanding.

var controlLimits = wire.Limits{MaxFront: 1 << 20, MaxData: 64 << 20}

func controlLink(agreed bool) *link {
	l := &link{d: &domain{}, rdvWrite: agreed, lim: controlLimits}
	for i := range maxReads {
		if i != 3 {
			l.freeReads = append(l.freeReads, uint32(i))
		}
	}
	l.readSlots[3] = &pendingRead{id: 7}
	l.readsOut = 1
	l.d.transfers.Store(1)
	return l
}

// takeControl hands a received frame b to the link's control path, as
// frameFrom does; nil means it was taken. No payload of ours is
// outstanding, so an RDV_READY that passes the frame checks is refused by
// writePayload before anything is posted.
func takeControl(l *link, b []byte) error {
	var f wire.Frame
	if err := f.Preamble.Parse(b, l.lim); err != nil {
		return err
	}
	if !f.Tag.LinkOnly() {
		return errors.New("not a control frame")
	}
	buf := wire.NewExternalBuffer(b, func(*wire.Buffer) {})
	if err := l.control(&f, buf, b); err != errConsumed {
		return err
	}
	return nil
}

// inFlight reports whether the link's one transfer is untouched.
func inFlight(l *link) bool {
	return l.readSlots[3] != nil && l.readsOut == 1 && l.d.transfers.Load() == 1 && len(l.freeReads) == maxReads-1
}

func controlFrame(tag wire.Tag, seq uint64, desc []byte) []byte {
	p := wire.Preamble{Tag: tag, Seq: seq, DataLen: uint32(len(desc))}
	b := make([]byte, p.WireSize())
	p.Put(b)
	if len(desc) > 0 {
		copy(b[wire.PreambleSize:], desc)
		wire.PutEpilogue(b[len(b)-wire.EpilogueSize:], 0, wire.CRC(desc))
	}
	return b
}

func TestControlFramesRejected(t *testing.T) {
	var desc [rdvDescSize]byte
	rdvDesc{addr: 4096, n: 100, key: 9}.put(desc[:])
	badCRC := controlFrame(wire.TagRdvReady, 0, desc[:])
	badCRC[len(badCRC)-1] ^= 1
	short := controlFrame(wire.TagRdvReady, 0, desc[:10])
	tests := []struct {
		name   string
		agreed bool
		b      []byte
		want   error
	}{
		{"RDV_READY not agreed", false, controlFrame(wire.TagRdvReady, 0, desc[:]), wire.ErrProtocol},
		{"RDV_DONE not agreed", false, controlFrame(wire.TagRdvDone, 3<<32|7, nil), wire.ErrProtocol},
		{"RDV_READY for nothing outstanding", true, controlFrame(wire.TagRdvReady, 0, desc[:]), wire.ErrProtocol},
		{"RDV_READY with a short descriptor", true, short, wire.ErrMalformed},
		{"RDV_READY with a bad data crc", true, badCRC, wire.ErrCRC},
		{"RDV_READY cut short", true, controlFrame(wire.TagRdvReady, 0, desc[:])[:60], wire.ErrMalformed},
		{"RDV_DONE for a free slot", true, controlFrame(wire.TagRdvDone, 2<<32|7, nil), wire.ErrProtocol},
		{"RDV_DONE for another rendezvous", true, controlFrame(wire.TagRdvDone, 3<<32|8, nil), wire.ErrProtocol},
		{"RDV_DONE for a slot past the last", true, controlFrame(wire.TagRdvDone, maxReads<<32|7, nil), wire.ErrProtocol},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := controlLink(tc.agreed)
			if err := takeControl(l, tc.b); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !inFlight(l) {
				t.Fatal("a refused frame changed the transfer in flight")
			}
		})
	}
}

func TestControlFrameDone(t *testing.T) {
	l := controlLink(true)
	if err := takeControl(l, controlFrame(wire.TagRdvDone, 3<<32|7, nil)); err != nil {
		t.Fatal(err)
	}
	if l.readSlots[3] != nil || l.readsOut != 0 || l.d.transfers.Load() != 0 || len(l.freeReads) != maxReads {
		t.Fatalf("RDV_DONE did not end the transfer: slot 3 %v, %d out, %d transfers, %d free slots",
			l.readSlots[3], l.readsOut, l.d.transfers.Load(), len(l.freeReads))
	}
	// The same RDV_DONE again names a transfer no longer in flight.
	if err := takeControl(l, controlFrame(wire.TagRdvDone, 3<<32|7, nil)); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("a repeated RDV_DONE: got %v, want a protocol error", err)
	}
}

// FuzzControlFrame feeds arbitrary received frames to a link that agreed
// the write rendezvous: none may panic, and none but the one RDV_DONE that
// names the transfer in flight may change the transfers.
func FuzzControlFrame(f *testing.F) {
	var desc [rdvDescSize]byte
	rdvDesc{addr: 1 << 40, n: 1 << 20, key: 3}.put(desc[:])
	f.Add(controlFrame(wire.TagRdvReady, 5<<32|1, desc[:]))
	f.Add(controlFrame(wire.TagRdvDone, 3<<32|7, nil))
	f.Add(controlFrame(wire.TagRdvDone, 1<<63, nil))
	f.Add([]byte{13})
	f.Fuzz(func(t *testing.T, b []byte) {
		l := controlLink(true)
		err := takeControl(l, b)
		if err == nil {
			if l.readsOut != 0 || l.d.transfers.Load() != 0 {
				t.Fatal("an RDV_DONE was taken but the transfer did not end")
			}
			return
		}
		if !inFlight(l) {
			t.Fatalf("refused (%v) but the transfer in flight changed", err)
		}
	})
}

// FuzzParseCM feeds arbitrary connection data to the parser every
// connection request and accept goes through: it may refuse, never panic,
// and what it accepts names receive buffers a rendezvous frame fits in.
func FuzzParseCM(f *testing.F) {
	mine := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}
	for _, flags := range []uint32{0, cmFlagSRX, cmFlagWrite, cmFlagSmall, cmFlagSRX | cmFlagWrite, 0xffffffff} {
		l := &link{nrecv: 16, bufSize: 16 << 10, tag: 5<<32 | 3, srx: flags&cmFlagSRX != 0, small: flags&cmFlagSmall != 0}
		if flags&cmFlagWrite != 0 {
			l.ctlRecv = ctlRecvs
		}
		f.Add(cmData(mine, l))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		cm, err := parseCM(mine, data)
		if err != nil {
			var we *wire.Error
			if !errors.As(err, &we) {
				t.Fatalf("refused with an untyped error: %v", err)
			}
			return
		}
		if minBuf := wire.PreambleSize + rdvDescSize + wire.EpilogueSize; cm.peerBuf < minBuf {
			t.Fatalf("accepted receive buffers of %d bytes, below %d", cm.peerBuf, minBuf)
		}
		if cm.features&^mine.Supported != 0 {
			t.Fatalf("agreed features %#x we do not support", cm.features)
		}
	})
}

// TestParseCMRoundTrip: what cmData writes, parseCM reads back.
func TestParseCMRoundTrip(t *testing.T) {
	mine := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}
	l := &link{nrecv: 16, bufSize: 32 << 10, tag: 7<<32 | 9, srx: true, ctlRecv: ctlRecvs, small: true}
	cm, err := parseCM(mine, cmData(mine, l))
	if err != nil {
		t.Fatal(err)
	}
	if cm.peerRecvs != 16 || cm.peerBuf != 32<<10 || cm.peerTag != 7<<32|9 || !cm.peerSRX || !cm.peerWrite || !cm.peerSmall {
		t.Fatalf("round trip: %+v", cm)
	}
	l.srx, l.ctlRecv, l.small = false, 0, false
	if cm, err = parseCM(mine, cmData(mine, l)); err != nil || cm.peerSRX || cm.peerWrite || cm.peerSmall {
		t.Fatalf("without the flags: %+v, %v", cm, err)
	}
}

// rdvFrame is a rendezvous MESSAGE frame: its front inline, or with
// moved, the front's length after the descriptor and no front inline.
func rdvFrame(front []byte, src rdvDesc, moved bool) []byte {
	p := wire.Preamble{Tag: wire.TagMessage, Flags: wire.FlagRendezvous, FrontLen: uint32(len(front)), DataLen: rdvDescSize}
	if moved {
		p.Flags |= wire.FlagRendezvousFront
		p.FrontLen, p.DataLen = 0, rdvFrontDescSize
	}
	b := make([]byte, p.WireSize())
	p.Put(b)
	d := b[wire.PreambleSize+int(p.FrontLen):]
	if !moved {
		copy(b[wire.PreambleSize:], front)
	}
	src.put(d)
	if moved {
		binary.LittleEndian.PutUint32(d[rdvDescSize:], uint32(len(front)))
	}
	return b
}

// FuzzRendezvousFrame feeds arbitrary received frames to the rendezvous
// path of a link with every transfer slot busy, so that one it takes
// waits (startTransfer would need a domain): none may panic, and what it
// takes names a payload and front within the link's limits, whose
// transfer moves the data and, when the front comes with it, the front.
func FuzzRendezvousFrame(f *testing.F) {
	src := rdvDesc{addr: 1 << 40, n: 1 << 20, key: 3}
	f.Add(rdvFrame([]byte("front"), src, false))
	f.Add(rdvFrame(make([]byte, 100<<10), src, true))
	f.Add(rdvFrame(make([]byte, 2<<20), src, true)) // a front longer than the payload
	f.Fuzz(func(t *testing.T, b []byte) {
		l := &link{d: &domain{}, lim: controlLimits, features: wire.KnownFeatures}
		var fr wire.Frame
		if fr.Preamble.Parse(b, l.lim) != nil || fr.Preamble.CheckAgreed(l.features, true) != nil || fr.Flags&wire.FlagRendezvous == 0 || fr.Tag.LinkOnly() {
			return
		}
		buf := wire.NewExternalBuffer(b, func(*wire.Buffer) {})
		p, err := l.rendezvous(&fr, buf, b)
		if err != nil {
			return
		}
		moved := fr.Flags&wire.FlagRendezvousFront != 0
		if !p.waiting || p.size < 0 || p.frontLen < 0 || uint64(p.size+p.frontLen) > l.lim.MessageLimit(fr.Tag) ||
			uint64(p.frontLen) > l.lim.FrontLimit(fr.Tag) || moved != p.frontMoved ||
			moved && (p.frontLen == 0 || p.xfer != p.size+p.frontLen) || !moved && p.xfer != p.size {
			t.Fatalf("took a rendezvous of %d bytes of data and a %d-byte front (moved %v), moving %d, waiting %v", p.size, p.frontLen, moved, p.xfer, p.waiting)
		}
	})
}
