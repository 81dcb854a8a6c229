package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		a.Close()
		t.Fatal(r.err)
	}
	t.Cleanup(func() {
		a.Close()
		r.c.Close()
	})
	return a, r.c
}

// linkPair returns a writing and a reading StreamLink over a net.Pipe or a
// loopback TCP connection.
func linkPair(t testing.TB, kind string, features uint64, opts LinkOptions) (w, r *StreamLink) {
	t.Helper()
	var a, b net.Conn
	switch kind {
	case "pipe":
		a, b = net.Pipe()
		t.Cleanup(func() {
			a.Close()
			b.Close()
		})
	case "tcp":
		a, b = tcpPair(t)
	default:
		t.Fatalf("unknown link kind %q", kind)
	}
	return NewStreamLink(a, features, opts), NewStreamLink(b, features, opts)
}

var linkKinds = []string{"pipe", "tcp"}

// msgFrame is a MESSAGE frame with patterned segments.
func msgFrame(seq uint64, frontLen, dataLen int) Frame {
	return Frame{
		Preamble: Preamble{Tag: TagMessage, Type: uint16(seq), Seq: seq, Ack: seq / 2, GrantMsgs: uint32(seq * 3), GrantBytes: seq << 20,
			Tid: seq<<56 | 0x00c0ffee},
		Front: pattern(frontLen, byte(seq)),
		Data:  pattern(dataLen, byte(seq>>3)+1),
	}
}

// checkFrame compares a frame read back with the frame written.
func checkFrame(t testing.TB, i int, got *Frame, want *Frame) {
	t.Helper()
	wp := want.Preamble
	wp.FrontLen, wp.DataLen = uint32(len(want.Front)), uint32(len(want.Data))
	gp := got.Preamble
	gp.Flags &^= FlagNoDataCRC // the writer's business, checked separately
	wp.Flags &^= FlagNoDataCRC
	if gp != wp {
		t.Fatalf("frame %d: preamble\n got %+v\nwant %+v", i, gp, wp)
	}
	if !bytes.Equal(got.Front, want.Front) || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("frame %d (%v, front %d, data %d): segments differ", i, gp.Tag, len(want.Front), len(want.Data))
	}
	if len(got.Front) != int(got.FrontLen) || len(got.Data) != int(got.DataLen) {
		t.Fatalf("frame %d: segment lengths %d/%d, preamble says %d/%d", i, len(got.Front), len(got.Data), got.FrontLen, got.DataLen)
	}
	if got.HasSegments() != (got.Buf != nil) {
		t.Fatalf("frame %d: segments %v, buffer %v", i, got.HasSegments(), got.Buf != nil)
	}
}

// transfer writes batches on w from another goroutine and reads them back
// on r, holding every frame until all arrived (so a receive chunk reused
// too early would show as changed bytes), then releases them and checks
// the buffers went back.
func transfer(t *testing.T, w, r *StreamLink, batches [][]Frame) []Frame {
	t.Helper()
	var want []Frame
	for _, b := range batches {
		want = append(want, b...)
	}
	werr := make(chan error, 1)
	go func() {
		for _, b := range batches {
			if err := w.WriteFrames(b); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	got := make([]Frame, len(want))
	for i := range want {
		if err := r.ReadFrame(&got[i]); err != nil {
			t.Fatalf("frame %d of %d: %v", i, len(want), err)
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	for i := range want {
		checkFrame(t, i, &got[i], &want[i])
	}
	return got
}

func releaseAll(frames []Frame) {
	for i := range frames {
		frames[i].Release()
	}
}

func TestStreamLinkRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name    string
		batches func() [][]Frame
	}{
		{"empty segments", func() [][]Frame {
			return [][]Frame{{
				{Preamble: Preamble{Tag: TagMessage, Seq: 1}},
				msgFrame(2, 0, 0),
				msgFrame(3, 5, 0),
				msgFrame(4, 0, 5),
				{Preamble: Preamble{Tag: TagAck, Ack: 9, GrantMsgs: 10, GrantBytes: 11}},
				{Preamble: Preamble{Tag: TagKeepalive, Seq: 12345}},
				{Preamble: Preamble{Tag: TagKeepaliveAck, Seq: 12345}},
				{Preamble: Preamble{Tag: TagHello}},
				{Preamble: Preamble{Tag: TagHello}, Front: []byte("hello")},
				{Preamble: Preamble{Tag: TagClose}},
			}}
		}},
		{"small frames coalesced", func() [][]Frame {
			var b []Frame
			for i := range 1000 {
				b = append(b, msgFrame(uint64(i), rng.IntN(64), rng.IntN(200)))
			}
			return [][]Frame{b}
		}},
		{"copy threshold", func() [][]Frame {
			var b []Frame
			for i, n := range []int{copySegmentMax - 1, copySegmentMax, copySegmentMax + 1} {
				b = append(b, msgFrame(uint64(3*i), n, 0), msgFrame(uint64(3*i+1), 0, n), msgFrame(uint64(3*i+2), n, n))
			}
			return [][]Frame{b, b[:1], b[2:3]}
		}},
		{"big frame threshold", func() [][]Frame {
			// WireSize exactly at, just below and just above the size
			// above which a frame gets its own buffer.
			var b []Frame
			overhead := PreambleSize + EpilogueSize
			for i, total := range []int{bigFrameBytes - 1, bigFrameBytes, bigFrameBytes + 1} {
				b = append(b, msgFrame(uint64(i), 100, total-overhead-100), msgFrame(uint64(10+i), 0, total-overhead), msgFrame(uint64(20+i), 3, 7))
			}
			return [][]Frame{b}
		}},
		{"multi MiB", func() [][]Frame {
			return [][]Frame{
				{msgFrame(1, 10, 4<<20), msgFrame(2, 1<<20, 3<<20+17), msgFrame(3, 1, 1)},
				{msgFrame(4, 0, 5<<20)},
				{msgFrame(5, 5, 5)},
			}
		}},
		{"across read chunks", func() [][]Frame {
			// Several MiB of frames of every size, so frames straddle
			// the 256 KiB read chunks at many offsets.
			var batches [][]Frame
			seq := uint64(0)
			for range 40 {
				var b []Frame
				for range 1 + rng.IntN(200) {
					seq++
					switch rng.IntN(20) {
					case 0:
						b = append(b, msgFrame(seq, rng.IntN(100), bigFrameBytes+rng.IntN(100<<10)))
					case 1:
						b = append(b, Frame{Preamble: Preamble{Tag: TagAck, Ack: seq}})
					default:
						b = append(b, msgFrame(seq, rng.IntN(300), rng.IntN(3000)))
					}
				}
				batches = append(batches, b)
			}
			return batches
		}},
		{"write buffer overflow", func() [][]Frame {
			// More inline bytes than the write buffer holds in one call.
			var b []Frame
			for i := range 3 * writeBufSize / copySegmentMax {
				b = append(b, msgFrame(uint64(i), 100, copySegmentMax-100))
			}
			return [][]Frame{b}
		}},
	}
	for _, kind := range linkKinds {
		for _, tc := range cases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				w, r := linkPair(t, kind, KnownFeatures, LinkOptions{Limits: Limits{MaxFront: 1 << 20, MaxData: 8 << 20}})
				got := transfer(t, w, r, tc.batches())
				bufs := map[*Buffer]bool{}
				for i := range got {
					if got[i].Buf != nil {
						bufs[got[i].Buf] = true
					}
				}
				releaseAll(got)
				w.Close()
				var f Frame
				if err := r.ReadFrame(&f); err == nil {
					t.Fatal("read a frame after the writer closed")
				}
				// Every frame released and the link dropped its chunk
				// after the error: no buffer is still referenced.
				for b := range bufs {
					if n := b.refs.Load(); n != 0 {
						t.Fatalf("buffer of %d bytes still has %d refs", len(b.B), n)
					}
				}
			})
		}
	}
}

// countingWriter records the size of each Write.
type countingWriter struct {
	bytes.Buffer
	writes []int
}

func (c *countingWriter) Write(b []byte) (int, error) {
	c.writes = append(c.writes, len(b))
	return c.Buffer.Write(b)
}

func writerLink(w io.Writer, features uint64, noCRC bool) *StreamLink {
	return newStreamLink(nil, w, io.NopCloser(nil), features, LinkOptions{NoDataCRC: noCRC})
}

func TestWriteFramesEncoding(t *testing.T) {
	frames := []Frame{
		msgFrame(1, 10, 20),
		{Preamble: Preamble{Tag: TagAck, Ack: 3}},
		msgFrame(2, 0, copySegmentMax+1),
		{Preamble: Preamble{Tag: TagHello}, Front: []byte("x")},
		msgFrame(3, copySegmentMax+5, 0),
		// The caller's lengths and link word are ignored; the segments
		// decide, and a stream link's link word is zero.
		{Preamble: Preamble{Tag: TagMessage, FrontLen: 999, DataLen: 999, LinkWord: 77}, Front: []byte("ab"), Data: []byte("c")},
	}
	var want []byte
	for _, f := range frames {
		p := f.Preamble
		p.LinkWord = 0
		want = append(want, encodeFrame(p, f.Front, f.Data)...)
	}
	var cw countingWriter
	l := writerLink(&cw, KnownFeatures, false)
	if err := l.WriteFrames(frames); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cw.Bytes(), want) {
		t.Fatalf("encoding differs from the reference encoder (%d vs %d bytes)", cw.Len(), len(want))
	}
	// Small segments are copied, large ones go as their own iovec:
	// [f1 f2 pre3] [data3] [epi3 f4 pre5] [front5] [epi5 f6].
	if len(cw.writes) != 5 {
		t.Errorf("%d writes %v, want 5", len(cw.writes), cw.writes)
	}
	// No reference to the caller's segments stays behind.
	for i, b := range l.iov[:cap(l.iov)] {
		if b != nil {
			t.Errorf("iov[%d] still holds %d bytes", i, len(b))
		}
	}
}

func TestWriteFramesCoalesces(t *testing.T) {
	var frames []Frame
	for i := range 500 {
		frames = append(frames, msgFrame(uint64(i), 20, 64))
	}
	var cw countingWriter
	if err := writerLink(&cw, 0, false).WriteFrames(frames); err != nil {
		t.Fatal(err)
	}
	if len(cw.writes) != 1 {
		t.Fatalf("500 small frames took %d writes", len(cw.writes))
	}
	var cw2 countingWriter
	if err := writerLink(&cw2, 0, false).WriteFrames(nil); err != nil {
		t.Fatal(err)
	}
	if len(cw2.writes) != 0 {
		t.Fatalf("an empty batch wrote %v", cw2.writes)
	}
}

func TestWriteFramesError(t *testing.T) {
	boom := errors.New("boom")
	for _, frames := range [][]Frame{
		{msgFrame(1, 1, 1)},
		{msgFrame(1, 1, 1<<20)},
	} {
		l := writerLink(errWriter{boom}, 0, false)
		if err := l.WriteFrames(frames); !errors.Is(err, boom) {
			t.Fatalf("got %v, want %v", err, boom)
		}
		// The link is reusable for another attempt (nothing left over).
		if len(l.wbuf) != 0 || len(l.iov) != 0 {
			t.Fatalf("state left after an error: %d bytes, %d iovecs", len(l.wbuf), len(l.iov))
		}
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

func TestNoDataCRC(t *testing.T) {
	frames := []Frame{
		msgFrame(1, 10, 100),
		msgFrame(2, 10, 0), // no data: no flag
		msgFrame(3, 0, bigFrameBytes+10),
		{Preamble: Preamble{Tag: TagHello}, Front: []byte("hi")},
	}
	encode := func(features uint64, noCRC bool) []byte {
		var buf bytes.Buffer
		if err := writerLink(&buf, features, noCRC).WriteFrames(frames); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	readAll := func(b []byte, features uint64) ([]Frame, error) {
		l := NewReaderLink(bytes.NewReader(b), features, testLimits)
		var out []Frame
		for {
			var f Frame
			if err := l.ReadFrame(&f); err != nil {
				if err == io.EOF {
					return out, nil
				}
				releaseAll(out)
				return nil, err
			}
			out = append(out, f)
		}
	}

	// Agreed: frames with data carry the flag and a zero data CRC.
	b := encode(FeatureNoDataCRC, true)
	got, err := readAll(b, FeatureNoDataCRC)
	if err != nil {
		t.Fatal(err)
	}
	for i := range frames {
		checkFrame(t, i, &got[i], &frames[i])
		if want := len(frames[i].Data) > 0; (got[i].Flags&FlagNoDataCRC != 0) != want {
			t.Errorf("frame %d: flags %#x, want no-data-crc %v", i, got[i].Flags, want)
		}
	}
	releaseAll(got)
	p0 := frames[0].Preamble
	p0.Flags |= FlagNoDataCRC
	if !bytes.Equal(b[:encodeFrameLen(frames[0])], encodeFrame(p0, frames[0].Front, frames[0].Data)) {
		t.Error("first frame is not encoded with a zero data crc")
	}

	// A reader that did not agree refuses such frames.
	if _, err := readAll(b, 0); !errors.Is(err, ErrProtocol) {
		t.Fatalf("unagreed no-data-crc frame: got %v, want ErrProtocol", err)
	}

	// Asked for, but the peer did not agree: the CRC stays on.
	b = encode(0, true)
	if !bytes.Equal(b, encode(0, false)) {
		t.Fatal("NoDataCRC without the feature changed the encoding")
	}
	got, err = readAll(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i].Flags&FlagNoDataCRC != 0 {
			t.Errorf("frame %d has the flag", i)
		}
	}
	releaseAll(got)

	// The feature agreed but not asked for: CRCs on.
	if !bytes.Equal(encode(FeatureNoDataCRC, false), encode(0, false)) {
		t.Fatal("the feature alone changed the encoding")
	}

	// Over a real link.
	w, r := linkPair(t, "tcp", FeatureNoDataCRC, LinkOptions{Limits: testLimits, NoDataCRC: true})
	got = transfer(t, w, r, [][]Frame{frames})
	if got[0].Flags&FlagNoDataCRC == 0 {
		t.Error("tcp link did not set the flag")
	}
	releaseAll(got)
}

func TestBuffered(t *testing.T) {
	var b []byte
	b = append(b, encodeFrame(Preamble{Tag: TagAck}, nil, nil)...)
	b = append(b, encodeFrame(Preamble{Tag: TagMessage}, []byte("x"), nil)...)
	l := NewReaderLink(bytes.NewReader(b), 0, testLimits)
	if l.Buffered() {
		t.Fatal("buffered before any read")
	}
	var f Frame
	if err := l.ReadFrame(&f); err != nil {
		t.Fatal(err)
	}
	if !l.Buffered() {
		t.Fatal("second frame not buffered")
	}
	if err := l.ReadFrame(&f); err != nil {
		t.Fatal(err)
	}
	f.Release()
	if l.Buffered() {
		t.Fatal("buffered after the last frame")
	}
}

func TestStreamLinkClose(t *testing.T) {
	for _, kind := range linkKinds {
		t.Run(kind, func(t *testing.T) {
			w, r := linkPair(t, kind, FeatureRendezvous, LinkOptions{Limits: testLimits})
			if r.Features() != FeatureRendezvous || r.LocalAddr() == "" || r.RemoteAddr() == "" {
				t.Fatalf("features %#x, addrs %q %q", r.Features(), r.LocalAddr(), r.RemoteAddr())
			}
			errc := make(chan error, 1)
			go func() {
				var f Frame
				errc <- r.ReadFrame(&f)
			}()
			// Close wakes a blocked (or about to block) reader.
			r.Close()
			if err := <-errc; err == nil {
				t.Fatal("ReadFrame on a closed link succeeded")
			}
			// The peer's writes fail once the reader is gone (pipe) or
			// eventually (tcp: the first write may still be buffered).
			var err error
			for i := 0; err == nil && i < 100; i++ {
				err = w.WriteFrames([]Frame{msgFrame(1, 0, 1<<20)})
			}
			if err == nil {
				t.Fatal("writes to a closed peer keep succeeding")
			}
		})
	}
}

func ExampleNewReaderLink() {
	b := encodeFrame(Preamble{Tag: TagMessage, Seq: 1}, []byte("op"), []byte("payload"))
	l := NewReaderLink(bytes.NewReader(b), 0, Limits{MaxFront: 1 << 10, MaxData: 1 << 20})
	var f Frame
	if err := l.ReadFrame(&f); err != nil {
		panic(err)
	}
	fmt.Printf("%v seq %d: %s %s\n", f.Tag, f.Seq, f.Front, f.Data)
	f.Release()
	// Output: MESSAGE seq 1: op payload
}

func TestStreamLinkRejects(t *testing.T) {
	// Frames that pass Parse but have no business on a stream link.
	tests := []struct {
		name     string
		b        []byte
		features uint64
		want     error
	}{
		{"link word", encodeFrame(Preamble{Tag: TagAck, LinkWord: 1}, nil, nil), KnownFeatures, ErrMalformed},
		{"link word on a message", encodeFrame(Preamble{Tag: TagMessage, LinkWord: 1 << 31}, []byte("f"), []byte("d")), KnownFeatures, ErrMalformed},
		{"rendezvous", encodeFrame(Preamble{Tag: TagMessage, Flags: FlagRendezvous}, []byte("f"), []byte("descriptor")), KnownFeatures, ErrProtocol},
		{"rdma write-rendezvous ready", encodeFrame(Preamble{Tag: TagRdvReady}, nil, []byte("descriptor")), KnownFeatures, ErrProtocol},
		{"rdma write-rendezvous done", encodeFrame(Preamble{Tag: TagRdvDone, Seq: 7}, nil, nil), KnownFeatures, ErrProtocol},
		{"no data crc unagreed", encodeFrame(Preamble{Tag: TagMessage, Flags: FlagNoDataCRC}, []byte("f"), []byte("d")), FeatureRendezvous, ErrProtocol},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// After a good frame, so the error is not an artifact of the
			// first read.
			b := append(encodeFrame(Preamble{Tag: TagKeepalive, Seq: 1}, nil, nil), tc.b...)
			n, err := readUntilErrorFeatures(t, bytes.NewReader(b), tc.features, []Frame{{Preamble: Preamble{Tag: TagKeepalive, Seq: 1}}})
			if n != 1 || !errors.Is(err, tc.want) {
				t.Fatalf("%d frames, %v; want 1 and %v", n, err, tc.want)
			}
		})
	}
}
