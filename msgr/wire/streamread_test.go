package wire

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

func encodeFrameLen(f Frame) int {
	p := f.Preamble
	p.FrontLen, p.DataLen = uint32(len(f.Front)), uint32(len(f.Data))
	return p.WireSize()
}

// corpusStream is a stream of frames of every shape, with the offset at
// which each frame starts.
func corpusStream() (b []byte, starts []int, frames []Frame) {
	frames = []Frame{
		{Preamble: Preamble{Tag: TagAck, Ack: 1, GrantMsgs: 2, GrantBytes: 3}},
		msgFrame(1, 10, 100),
		{Preamble: Preamble{Tag: TagHello}, Front: []byte("osd.1")},
		msgFrame(2, 0, 0),
		msgFrame(3, 0, 33),
		msgFrame(4, 3, bigFrameBytes+500),
		{Preamble: Preamble{Tag: TagKeepalive, Seq: 77}},
		msgFrame(5, 2000, 0),
	}
	for _, f := range frames {
		starts = append(starts, len(b))
		b = append(b, encodeFrame(f.Preamble, f.Front, f.Data)...)
	}
	return b, starts, frames
}

// readUntilError reads frames from b until an error and returns how many
// came back intact and the error. It checks every frame it gets.
func readUntilError(t *testing.T, r io.Reader, frames []Frame) (int, error) {
	t.Helper()
	return readUntilErrorFeatures(t, r, 0, frames)
}

func readUntilErrorFeatures(t *testing.T, r io.Reader, features uint64, frames []Frame) (int, error) {
	t.Helper()
	l := NewReaderLink(r, features, testLimits)
	for i := 0; ; i++ {
		var f Frame
		err := l.ReadFrame(&f)
		if err != nil {
			if f.Buf != nil {
				t.Fatalf("frame %d: error %v with a buffer attached", i, err)
			}
			return i, err
		}
		if i >= len(frames) {
			t.Fatalf("frame %d beyond the %d written", i, len(frames))
		}
		checkFrame(t, i, &f, &frames[i])
		f.Release()
	}
}

func frameAt(starts []int, off int) int {
	i := 0
	for i+1 < len(starts) && starts[i+1] <= off {
		i++
	}
	return i
}

func TestReadFrameCorrupted(t *testing.T) {
	b, starts, frames := corpusStream()
	rng := rand.New(rand.NewPCG(3, 4))
	var positions []int
	for off := range b {
		// Every byte of the small frames; a sample of the big payload.
		fi := frameAt(starts, off)
		if len(frames[fi].Data) < bigFrameBytes || off-starts[fi] < PreambleSize+64 ||
			len(b)-off < 64 || (fi+1 < len(starts) && starts[fi+1]-off <= EpilogueSize+64) || rng.IntN(500) == 0 {
			positions = append(positions, off)
		}
	}
	for _, off := range positions {
		mask := byte(1 + rng.IntN(255))
		bad := bytes.Clone(b)
		bad[off] ^= mask
		n, err := readUntilError(t, bytes.NewReader(bad), frames)
		want := frameAt(starts, off)
		if n != want {
			t.Fatalf("byte %d ^ %#x (frame %d): %d frames read before the error %v", off, mask, want, n, err)
		}
		if !errors.Is(err, ErrCRC) {
			t.Fatalf("byte %d ^ %#x (frame %d, offset %d in it): got %v, want ErrCRC", off, mask, want, off-starts[want], err)
		}
	}
}

func TestReadFrameTruncated(t *testing.T) {
	b, starts, frames := corpusStream()
	isStart := map[int]bool{len(b): true}
	for _, s := range starts {
		isStart[s] = true
	}
	for cut := range len(b) + 1 {
		fi := frameAt(starts, cut)
		big := len(frames[fi].Data) >= bigFrameBytes
		if big && cut-starts[fi] > PreambleSize+100 && cut%997 != 0 && cut < len(b)-100 {
			continue // a sample of the big frame's cuts
		}
		for _, chop := range []bool{false, true} {
			var r io.Reader = bytes.NewReader(b[:cut])
			if chop {
				r = &choppyReader{r: r, rng: rand.New(rand.NewPCG(uint64(cut), 0)), max: 200}
			}
			n, err := readUntilError(t, r, frames)
			switch {
			case cut == len(b):
				if n != len(frames) || err != io.EOF {
					t.Fatalf("whole stream: %d frames, %v", n, err)
				}
			case isStart[cut]:
				if n != fi || err != io.EOF {
					t.Fatalf("cut at the start of frame %d: %d frames, %v; want io.EOF", fi, n, err)
				}
			default:
				if n != fi || err == nil {
					t.Fatalf("cut at %d, inside frame %d: %d frames, %v", cut, fi, n, err)
				}
				// See TestReadFrameTruncatedBigFrameIsUnexpectedEOF for big frames.
				if !big && !isTruncated(err) {
					t.Fatalf("cut at %d, inside frame %d: %v, want ErrShort and io.ErrUnexpectedEOF", cut, fi, err)
				}
			}
		}
	}
}

// isTruncated reports whether err says a stream ended mid-frame: a
// *Error of kind ErrShort that is io.ErrUnexpectedEOF too, as a reader
// of a stream says it.
func isTruncated(err error) bool {
	var we *Error
	return errors.As(err, &we) && we.Kind == ErrKindShort && errors.Is(err, ErrShort) && errors.Is(err, io.ErrUnexpectedEOF)
}

// TestReadFrameTruncatedBigFrameIsUnexpectedEOF: a stream that ends in the
// middle of a frame must say so (ErrShort, io.ErrUnexpectedEOF), not look
// like a clean close between frames (io.EOF).
func TestReadFrameTruncatedBigFrameIsUnexpectedEOF(t *testing.T) {
	f := msgFrame(1, 0, bigFrameBytes+100)
	b := encodeFrame(f.Preamble, f.Front, f.Data)
	for _, cut := range []int{PreambleSize, PreambleSize + 1, PreambleSize + 1000, len(b) - 1} {
		_, err := readUntilError(t, bytes.NewReader(b[:cut]), []Frame{f})
		if !isTruncated(err) {
			t.Errorf("cut at %d of %d: got %v, want ErrShort and io.ErrUnexpectedEOF", cut, len(b), err)
		}
	}
}

func TestReadFrameShortReads(t *testing.T) {
	b, _, frames := corpusStream()
	for _, r := range []io.Reader{
		iotest.OneByteReader(bytes.NewReader(b)),
		iotest.HalfReader(bytes.NewReader(b)),
		iotest.DataErrReader(bytes.NewReader(b)),
		&choppyReader{r: bytes.NewReader(b), rng: rand.New(rand.NewPCG(5, 6)), max: 100},
	} {
		n, err := readUntilError(t, r, frames)
		if n != len(frames) || err != io.EOF {
			t.Fatalf("%T: %d of %d frames, %v", r, n, len(frames), err)
		}
	}
}

func TestReadFrameReaderError(t *testing.T) {
	b, starts, frames := corpusStream()
	boom := errors.New("boom")
	for _, cut := range []int{0, starts[1], starts[1] + 5, starts[5] + PreambleSize + 10} {
		r := io.MultiReader(bytes.NewReader(b[:cut]), iotest.ErrReader(boom))
		n, err := readUntilError(t, r, frames)
		if !errors.Is(err, boom) || n != frameAt(starts, cut) {
			t.Errorf("cut %d: %d frames, %v", cut, n, err)
		}
	}
}

// choppyReader returns reads of random sizes.
type choppyReader struct {
	r   io.Reader
	rng *rand.Rand
	max int
}

func (c *choppyReader) Read(p []byte) (int, error) {
	if n := 1 + c.rng.IntN(c.max); n < len(p) {
		p = p[:n]
	}
	return c.r.Read(p)
}

func TestReadFrameManyChunksChoppy(t *testing.T) {
	// Frames held across many chunk changes, read in random pieces.
	rng := rand.New(rand.NewPCG(7, 8))
	var frames []Frame
	var b []byte
	for i := range 3000 {
		var f Frame
		if rng.IntN(50) == 0 {
			f = msgFrame(uint64(i), rng.IntN(10), bigFrameBytes-PreambleSize-EpilogueSize-rng.IntN(3)+rng.IntN(3))
		} else {
			f = msgFrame(uint64(i), rng.IntN(500), rng.IntN(5000))
		}
		frames = append(frames, f)
		b = append(b, encodeFrame(f.Preamble, f.Front, f.Data)...)
	}
	l := NewReaderLink(&choppyReader{r: bytes.NewReader(b), rng: rng, max: 70000}, 0, testLimits)
	got := make([]Frame, len(frames))
	for i := range got {
		if err := l.ReadFrame(&got[i]); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	for i := range got {
		checkFrame(t, i, &got[i], &frames[i])
	}
	releaseAll(got)
	var f Frame
	if err := l.ReadFrame(&f); err != io.EOF {
		t.Fatalf("after the last frame: %v", err)
	}
	if l.chunk != nil {
		t.Fatal("the link kept its chunk after the stream ended")
	}
}

func TestReadFrameLimits(t *testing.T) {
	// A frame above the reader's limits is refused from its preamble,
	// before anything is allocated for it.
	f := msgFrame(1, 10, 1000)
	b := encodeFrame(f.Preamble, f.Front, f.Data)
	// MaxData bounds front and data together: 1009 is one byte short.
	for _, lim := range []Limits{{MaxFront: 9, MaxData: 1010}, {MaxFront: 10, MaxData: 1009}, {MaxFront: 10, MaxData: 999}} {
		l := NewReaderLink(bytes.NewReader(b), 0, lim)
		var got Frame
		if err := l.ReadFrame(&got); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%+v: %v", lim, err)
		}
	}
	l := NewReaderLink(bytes.NewReader(b), 0, Limits{MaxFront: 10, MaxData: 1010})
	var got Frame
	if err := l.ReadFrame(&got); err != nil {
		t.Fatal(err)
	}
	got.Release()
}

func TestReadFrameRejectsGarbage(t *testing.T) {
	// Plausible garbage: things a misdirected client might send.
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",
		// A second banner where a frame should be.
		"OSPREYMS\x01\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" + string(make([]byte, 32)),
		string(make([]byte, 200)),
	} {
		l := NewReaderLink(bytes.NewReader([]byte(s)), KnownFeatures, testLimits)
		var f Frame
		err := l.ReadFrame(&f)
		var we *Error
		if !errors.As(err, &we) {
			t.Errorf("%q: got %v, want a *wire.Error", s[:8], err)
		}
	}
}

// maxReadReader records the largest read asked of it.
type maxReadReader struct {
	r   io.Reader
	max int
}

func (m *maxReadReader) Read(p []byte) (int, error) {
	m.max = max(m.max, len(p))
	return m.r.Read(p)
}

// TestReadFrameLargeBodyReadsInCachePieces: a large frame whose data is
// checksummed as it arrives is read in pieces of at most sumReadMax, so
// the CRC runs on bytes still in the cache; one sent without a data CRC
// (and no chunk CRCs asked) is read in reads as large as its body.
func TestReadFrameLargeBodyReadsInCachePieces(t *testing.T) {
	f := msgFrame(1, 100, 4<<20)
	for _, noCRC := range []bool{false, true} {
		p := f.Preamble
		if noCRC {
			p.Flags |= FlagNoDataCRC
		}
		want := f
		want.Preamble = p
		stream := encodeFrame(p, f.Front, f.Data)
		m := &maxReadReader{r: bytes.NewReader(stream)}
		l := NewReaderLink(m, FeatureNoDataCRC, testLimits)
		var got Frame
		if err := l.ReadFrame(&got); err != nil {
			t.Fatalf("noCRC=%v: %v", noCRC, err)
		}
		checkFrame(t, 0, &got, &want)
		got.Release()
		if !noCRC && m.max > sumReadMax {
			t.Errorf("checksummed body: a read of %d bytes, want at most %d", m.max, sumReadMax)
		}
		if noCRC && m.max <= sumReadMax {
			t.Errorf("body without CRC: largest read %d bytes, want the body's size in one", m.max)
		}
	}
}
