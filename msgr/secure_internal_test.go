package msgr

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/wire"
)

// queueLink is a wire.Link in memory, for one goroutine: what is written
// is copied into pooled buffers, as a transport would receive it, and
// read back in order. As the transports place a received frame, its data
// starts its buffer (aligned), its front after it.
type queueLink struct {
	q []wire.Frame
}

func (l *queueLink) WriteFrames(frames []wire.Frame) error {
	for i := range frames {
		f := &frames[i]
		buf := wire.GetBuffer(len(f.Front) + len(f.Data))
		copy(buf.B, f.Data)
		copy(buf.B[len(f.Data):], f.Front)
		p := f.Preamble
		p.FrontLen, p.DataLen = uint32(len(f.Front)), uint32(len(f.Data))
		l.q = append(l.q, wire.Frame{Preamble: p, Data: buf.B[:len(f.Data)], Front: buf.B[len(f.Data):], Buf: buf})
	}
	return nil
}

func (l *queueLink) ReadFrame(f *wire.Frame) error {
	if len(l.q) == 0 {
		return errors.New("queueLink: empty")
	}
	*f = l.q[0]
	l.q = slices.Delete(l.q, 0, 1)
	return nil
}

func (l *queueLink) Features() uint64   { return 0 }
func (l *queueLink) LocalAddr() string  { return "a" }
func (l *queueLink) RemoteAddr() string { return "b" }
func (l *queueLink) Close() error       { return nil }

var testLimits = wire.Limits{MaxFront: 64 << 10, MaxData: 4 << 20}

// sealedPair is a sealed link writing to a queue and one reading from it,
// with the keys of the two ends of one link.
func sealedPair(t testing.TB) (w, r *sealedLink, q *queueLink) {
	t.Helper()
	return sealedPairLimits(t, testLimits)
}

// sealedPairLimits is sealedPair with the session's limits lim.
func sealedPairLimits(t testing.TB, lim wire.Limits) (w, r *sealedLink, q *queueLink) {
	t.Helper()
	q = &queueLink{}
	k := &linkKeys{tx: bytes.Repeat([]byte{1}, auth.DirectionKeyLen), rx: bytes.Repeat([]byte{2}, auth.DirectionKeyLen)}
	w, err := newSealedLink(q, k, lim)
	if err != nil {
		t.Fatal(err)
	}
	r, err = newSealedLink(q, &linkKeys{tx: k.rx, rx: k.tx}, lim)
	if err != nil {
		t.Fatal(err)
	}
	w.EndHandshake()
	r.EndHandshake()
	t.Cleanup(func() { w.Close(); r.Close() })
	return w, r, q
}

// roundTrip seals f through w and opens it with r.
func roundTrip(t testing.TB, w, r *sealedLink, f wire.Frame) wire.Frame {
	if err := w.WriteFrames([]wire.Frame{f}); err != nil {
		t.Fatal(err)
	}
	var got wire.Frame
	if err := r.ReadFrame(&got); err != nil {
		t.Fatal(err)
	}
	return got
}

func release(f wire.Frame) { f.Release() }

// TestSealedLinkRoundTrip: a frame comes out as it went in, its data
// first in the sealed buffer (so where the link placed it), and what a
// transport moved is SEALED, not the frame.
func TestSealedLinkRoundTrip(t *testing.T) {
	w, r, q := sealedPair(t)
	in := wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Type: 7, Seq: 3, Ack: 2, GrantMsgs: 9, GrantBytes: 1 << 33, Tid: 42},
		Front: []byte("front"), Data: bytes.Repeat([]byte("data"), 1000)}
	if err := w.WriteFrames([]wire.Frame{in}); err != nil {
		t.Fatal(err)
	}
	if q.q[0].Tag != wire.TagSealed || bytes.Contains(q.q[0].Data, []byte("datadata")) {
		t.Fatalf("the link moved a %v frame holding the plaintext", q.q[0].Tag)
	}
	var got wire.Frame
	if err := r.ReadFrame(&got); err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	in.FrontLen, in.DataLen = uint32(len(in.Front)), uint32(len(in.Data))
	if got.Preamble != in.Preamble || !bytes.Equal(got.Front, in.Front) || !bytes.Equal(got.Data, in.Data) {
		t.Fatalf("got %+v, want %+v", got.Preamble, in.Preamble)
	}
	if &got.Data[0] != &got.Buf.B[0] {
		t.Fatal("the data does not start the sealed buffer")
	}
}

// TestSealedLinkRefuses: a frame altered, replayed, out of order or in
// clear is refused, and one refused leaves the link refusing.
func TestSealedLinkRefuses(t *testing.T) {
	msg := wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage}, Data: []byte("payload")}
	t.Run("altered", func(t *testing.T) {
		w, r, q := sealedPair(t)
		w.WriteFrames([]wire.Frame{msg})
		q.q[0].Data[3] ^= 1
		var f wire.Frame
		if err := r.ReadFrame(&f); !errors.Is(err, auth.ErrOpen) {
			t.Fatalf("altered frame: %v", err)
		}
		w.WriteFrames([]wire.Frame{msg})
		if err := r.ReadFrame(&f); !errors.Is(err, auth.ErrOpen) {
			t.Fatalf("the frame after a refused one: %v", err)
		}
	})
	t.Run("replayed", func(t *testing.T) {
		w, r, q := sealedPair(t)
		w.WriteFrames([]wire.Frame{msg})
		dup := q.q[0]
		dup.Buf.Ref()
		got := roundTrip(t, w, r, msg) // reads the first, then writes and reads a second
		got.Release()
		q.q = append([]wire.Frame{dup}, q.q...)
		var f wire.Frame
		if err := r.ReadFrame(&f); !errors.Is(err, auth.ErrOpen) {
			t.Fatalf("replayed frame: %v", err)
		}
	})
	t.Run("reordered", func(t *testing.T) {
		w, r, q := sealedPair(t)
		w.WriteFrames([]wire.Frame{msg, msg})
		q.q[0], q.q[1] = q.q[1], q.q[0]
		var f wire.Frame
		if err := r.ReadFrame(&f); !errors.Is(err, auth.ErrOpen) {
			t.Fatalf("reordered frame: %v", err)
		}
	})
	t.Run("clear", func(t *testing.T) {
		_, r, q := sealedPair(t)
		q.WriteFrames([]wire.Frame{msg})
		var f wire.Frame
		if err := r.ReadFrame(&f); !errors.Is(err, wire.ErrProtocol) {
			t.Fatalf("a frame in clear: %v", err)
		}
	})
}

// TestSealedLinkAllocatesNothing: in steady state a message sealed,
// moved and opened costs no allocation (the sealed buffers are pooled,
// the batch slices kept).
func TestSealedLinkAllocatesNothing(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector allocates")
	}
	for _, size := range []int{64, sealSplitMinData, 1 << 20} {
		w, r, _ := sealedPair(t)
		msg := wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage}, Front: make([]byte, 16), Data: make([]byte, size)}
		release(roundTrip(t, w, r, msg))
		if n := testing.AllocsPerRun(50, func() { release(roundTrip(t, w, r, msg)) }); n > 0 {
			t.Errorf("%d-byte message: %v allocations per message, want 0", size, n)
		}
	}
}

func BenchmarkSealedLink(b *testing.B) {
	for _, size := range []int{64, 1 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			w, r, _ := sealedPair(b)
			msg := wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage}, Front: make([]byte, 16), Data: make([]byte, size)}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				release(roundTrip(b, w, r, msg))
			}
		})
	}
}

// FuzzSealedFrame: whatever an authenticated peer seals (plain, and in
// a two-part frame data, the data part, in records when records: data
// after sealRecordMinData zero bytes), and whatever arrives where a
// sealed frame should (raw), the sealed link returns a frame or an
// error, never panics, and what it returns lies within its limits.
func FuzzSealedFrame(f *testing.F) {
	var p [wire.PreambleSize]byte
	(&wire.Preamble{Tag: wire.TagMessage, FrontLen: 2, DataLen: 3}).Put(p[:])
	f.Add(append([]byte("dddff"), p[:]...), []byte(nil), false, false, false, false)
	(&wire.Preamble{Tag: wire.TagMessage, FrontLen: 2, DataLen: 3}).Put(p[:])
	f.Add(append([]byte("ff"), p[:]...), []byte("ddd"), false, false, true, false)
	f.Add(append([]byte("ff"), p[:]...), []byte("dddd"), false, false, true, false)
	(&wire.Preamble{Tag: wire.TagMessage, FrontLen: 2, DataLen: sealRecordMinData + 3}).Put(p[:])
	f.Add(append([]byte("ff"), p[:]...), []byte("ddd"), false, false, true, true)
	f.Add(append([]byte("ff"), p[:]...), []byte("dddd"), false, false, true, true)
	f.Add(append([]byte("ff"), p[:]...), []byte("ddd"), false, true, true, true)
	(&wire.Preamble{Tag: wire.TagMessage, FrontLen: 2, DataLen: sealRecordMinData + sealRecordSize}).Put(p[:])
	f.Add(append([]byte("ff"), p[:]...), make([]byte, sealRecordSize), false, false, true, true)
	(&wire.Preamble{Tag: wire.TagMessage}).Put(p[:])
	f.Add(p[:], []byte{}, false, false, true, false)
	// A source CRC has no place inside a sealed frame, which has none.
	(&wire.Preamble{Tag: wire.TagMessage, Flags: wire.FlagSourceCRC, FrontLen: 2, DataLen: 3}).Put(p[:])
	f.Add(append([]byte("dddff"), p[:]...), []byte(nil), false, false, false, false)
	(&wire.Preamble{Tag: wire.TagSessionReq, FrontLen: 4}).Put(p[:])
	f.Add(append([]byte("sreq"), p[:]...), []byte(nil), true, false, false, false)
	f.Add(append([]byte("sreq"), p[:]...), []byte("data"), true, false, true, false)
	(&wire.Preamble{Tag: wire.TagKeepalive}).Put(p[:])
	f.Add(p[:], []byte(nil), false, false, false, false)
	(&wire.Preamble{Tag: wire.TagRdvDone}).Put(p[:])
	f.Add(p[:], []byte(nil), false, false, false, false)
	f.Add([]byte("not sealed at all"), []byte(nil), false, true, false, false)
	f.Add(make([]byte, 100), []byte("not sealed either"), false, true, true, false)
	f.Add(make([]byte, 100), []byte(nil), true, true, false, false)
	f.Fuzz(func(t *testing.T, plain, data []byte, handshake, raw, split, records bool) {
		w, r, q := sealedPair(t)
		if handshake {
			r.lim = sealedHandshakeLimits
		}
		seal := func(b, additional []byte) []byte {
			if raw {
				return b
			}
			sealed, err := w.seal.Seal(nil, b, additional)
			if err != nil {
				t.Fatal(err)
			}
			return sealed
		}
		if records {
			data = append(make([]byte, sealRecordMinData), data...)
		}
		// sealRecords seals data as records, as the writer does.
		sealRecords := func() []byte {
			if raw {
				return data
			}
			k, _ := sealedRecords(len(data))
			recs, err := w.seal.Reserve(k, len(data))
			if err != nil {
				t.Fatal(err)
			}
			sealed := make([]byte, len(data)+k*auth.Overhead)
			w.run(&w.sealRun, recs, k, data, sealed)
			return sealed
		}
		var fr wire.Frame
		switch {
		case handshake:
			fr = wire.Frame{Preamble: wire.Preamble{Tag: wire.TagSealedHandshake}, Front: seal(plain, nil), Data: data}
		case split && records:
			fr = wire.Frame{Preamble: wire.Preamble{Tag: wire.TagSealed}, Front: seal(plain, sealedHeadAD)}
			fr.Data = sealRecords()
		case split:
			fr = wire.Frame{Preamble: wire.Preamble{Tag: wire.TagSealed}, Front: seal(plain, sealedHeadAD)}
			fr.Data = seal(data, sealedDataAD)
		default:
			fr = wire.Frame{Preamble: wire.Preamble{Tag: wire.TagSealed}, Data: seal(plain, nil)}
		}
		q.WriteFrames([]wire.Frame{fr})
		var got wire.Frame
		err := r.ReadFrame(&got)
		if raw && len(plain) > 0 && err == nil {
			t.Fatal("bytes never sealed opened")
		}
		if err != nil {
			return
		}
		defer got.Release()
		if uint32(len(got.Front)) != got.FrontLen || uint32(len(got.Data)) != got.DataLen ||
			got.FrontLen > r.lim.MaxFront || got.DataLen > r.lim.MaxData || got.Tag.Sealed() || got.Tag.LinkOnly() {
			t.Fatalf("accepted %+v (front %d, data %d)", got.Preamble, len(got.Front), len(got.Data))
		}
		if got.Flags&wire.FlagSourceCRC != 0 || got.SourceCRCMismatch || got.HasDataCRC {
			t.Fatalf("a sealed frame opened with a data crc: %+v, %08x %v, mismatch %v", got.Preamble, got.DataCRC, got.HasDataCRC, got.SourceCRCMismatch)
		}
		if split && !handshake && (!bytes.Equal(got.Data, data) || !bytes.Equal(got.Front, plain[:got.FrontLen])) {
			t.Fatalf("a two-part frame opened as front %q, data %q", got.Front, got.Data)
		}
	})
}

// FuzzModes: ParseModes and the negotiation take any setting and any
// offer; a chosen mode is one both sides accept.
func FuzzModes(f *testing.F) {
	f.Add("prefer-secure", "secure,crc", "crc")
	f.Add("crc", "", "")
	f.Add("secure", "crc,future", "secure")
	f.Add("crc secure", "secure", "tls")
	f.Fuzz(func(t *testing.T, setting, offer, chosen string) {
		ours, err := ParseModes(setting)
		if err != nil {
			return
		}
		var offered []string
		if offer != "" {
			offered = strings.Split(offer, ",")
		}
		if m, ok := chooseMode(offered, ours); ok {
			if !slices.Contains(ours, m) || (len(offered) > 0 && !slices.Contains(offered, string(m))) {
				t.Fatalf("chose %q from %q for %v", m, offered, ours)
			}
		}
		if m, err := modeChosen(chosen, ours); err == nil && !slices.Contains(ours, m) {
			t.Fatalf("took %q, not among %v", m, ours)
		}
	})
}

// chanFlights carries one side's TLS flights over channels.
type chanFlights struct{ in, out chan []byte }

func (f chanFlights) Send(b []byte) error { f.out <- b; return nil }
func (f chanFlights) Recv() ([]byte, error) {
	b, ok := <-f.in
	if !ok {
		return nil, errors.New("closed")
	}
	return b, nil
}

// handshakePair runs a real TLS handshake between two keyrings and
// returns both ends' results.
func handshakePair(t *testing.T) (dialer, acceptor *auth.Result) {
	t.Helper()
	ca, err := auth.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	kd, err := ca.Issue("client.x")
	if err != nil {
		t.Fatal(err)
	}
	ka, err := ca.Issue("osd.0")
	if err != nil {
		t.Fatal(err)
	}
	a2d, d2a := make(chan []byte, 4), make(chan []byte, 4)
	done := make(chan error, 1)
	go func() {
		var err error
		acceptor, err = auth.Accept(t.Context(), ka, chanFlights{in: d2a, out: a2d}, auth.AcceptOptions{})
		done <- err
	}()
	dialer, err = auth.Dial(t.Context(), kd, chanFlights{in: a2d, out: d2a}, auth.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return dialer, acceptor
}

// TestModeProof: the acceptor's proof matches the dialer's only when both
// saw the same offer and choice, so an offer cut down on the way (secure
// stripped, leaving crc) is caught; the two ends' keys pair up, one
// direction's sealer the other's opener, and differ by direction.
func TestModeProof(t *testing.T) {
	d, a := handshakePair(t)
	sent := []string{"secure", "crc"}
	proof, err := modeProof(a, sent, ModeSecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkModeProof(d, sent, ModeSecure, proof); err != nil {
		t.Fatalf("the same offer and choice: %v", err)
	}
	stripped, _ := modeProof(a, []string{"crc"}, ModeCRC)
	if err := checkModeProof(d, sent, ModeCRC, stripped); !errors.Is(err, ErrAuth) {
		t.Fatalf("a stripped offer: %v, want ErrAuth", err)
	}
	if err := checkModeProof(d, sent, ModeCRC, nil); !errors.Is(err, ErrAuth) {
		t.Fatalf("no proof: %v, want ErrAuth", err)
	}
	kd, err := secureKeys(d, sent, true)
	if err != nil {
		t.Fatal(err)
	}
	ka, err := secureKeys(a, sent, false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kd.tx, ka.rx) || !bytes.Equal(kd.rx, ka.tx) || bytes.Equal(kd.tx, kd.rx) {
		t.Fatal("the two ends' keys do not pair up by direction")
	}
	if other, _ := secureKeys(d, []string{"secure"}, true); bytes.Equal(other.tx, kd.tx) {
		t.Fatal("keys do not depend on the offer")
	}
}

// countingLink counts the batches written to the queue below it.
type countingLink struct {
	*queueLink
	writes int
}

func (l *countingLink) WriteFrames(frames []wire.Frame) error {
	l.writes++
	return l.queueLink.WriteFrames(frames)
}

// TestSealedLinkFlushesLargeBatches: a batch of large frames goes to the
// link as each is sealed (about sealFlushBytes at a time), so the peer
// can open one while the next is sealed; small frames still go in one
// write; and either way every frame arrives, in order, as it was.
func TestSealedLinkFlushesLargeBatches(t *testing.T) {
	for _, tc := range []struct {
		frames, size, writes int
	}{
		{frames: 4, size: sealFlushBytes + 1000, writes: 4},
		{frames: 50, size: 100, writes: 1},
	} {
		q := &queueLink{}
		cl := &countingLink{queueLink: q}
		k := &linkKeys{tx: bytes.Repeat([]byte{1}, auth.DirectionKeyLen), rx: bytes.Repeat([]byte{2}, auth.DirectionKeyLen)}
		w, err := newSealedLink(cl, k, testLimits)
		if err != nil {
			t.Fatal(err)
		}
		r, err := newSealedLink(q, &linkKeys{tx: k.rx, rx: k.tx}, testLimits)
		if err != nil {
			t.Fatal(err)
		}
		w.EndHandshake()
		r.EndHandshake()
		defer w.Close()
		defer r.Close()
		batch := make([]wire.Frame, tc.frames)
		for i := range batch {
			batch[i] = wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: uint64(i + 1)},
				Front: []byte{byte(i)}, Data: bytes.Repeat([]byte{byte(i), 0x5a}, tc.size/2)}
		}
		if err := w.WriteFrames(batch); err != nil {
			t.Fatal(err)
		}
		if cl.writes != tc.writes {
			t.Fatalf("%d frames of %d bytes went in %d writes, want %d", tc.frames, tc.size, cl.writes, tc.writes)
		}
		for i, in := range batch {
			var got wire.Frame
			if err := r.ReadFrame(&got); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			if got.Seq != in.Seq || !bytes.Equal(got.Front, in.Front) || !bytes.Equal(got.Data, in.Data) {
				t.Fatalf("frame %d came back as seq %d with other bytes", i, got.Seq)
			}
			got.Release()
		}
	}
}
