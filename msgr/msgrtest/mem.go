// Package msgrtest holds the transport conformance suite that every msgr
// transport must pass, and an in-memory transport for tests. Nothing here
// is for production use.
package msgrtest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/ospreystore/osprey/msgr/wire"
)

// MemTransport is an in-memory transport: "mem://NAME" addresses in one
// process. Frames are copied on write (the writer may reuse its buffers at
// once) and queued on a bounded channel, which back-pressures the writer
// like a full socket buffer. Links enforce the same limits as real ones,
// place received data on a wire.DataAlign boundary and check its CRC (the
// sender's, when it handed one in) as a stream link does.
type MemTransport struct {
	mu        sync.Mutex
	listeners map[string]*memListener
	seq       atomic.Uint64
}

// NewMemTransport returns an empty in-memory network.
func NewMemTransport() *MemTransport {
	return &MemTransport{listeners: map[string]*memListener{}}
}

func (*MemTransport) Scheme() string { return "mem" }

func (t *MemTransport) Listen(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Listener, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if addr == "" || addr == "0" {
		addr = fmt.Sprintf("auto-%d", t.seq.Add(1))
	}
	if _, ok := t.listeners[addr]; ok {
		return nil, fmt.Errorf("mem %s: address in use", addr)
	}
	l := &memListener{t: t, addr: addr, opts: opts, links: make(chan *memLink), done: make(chan struct{})}
	t.listeners[addr] = l
	return l, nil
}

func (t *MemTransport) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
	t.mu.Lock()
	l := t.listeners[addr]
	t.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("mem %s: connection refused", addr)
	}
	features, err := wire.Negotiate(opts.Banner.Stream(), l.opts.Banner.Stream())
	if err != nil {
		return nil, err
	}
	id := t.seq.Add(1)
	a2b := make(chan memFrame, 256)
	b2a := make(chan memFrame, 256)
	closed := make(chan struct{})
	var once sync.Once
	shut := func() { once.Do(func() { close(closed) }) }
	client := &memLink{in: b2a, out: a2b, closed: closed, shut: shut, features: features,
		local: fmt.Sprintf("client-%d", id), remote: addr}
	client.setLimits(opts)
	server := &memLink{in: a2b, out: b2a, closed: closed, shut: shut, features: features,
		local: addr, remote: fmt.Sprintf("client-%d", id)}
	server.setLimits(l.opts)
	select {
	case l.links <- server:
		return client, nil
	case <-l.done:
		return nil, fmt.Errorf("mem %s: connection refused", addr)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type memListener struct {
	t     *MemTransport
	addr  string
	opts  wire.LinkOptions
	links chan *memLink
	done  chan struct{}
	once  sync.Once
}

func (l *memListener) Accept(ctx context.Context) (wire.Link, error) {
	select {
	case link := <-l.links:
		return link, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *memListener) Addr() string { return l.addr }

func (l *memListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.t.mu.Lock()
		delete(l.t.listeners, l.addr)
		l.t.mu.Unlock()
	})
	return nil
}

type memFrame struct {
	p     wire.Preamble
	buf   *wire.Buffer // holds front then data
	front []byte       // in buf, placed so that data starts on wire.DataAlign
	data  []byte       // in buf, after front
	crc   uint32       // of the data: the sender's, or computed on write
}

type memLink struct {
	in, out       chan memFrame
	closed        chan struct{}
	shut          func()
	features      uint64
	lim, steady   wire.Limits // in force; after EndHandshake
	local, remote string
}

// setLimits applies opts' limits, starting in the handshake phase if asked
// to, as a stream link does.
func (l *memLink) setLimits(opts wire.LinkOptions) {
	l.lim, l.steady = opts.Limits, opts.Limits
	if opts.Handshake {
		l.lim = wire.HandshakeLimits
	}
}

// EndHandshake lifts the handshake limits.
func (l *memLink) EndHandshake() { l.lim = l.steady }

func (l *memLink) WriteFrames(frames []wire.Frame) error {
	for i := range frames {
		f := &frames[i]
		mf := memFrame{p: f.Preamble}
		mf.p.FrontLen, mf.p.DataLen = uint32(len(f.Front)), uint32(len(f.Data))
		if n := len(f.Front) + len(f.Data); n > 0 {
			// Laid out as a stream link places a received body: the data
			// on a wire.DataAlign boundary, the front before it.
			var b []byte
			mf.buf, b = wire.GetAligned(n, len(f.Front))
			copy(b[copy(b, f.Front):], f.Data)
			mf.front, mf.data = b[:len(f.Front)], b[len(f.Front):]
			// The data CRC travels as in a stream link's epilogue: the
			// sender's if it knows it (a wrong one is refused on read,
			// or, a source's under FlagSourceCRC, reported).
			mf.crc = f.SendDataCRC(&mf.p, l.features)
		}
		select {
		case <-l.closed:
			if mf.buf != nil {
				mf.buf.Release()
			}
			return net.ErrClosed
		default:
		}
		select {
		case l.out <- mf:
		case <-l.closed:
			if mf.buf != nil {
				mf.buf.Release()
			}
			return net.ErrClosed
		}
	}
	return nil
}

func (l *memLink) ReadFrame(f *wire.Frame) error {
	// Frames written before a Close are still delivered, as TCP delivers
	// what was sent before a FIN.
	var mf memFrame
	select {
	case mf = <-l.in:
	case <-l.closed:
		select {
		case mf = <-l.in:
		default:
			return net.ErrClosed
		}
	}
	// The same checks a stream link makes, the agreed features and link
	// word included, minus the preamble and front CRCs a copy in memory
	// cannot break. The data CRC is checked, since a sender may hand in a
	// wrong one (Frame.DataCRC).
	var b [wire.PreambleSize]byte
	mf.p.Put(b[:])
	err := f.Preamble.Parse(b[:], l.lim)
	if err == nil {
		err = f.Preamble.CheckAgreed(l.features, false)
	}
	if err != nil {
		if mf.buf != nil {
			mf.buf.Release()
		}
		return err
	}
	if mf.buf == nil {
		return nil
	}
	got := wire.CRC(mf.data)
	switch {
	case f.Flags&wire.FlagSourceCRC != 0:
		f.SourceCRCMismatch = got != mf.crc
	case f.Flags&wire.FlagNoDataCRC != 0: // the sender sent none
	case got != mf.crc:
		mf.buf.Release()
		return &wire.Error{Kind: wire.ErrKindCRC, Msg: fmt.Sprintf("data segment crc %08x, computed %08x", mf.crc, got)}
	}
	f.Buf, f.Front, f.Data = mf.buf, mf.front, mf.data
	f.DataCRC, f.HasDataCRC = got, true
	return nil
}

// Buffered reports whether another frame is queued.
func (l *memLink) Buffered() bool { return len(l.in) > 0 }

func (l *memLink) Features() uint64   { return l.features }
func (l *memLink) LocalAddr() string  { return l.local }
func (l *memLink) RemoteAddr() string { return l.remote }
func (l *memLink) Close() error       { l.shut(); return nil }
