package wire

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
)

// Before the handshake completes only handshake frames of at most
// MaxHandshakeFront bytes are accepted.
func TestHandshakeLimits(t *testing.T) {
	for tag := Tag(1); tag <= tagMax; tag++ {
		p := Preamble{Tag: tag}
		if tag == TagMessage || tag.Handshake() {
			p.FrontLen = 10
		}
		if tag == TagSealedHandshake {
			p.FrontLen = SealedOverhead
		}
		b := make([]byte, PreambleSize)
		p.Put(b)
		var got Preamble
		err := got.Parse(b, HandshakeLimits)
		if tag.Handshake() != (err == nil) {
			t.Errorf("%v: Parse with HandshakeLimits: %v", tag, err)
		}
		if !tag.Handshake() && !errors.Is(err, ErrProtocol) {
			t.Errorf("%v: %v, want a protocol error", tag, err)
		}
	}
	for _, p := range []Preamble{
		{Tag: TagHello, FrontLen: MaxHandshakeFront + 1},
		{Tag: TagSessionReq, FrontLen: 1, DataLen: 1},
	} {
		b := make([]byte, PreambleSize)
		p.Put(b)
		var got Preamble
		if err := got.Parse(b, HandshakeLimits); err == nil {
			t.Errorf("%+v accepted before the handshake", p)
		}
	}
	// A link in its handshake phase refuses a MESSAGE, and reads it after
	// EndHandshake.
	msg := encodeFrame(Preamble{Tag: TagMessage, Seq: 1}, []byte("front"), []byte("data"))
	hello := encodeFrame(Preamble{Tag: TagHello}, []byte("hello"), nil)
	l := newStreamLink(bytes.NewReader(msg), io.Discard, io.NopCloser(nil), 0, LinkOptions{Limits: testLimits, Handshake: true})
	var f Frame
	if err := l.ReadFrame(&f); !errors.Is(err, ErrProtocol) {
		t.Fatalf("MESSAGE in the handshake phase: %v", err)
	}
	l = newStreamLink(bytes.NewReader(append(hello, msg...)), io.Discard, io.NopCloser(nil), 0, LinkOptions{Limits: testLimits, Handshake: true})
	if err := l.ReadFrame(&f); err != nil || f.Tag != TagHello {
		t.Fatalf("HELLO: %v %v", f.Tag, err)
	}
	f.Release()
	l.EndHandshake()
	if err := l.ReadFrame(&f); err != nil || f.Tag != TagMessage || string(f.Data) != "data" {
		t.Fatalf("MESSAGE after the handshake: %v %v", f.Tag, err)
	}
	f.Release()
}

// A frame whose preamble claims far more than arrives costs memory in
// proportion to what arrived, not to the claim.
func TestLargeFrameBufferFollowsArrivals(t *testing.T) {
	lim := Limits{MaxFront: 16 << 20, MaxData: 128 << 20}
	p := Preamble{Tag: TagMessage, Seq: 1, FrontLen: 16 << 20, DataLen: 100 << 20}
	b := make([]byte, PreambleSize)
	p.Put(b)
	b = append(b, make([]byte, 1<<20)...) // 1 MiB of the 116 MiB promised
	runtime.GC()
	runtime.GC() // empties the buffer pools, victims included
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	l := NewReaderLink(bytes.NewReader(b), 0, lim)
	var f Frame
	err := l.ReadFrame(&f)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > growFrom+(2<<20) {
		t.Fatalf("%d bytes allocated for a frame of which 1 MiB arrived", grew)
	}
}

// Frames larger than growFrom, whose buffer grows as they arrive, read
// back intact in random pieces.
func TestLargeFramesGrowIntact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lim := Limits{MaxFront: 1 << 20, MaxData: 64 << 20}
	fill := rand.NewChaCha8([32]byte{1})
	var stream []byte
	var want [][]byte
	for _, n := range []int{growFrom + 1, 2*growFrom + 12345} {
		data := make([]byte, n)
		fill.Read(data)
		want = append(want, data)
		stream = append(stream, encodeFrame(Preamble{Tag: TagMessage, Seq: uint64(len(want))}, []byte("front"), data)...)
	}
	l := NewReaderLink(&choppyReader{r: bytes.NewReader(stream), rng: rng, max: 3 << 20}, 0, lim)
	for i, data := range want {
		var f Frame
		if err := l.ReadFrame(&f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if string(f.Front) != "front" || !bytes.Equal(f.Data, data) {
			t.Fatalf("frame %d of %d bytes corrupted", i, len(data))
		}
		f.Release()
	}
}
