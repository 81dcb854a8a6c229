package msgr

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// faultyLink fails on purpose (FaultInjection): after a jittered number of
// frames, or with a probability per frame, it closes the real link in the
// middle of a batch, so some frames of the batch arrive and some do not,
// which is what a real fault does to a session.
type faultyLink struct {
	wire.Link
	fi     FaultInjection
	mu     sync.Mutex
	rng    *rand.Rand
	frames int
	next   int
	failed bool
}

// newFaultyLink wraps the n-th link of its messenger: the fault points
// follow from Seed and n alone, so a messenger that makes its links in the
// same order fails them at the same frames, whatever other messengers of
// the process do.
func newFaultyLink(l wire.Link, fi FaultInjection, n uint64) *faultyLink {
	f := &faultyLink{Link: l, fi: fi, rng: rand.New(rand.NewPCG(uint64(fi.Seed), n))}
	f.arm()
	return f
}

func (f *faultyLink) arm() {
	if f.fi.EveryNFrames > 0 {
		f.next = f.frames + f.fi.EveryNFrames/2 + f.rng.IntN(f.fi.EveryNFrames+1)
	}
}

// hit counts n frames and returns how many of them pass before a fault, or
// -1 for no fault.
func (f *faultyLink) hit(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed {
		return 0
	}
	for i := range n {
		f.frames++
		if (f.fi.EveryNFrames > 0 && f.frames >= f.next) ||
			(f.fi.Probability > 0 && f.rng.Float64() < f.fi.Probability) {
			f.failed = true
			return i
		}
	}
	return -1
}

func (f *faultyLink) WriteFrames(frames []wire.Frame) error {
	if f.fi.Delay > 0 {
		time.Sleep(f.fi.Delay) // the injected delay itself
	}
	if k := f.hit(len(frames)); k >= 0 {
		if k > 0 {
			f.Link.WriteFrames(frames[:k])
		}
		f.Link.Close()
		return ErrInjectedFault
	}
	return f.Link.WriteFrames(frames)
}

func (f *faultyLink) ReadFrame(fr *wire.Frame) error {
	if err := f.Link.ReadFrame(fr); err != nil {
		return err
	}
	if f.hit(1) >= 0 {
		fr.Release()
		f.Link.Close()
		return ErrInjectedFault
	}
	return nil
}

// EndHandshake passes through to a link that starts in a handshake phase.
func (f *faultyLink) EndHandshake() {
	if h, ok := f.Link.(wire.HandshakeEnder); ok {
		h.EndHandshake()
	}
}

// Inbound passes through the listener's account of an accepted link.
func (f *faultyLink) Inbound() *wire.InboundConn { return wire.InboundOf(f.Link) }

// Buffered passes through the stream link's hint.
func (f *faultyLink) Buffered() bool {
	b, ok := f.Link.(interface{ Buffered() bool })
	return ok && b.Buffered()
}

// WriteSpace passes through the stream link's send-buffer estimate; 0 (no
// inline writes) when the link has none.
func (f *faultyLink) WriteSpace() int {
	w, ok := f.Link.(interface{ WriteSpace() int })
	if !ok {
		return 0
	}
	return w.WriteSpace()
}
