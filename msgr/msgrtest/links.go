package msgrtest

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// RunLinks runs the link-level checks against tr, listening on host: what
// the core relies on every transport's receiver to refuse, and how, so
// that a peer cannot get past one transport what another refuses. Each
// check writes frames on a fresh link and reads them on the other end.
func RunLinks(t *testing.T, tr wire.Transport, host string) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, tr wire.Transport, host string)
	}{
		{"MessageSizeBoundsFrontPlusData", linkMessageSize},
		{"FeaturesPerTransport", linkFeatures},
		{"NoDataCRCNeedsAgreement", linkNoDataCRC},
		{"SourceCRC", linkSourceCRC},
		{"SourceCRCNeedsAgreement", linkSourceCRCAgreement},
		{"RendezvousNeedsAgreement", linkRendezvous},
		{"StreamFramesOnly", linkStreamFramesOnly},
		{"AcceptedLinkNamesItsPeer", linkRemoteAddr},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, tr, host) })
	}
}

// linkBanner is the banner of the links RunLinks opens, with features.
func linkBanner(features uint64) wire.Banner {
	return wire.Banner{Version: wire.Version, Supported: features}
}

// linkPair opens a link to a listener of tr with recv's options: the
// dialed end writes, the accepted end reads what the test reads.
func linkPair(t *testing.T, tr wire.Transport, host string, send, recv wire.LinkOptions) (w, r wire.Link) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := tr.Listen(ctx, host, recv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan wire.Link, 1)
	go func() {
		a, err := ln.Accept(ctx)
		if err != nil {
			t.Errorf("accept: %v", err)
		}
		accepted <- a
	}()
	w, err = tr.Dial(ctx, ln.Addr(), send)
	if err != nil {
		<-accepted
		t.Fatal(err)
	}
	// The writing end reads too, as the messenger's links do: an RDMA
	// link takes its peer's rendezvous control frames in ReadFrame.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			var f wire.Frame
			if w.ReadFrame(&f) != nil {
				return
			}
			f.Release()
		}
	}()
	t.Cleanup(func() { w.Close(); <-drained })
	if r = <-accepted; r == nil {
		t.FailNow()
	}
	t.Cleanup(func() { r.Close() })
	return w, r
}

// readOne reads a frame from r, failing the test if none comes in 10 s.
func readOne(t *testing.T, r wire.Link) (wire.Frame, error) {
	t.Helper()
	type read struct {
		f   wire.Frame
		err error
	}
	got := make(chan read, 1)
	go func() {
		var f wire.Frame
		err := r.ReadFrame(&f)
		got <- read{f, err}
	}()
	select {
	case g := <-got:
		return g.f, g.err
	case <-time.After(10 * time.Second):
		r.Close()
		t.Fatal("no frame and no error in 10 s")
		return wire.Frame{}, nil
	}
}

// linkMessageSize: MaxData, the max_message a side announces, bounds a
// MESSAGE's front and data together, inline and (RDMA) by rendezvous; one
// byte more is refused as too large.
func linkMessageSize(t *testing.T, tr wire.Transport, host string) {
	const front = 1 << 10
	for _, maxData := range []uint32{2 << 10, 64 << 10} {
		recv := wire.LinkOptions{Banner: linkBanner(wire.KnownFeatures), RecvWindow: 8,
			Limits: wire.Limits{MaxFront: 4 << 10, MaxData: maxData}}
		send := recv
		send.Limits.MaxData = 1 << 20
		for _, extra := range []int{0, 1} {
			w, r := linkPair(t, tr, host, send, recv)
			in := wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 1},
				Front: bytes.Repeat([]byte{1}, front), Data: bytes.Repeat([]byte{2}, int(maxData)-front+extra)}
			if err := w.WriteFrames([]wire.Frame{in}); err != nil {
				t.Fatal(err)
			}
			f, err := readOne(t, r)
			if extra == 0 {
				if err != nil {
					t.Fatalf("%d bytes in all, at the limit: %v", maxData, err)
				}
				if !bytes.Equal(f.Front, in.Front) || !bytes.Equal(f.Data, in.Data) {
					t.Fatalf("%d bytes in all: the frame came out changed", maxData)
				}
				f.Release()
				continue
			}
			if !errors.Is(err, wire.ErrTooLarge) {
				t.Fatalf("%d bytes in all, limit %d: got %v, want a too-large error", int(maxData)+1, maxData, err)
			}
		}
	}
}

// rdmaLink reports whether tr's links are RDMA links, which carry
// rendezvous frames and own the link word.
func rdmaLink(tr wire.Transport) bool { return strings.HasPrefix(tr.Scheme(), "rdma+") }

// simpleOpts are the options of a link offering features, within the
// limits of every check here.
func simpleOpts(features uint64) wire.LinkOptions {
	return wire.LinkOptions{Banner: linkBanner(features), RecvWindow: 8, Limits: wire.Limits{MaxFront: 4 << 10, MaxData: 1 << 20}}
}

// linkFeatures: both ends offering every feature, a link agrees on those
// its transport uses: RENDEZVOUS only on RDMA, which alone moves payloads
// by rendezvous.
func linkFeatures(t *testing.T, tr wire.Transport, host string) {
	want := wire.KnownFeatures &^ (wire.FeatureRendezvous | wire.FeatureRendezvousFront)
	if rdmaLink(tr) {
		want = wire.KnownFeatures
	}
	w, r := linkPair(t, tr, host, simpleOpts(wire.KnownFeatures), simpleOpts(wire.KnownFeatures))
	if w.Features() != want || r.Features() != want {
		t.Fatalf("agreed %#x and %#x, want %#x", w.Features(), r.Features(), want)
	}
}

// linkNoDataCRC: a frame without data CRC is refused as a protocol error
// unless NO_DATA_CRC was agreed, and taken if it was.
func linkNoDataCRC(t *testing.T, tr wire.Transport, host string) {
	for _, agreed := range []bool{false, true} {
		var features uint64
		if agreed {
			features = wire.FeatureNoDataCRC
		}
		w, r := linkPair(t, tr, host, simpleOpts(features), simpleOpts(features))
		in := wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 1, Flags: wire.FlagNoDataCRC}, Data: []byte("data")}
		if err := w.WriteFrames([]wire.Frame{in}); err != nil {
			t.Fatal(err)
		}
		f, err := readOne(t, r)
		switch {
		case agreed && err != nil:
			t.Fatalf("NO_DATA_CRC agreed: %v", err)
		case agreed:
			f.Release()
		case !errors.Is(err, wire.ErrProtocol):
			t.Fatalf("NO_DATA_CRC not agreed: got %v, want a protocol error", err)
		}
	}
}

// sourceCRCSizes are the data sizes the source-CRC checks send: one
// inline, one that needs a rendezvous on RDMA (as linkRendezvous's).
var sourceCRCSizes = []int{100, 256 << 10}

// sourceCRCFrame is a MESSAGE whose data CRC is its source's claim, the
// CRC of data or, if wrong, not.
func sourceCRCFrame(seq uint64, data []byte, wrong bool) wire.Frame {
	claim := wire.CRC(data)
	if wrong {
		claim ^= 0x5a
	}
	return wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: seq}, Front: []byte("front"), Data: data,
		DataCRC: claim, HasDataCRC: true, SourceCRC: true}
}

// sendOne writes in on w and reads it from r.
func sendOne(t *testing.T, w, r wire.Link, in wire.Frame) (wire.Frame, error) {
	t.Helper()
	if err := w.WriteFrames([]wire.Frame{in}); err != nil {
		t.Fatal(err)
	}
	return readOne(t, r)
}

// linkSourceCRC: a frame whose data CRC is its source's claim
// (Frame.SourceCRC) reaches a peer that agreed SOURCE_CRC whether the
// claim holds or not, as FLAG_SOURCE_CRC, with the CRC of the data as it
// arrived and SourceCRCMismatch saying whether they differed; the link
// reads on after a mismatch. Inline and, on RDMA, by rendezvous.
func linkSourceCRC(t *testing.T, tr wire.Transport, host string) {
	opts := simpleOpts(wire.KnownFeatures)
	w, r := linkPair(t, tr, host, opts, opts)
	if r.Features()&wire.FeatureSourceCRC == 0 {
		t.Fatalf("agreed %#x, without SOURCE_CRC", r.Features())
	}
	seq := uint64(0)
	for _, size := range sourceCRCSizes {
		data := bytes.Repeat([]byte("source"), size/6+1)[:size]
		for _, wrong := range []bool{true, false} {
			seq++
			f, err := sendOne(t, w, r, sourceCRCFrame(seq, data, wrong))
			if err != nil {
				t.Fatalf("%d bytes, claim wrong %v: %v", size, wrong, err)
			}
			ok := f.Seq == seq && f.Flags&wire.FlagSourceCRC != 0 && f.HasDataCRC && f.DataCRC == wire.CRC(data) &&
				f.SourceCRCMismatch == wrong && bytes.Equal(f.Data, data)
			if !ok {
				t.Fatalf("%d bytes, claim wrong %v: seq %d, flags %#x, data crc %08x %v (want %08x), mismatch %v",
					size, wrong, f.Seq, f.Flags, f.DataCRC, f.HasDataCRC, wire.CRC(data), f.SourceCRCMismatch)
			}
			f.Release()
		}
	}
}

// linkSourceCRCAgreement: to a peer that did not agree SOURCE_CRC a
// source's claim goes as a CRC the sender computes, in a plain frame, so
// a wrong claim does not make the peer refuse the data as corrupt; and a
// frame with FLAG_SOURCE_CRC is refused there as a protocol error.
func linkSourceCRCAgreement(t *testing.T, tr wire.Transport, host string) {
	recv := simpleOpts(wire.KnownFeatures &^ wire.FeatureSourceCRC)
	w, r := linkPair(t, tr, host, simpleOpts(wire.KnownFeatures), recv)
	for i, size := range sourceCRCSizes {
		data := bytes.Repeat([]byte{7}, size)
		f, err := sendOne(t, w, r, sourceCRCFrame(uint64(i+1), data, true))
		if err != nil {
			t.Fatalf("%d bytes with a wrong source crc, SOURCE_CRC not agreed: %v", size, err)
		}
		if f.Flags&wire.FlagSourceCRC != 0 || f.SourceCRCMismatch || !f.HasDataCRC || f.DataCRC != wire.CRC(data) {
			t.Fatalf("%d bytes, SOURCE_CRC not agreed: flags %#x, mismatch %v, data crc %08x %v",
				size, f.Flags, f.SourceCRCMismatch, f.DataCRC, f.HasDataCRC)
		}
		f.Release()
	}
	in := wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 3, Flags: wire.FlagSourceCRC}, Data: []byte("data")}
	if _, err := sendOne(t, w, r, in); !errors.Is(err, wire.ErrProtocol) {
		t.Fatalf("FLAG_SOURCE_CRC, not agreed: got %v, want a protocol error", err)
	}
}

// linkRendezvous: without RENDEZVOUS agreed, an RDMA link refuses to
// write a frame that does not fit the peer's receive buffers (it would
// need a rendezvous), as too large; other links carry it as any frame.
func linkRendezvous(t *testing.T, tr wire.Transport, host string) {
	opts := simpleOpts(wire.FeatureNoDataCRC)
	w, r := linkPair(t, tr, host, opts, opts)
	in := wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 1}, Data: bytes.Repeat([]byte{3}, 256<<10)}
	err := w.WriteFrames([]wire.Frame{in})
	if rdmaLink(tr) {
		if !errors.Is(err, wire.ErrTooLarge) {
			t.Fatalf("a frame that needs a rendezvous, not agreed: got %v, want a too-large error", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := readOne(t, r)
	if err != nil {
		t.Fatal(err)
	}
	f.Release()
}

// linkStreamFramesOnly: a link that is not RDMA refuses a rendezvous flag
// and the RDMA link's own frames (PROTOCOL) and a non-zero link word
// (MALFORMED), whatever the banners agreed. Only what the transport's
// writer lets through is tried: a stream link writes the link word as 0.
func linkStreamFramesOnly(t *testing.T, tr wire.Transport, host string) {
	if rdmaLink(tr) {
		t.Skip("an RDMA link carries these")
	}
	for _, tc := range []struct {
		f    wire.Frame
		want error
	}{
		{wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 1, Flags: wire.FlagRendezvous}, Data: make([]byte, 20)}, wire.ErrProtocol},
		{wire.Frame{Preamble: wire.Preamble{Tag: wire.TagRdvDone}}, wire.ErrProtocol},
		{wire.Frame{Preamble: wire.Preamble{Tag: wire.TagAck, LinkWord: 7}}, wire.ErrMalformed},
	} {
		w, r := linkPair(t, tr, host, simpleOpts(wire.KnownFeatures), simpleOpts(wire.KnownFeatures))
		if err := w.WriteFrames([]wire.Frame{tc.f}); err != nil {
			t.Fatal(err)
		}
		f, err := readOne(t, r)
		if tc.f.LinkWord != 0 && err == nil && f.LinkWord == 0 {
			f.Release()
			continue // the writer cleared it, as a stream link's does
		}
		if !errors.Is(err, tc.want) {
			t.Fatalf("%v frame, flags %#x, link word %d: got %v, want %v", tc.f.Tag, tc.f.Flags, tc.f.LinkWord, err, tc.want)
		}
	}
}

// linkRemoteAddr: an accepted link names its peer (Conn.Addr and fault
// logs show it), as host:port on a transport of IP addresses.
func linkRemoteAddr(t *testing.T, tr wire.Transport, host string) {
	_, r := linkPair(t, tr, host, simpleOpts(wire.KnownFeatures), simpleOpts(wire.KnownFeatures))
	got := r.RemoteAddr()
	if got == "" {
		t.Fatal("the accepted link has no remote address")
	}
	if _, err := netip.ParseAddrPort(host); err != nil {
		return // mem: a name
	}
	if ap, err := netip.ParseAddrPort(got); err != nil || ap.Port() == 0 {
		t.Fatalf("remote address %q: %v", got, err)
	}
}
