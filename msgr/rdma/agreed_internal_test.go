//go:build rdma

package rdma

import (
	"errors"
	"testing"

	"github.com/ospreystore/osprey/msgr/wire"
)

// agreedLink is a link that is not connected, with one received frame b
// in its receive buffer 0 and the features agreed. No transfer slot is
// free, so a rendezvous frame it takes waits, touching no domain.
func agreedLink(agreed uint64, b []byte) (*link, rxEvent) {
	l := &link{d: &domain{}, lim: controlLimits, steady: controlLimits, features: agreed}
	l.recvBufs = []*wire.Buffer{wire.NewExternalBuffer(b, func(*wire.Buffer) {})}
	return l, rxEvent{n: len(b)}
}

// encodeFrame is p with front and data as a peer sends it, with a data CRC.
func encodeFrame(p wire.Preamble, front, data []byte) []byte {
	p.FrontLen, p.DataLen = uint32(len(front)), uint32(len(data))
	b := make([]byte, p.WireSize())
	p.Put(b)
	copy(b[wire.PreambleSize+copy(b[wire.PreambleSize:], front):], data)
	wire.PutEpilogue(b[len(b)-wire.EpilogueSize:], wire.CRC(front), wire.CRC(data))
	return b
}

// TestReceivedFramesNeedAgreedFeatures: the RDMA receiver refuses, as a
// stream link does, a frame without data CRC unless NO_DATA_CRC was
// agreed, one with a source's data CRC unless SOURCE_CRC was, and a
// rendezvous frame (or the write rendezvous's control
// frames) unless RENDEZVOUS was; agreed, it takes them. The link word is
// the transport's own: any value passes.
func TestReceivedFramesNeedAgreedFeatures(t *testing.T) {
	var desc [rdvDescSize]byte
	rdvDesc{addr: 4096, n: 1 << 20, key: 9}.put(desc[:])
	noCRC := encodeFrame(wire.Preamble{Tag: wire.TagMessage, Seq: 1, LinkWord: 5, Flags: wire.FlagNoDataCRC}, []byte("f"), []byte("data"))
	rdv := encodeFrame(wire.Preamble{Tag: wire.TagMessage, Seq: 1, Flags: wire.FlagRendezvous}, []byte("f"), desc[:])
	ready := encodeFrame(wire.Preamble{Tag: wire.TagRdvReady}, nil, desc[:])
	source := encodeFrame(wire.Preamble{Tag: wire.TagMessage, Seq: 1, Flags: wire.FlagSourceCRC}, []byte("f"), []byte("data"))
	for _, tc := range []struct {
		name   string
		agreed uint64
		b      []byte
		want   error // nil: taken
	}{
		{"no data crc, not agreed", wire.FeatureRendezvous, noCRC, wire.ErrProtocol},
		{"no data crc, agreed", wire.FeatureNoDataCRC, noCRC, nil},
		{"rendezvous, not agreed", wire.FeatureNoDataCRC, rdv, wire.ErrProtocol},
		{"rendezvous, agreed", wire.FeatureRendezvous, rdv, nil},
		{"RDV_READY, not agreed", wire.FeatureNoDataCRC, ready, wire.ErrProtocol},
		{"source crc, not agreed", wire.KnownFeatures &^ wire.FeatureSourceCRC, source, wire.ErrProtocol},
		{"source crc, agreed", wire.FeatureSourceCRC, source, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, ev := agreedLink(tc.agreed, tc.b)
			var f wire.Frame
			_, err := l.frameFrom(ev, &f)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestWriteRendezvousNeedsAgreement: a link uses the write rendezvous only
// when both sides offer it and RENDEZVOUS was agreed.
func TestWriteRendezvousNeedsAgreement(t *testing.T) {
	for _, tc := range []struct {
		agreed uint64
		want   bool
	}{{wire.KnownFeatures, true}, {wire.FeatureNoDataCRC, false}} {
		l := &link{ctlRecv: ctlRecvs, bufSize: 16 << 10}
		l.setPeer(cmInfo{features: tc.agreed, peerWrite: true, peerBuf: 16 << 10})
		if l.rdvWrite != tc.want {
			t.Errorf("agreed %#x: write rendezvous %v, want %v", tc.agreed, l.rdvWrite, tc.want)
		}
	}
}
