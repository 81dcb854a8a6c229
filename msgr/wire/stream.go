package wire

import (
	"fmt"
	"io"
	"net"
	"sync/atomic"
)

// Stream framing: how frames travel on a byte stream (TCP, or any
// net.Conn). The reader reads into pooled chunks and hands out frames that
// point into them, so small frames cost one read syscall per chunk, no copy
// and no allocation; frames too large for a chunk get a buffer of their own
// that the payload is read into directly. The writer coalesces small frames
// into one buffer and passes large segments as their own iovecs, so a batch
// of frames is one writev with no copy of large payloads.
//
// An idle link holds no buffer: the write buffer is borrowed from the pool
// for one batch, and over a PollReader (a socket) the reader lets its chunk
// go when the peer falls silent at a frame boundary and takes one again when
// bytes arrive. Chunks follow the traffic: the next one is sized by the last
// burst (4 KiB for a request, up to 256 KiB for a stream), so a silent
// connection costs a few KiB.
//
// A frame without data that is handed out as slices of a chunk keeps the
// whole chunk alive while its message is held, and windows and budgets
// count the message's bytes only. So a link lets chunks it has moved past
// stay pinned by held frames up to pinAllowance bytes; beyond that it
// copies such frames out of the chunk into buffers of their size
// (getFitted) until held frames let enough go. A dispatcher that releases
// promptly pins nothing past the chunk being read, and pays no copy.
const (
	readChunkSize  = 256 << 10 // the largest read chunk
	minReadChunk   = 4 << 10   // the smallest, for a link that just woke up
	bigFrameBytes  = 64 << 10  // frames above this get their own buffer
	writeBufSize   = 256 << 10 // the largest write buffer a batch borrows
	copySegmentMax = 16 << 10  // segments up to this are copied into the write buffer
	// smallWriteBuf: a batch that copies at most this many bytes (an ack,
	// a keepalive, a small request) is encoded in the link's own array,
	// without a trip to the pool.
	smallWriteBuf = 512
	// growSlow: where a large frame's buffer starts while the receive
	// budget is more than half spent.
	growSlow = bigFrameBytes
	// growFrom: a frame whose body is larger is read into a buffer that
	// grows with the bytes that arrive, doubling from growFrom, instead of
	// one of the size its preamble claims, so a peer that claims 64 MiB and
	// sends little costs little. An ordinary message (a 4 MiB object and
	// its front) is read with no copy.
	growFrom = 8 << 20
	// pinAllowance: how many bytes of chunks the link has moved past its
	// held frames may pin before it copies new frames out of the chunk.
	// A link's retired chunks pin at most pinAllowance plus one chunk
	// (the last one sliced before the allowance ran out): 512 KiB.
	pinAllowance = readChunkSize
)

// sumReadMax bounds each read of a large frame's body while its data is
// checksummed as it arrives: a busy reader finds megabytes queued, and a
// read of megabytes leaves the CRC to fetch most of them back from memory;
// a quarter of a core's L2 is still in the cache when the CRC follows. On
// a 3-replica 4 MiB put (OSDs in one process, perf) the CRC passes went
// from 0.42-0.52 to 0.23-0.25 CPU-s per GB, the extra reads and their
// ACKs costing about 0.05. A variable for BenchmarkStreamTCPLarge.
var sumReadMax = 256 << 10

// StreamLink is a Link over a byte stream.
type StreamLink struct {
	r         io.Reader
	w         io.Writer
	closer    io.Closer
	local     string
	remote    string
	features  uint64
	lim       Limits // in force: HandshakeLimits until EndHandshake, then steady
	steady    Limits
	noCRC     bool // write frames without data CRC
	dataChunk int  // LinkOptions.DataChunk

	inbound *InboundConn // the listener's accounting of this connection, or nil
	closed  atomic.Bool  // Close ran

	space func() int // free send-buffer bytes, when the transport knows

	budget *Budget       // charged for MESSAGE frames before their segments are read
	done   chan struct{} // closed by the first Close: ends a wait for the budget

	// write side (writer goroutine only)
	wb     *Buffer // borrowed for one WriteFrames call
	wbuf   []byte  // wb's bytes (or wsmall's) in use
	wsmall [smallWriteBuf]byte
	iov    net.Buffers
	tmp    net.Buffers // what writev consumes; a field so it does not escape per call

	// read side (reader goroutine only)
	chunk      *Buffer
	rpos, rend int
	poll       PollReader    // nil: reads block holding the chunk
	pollBuf    func() []byte // l.readBuf and l.readIdle, bound once so that
	pollIdle   func()        // a read allocates nothing
	need       int           // bytes fill wants at rpos
	chunkSize  int           // size of the next chunk
	burst      int           // bytes read since the peer last fell silent
	sum        DataSum       // the data segment being read, as it arrives
	summing    bool          // sum is in use for the frame being read

	// pinned: bytes of the chunks the reader has moved past that frames
	// still point into (Buffer.pin); their releases take them off.
	pinned atomic.Int64
	copied atomic.Int64 // frames copied out of the chunk for that
}

// PollReader is a byte stream that can wait for bytes without holding a
// buffer, as a socket under the Go runtime's poller can. ReadPoll reads like
// io.Reader's Read into the slice buf returns, asking for it only when it is
// about to read; before it waits for bytes it calls idle, and asks for a
// buffer again when they come.
type PollReader interface {
	ReadPoll(buf func() []byte, idle func()) (int, error)
}

// NewStreamLink wraps a connection whose banner exchange succeeded with the
// given agreed features.
func NewStreamLink(c net.Conn, features uint64, opts LinkOptions) *StreamLink {
	l := newStreamLink(c, c, c, features, opts)
	l.local, l.remote = c.LocalAddr().String(), c.RemoteAddr().String()
	return l
}

func newStreamLink(r io.Reader, w io.Writer, closer io.Closer, features uint64, opts LinkOptions) *StreamLink {
	l := &StreamLink{
		r: r, w: w, closer: closer, features: features, lim: opts.Limits, steady: opts.Limits,
		noCRC:  opts.NoDataCRC && features&FeatureNoDataCRC != 0,
		budget: opts.Budget, done: make(chan struct{}), chunkSize: minReadChunk,
		dataChunk: max(opts.DataChunk, 0),
	}
	if opts.Handshake {
		l.lim = HandshakeLimits
	}
	return l
}

// EndHandshake lifts the handshake limits (LinkOptions.Handshake): from
// now on frames are bounded by LinkOptions.Limits. Reader side only.
func (l *StreamLink) EndHandshake() { l.lim = l.steady }

// SetInbound gives the link its listener's account of it, which the first
// Close ends. Call it before the link is shared.
func (l *StreamLink) SetInbound(c *InboundConn) { l.inbound = c }

// Inbound returns the account given by SetInbound (nil on a dialed link),
// for the messenger to mark the peer authenticated.
func (l *StreamLink) Inbound() *InboundConn { return l.inbound }

// SetPollReader makes the link read through p, so that it holds no read
// buffer while the peer is silent. Call it before the link is shared.
func (l *StreamLink) SetPollReader(p PollReader) {
	l.poll = p
	l.pollBuf, l.pollIdle = l.readBuf, l.readIdle
}

// NewReaderLink returns a read-only StreamLink over r, for tests and fuzzing
// of the frame decoder.
func NewReaderLink(r io.Reader, features uint64, lim Limits) *StreamLink {
	return newStreamLink(r, io.Discard, io.NopCloser(nil), features, LinkOptions{Limits: lim})
}

func (l *StreamLink) Features() uint64   { return l.features }
func (l *StreamLink) LocalAddr() string  { return l.local }
func (l *StreamLink) RemoteAddr() string { return l.remote }

// Close closes the stream. The read chunk is released by the reader when
// it sees the error, never here, since the reader may still be using it.
func (l *StreamLink) Close() error {
	err := l.closer.Close()
	if l.closed.CompareAndSwap(false, true) {
		close(l.done)
		l.inbound.Done()
	}
	return err
}

// WriteFrames encodes the frames and writes them with as few syscalls as the
// write buffer allows.
func (l *StreamLink) WriteFrames(frames []Frame) error {
	// An idle link holds no write buffer: a small batch (an ack, a
	// handshake frame) is encoded in the link's own 512 bytes, a larger
	// one borrows from the pool what it copies, up to writeBufSize.
	need := 0
	for i := range frames {
		if need += inlineBytes(&frames[i]); need >= writeBufSize {
			break
		}
	}
	if need <= smallWriteBuf {
		l.wbuf = l.wsmall[:0]
	} else {
		l.wb = GetBuffer(min(need, writeBufSize))
		l.wbuf = l.wb.B[:0]
	}
	defer l.putWriteBuf()
	l.iov = l.iov[:0]
	mark := 0 // start of wbuf bytes not yet in iov
	for i := range frames {
		f := &frames[i]
		p := f.Preamble
		p.LinkWord = 0
		p.FrontLen, p.DataLen = uint32(len(f.Front)), uint32(len(f.Data))
		if l.noCRC && len(f.Data) > 0 {
			p.Flags |= FlagNoDataCRC
		}
		var dcrc uint32
		if p.HasSegments() {
			dcrc = f.SendDataCRC(&p, l.features) // before Put: it may set FlagSourceCRC
		}
		inline := inlineBytes(f)
		if len(l.wbuf)+inline > cap(l.wbuf) {
			if err := l.flush(mark); err != nil {
				return err
			}
			mark = 0
		}
		n := len(l.wbuf)
		l.wbuf = l.wbuf[:n+PreambleSize]
		p.Put(l.wbuf[n:])
		if !p.HasSegments() {
			continue
		}
		mark = l.addSegment(f.Front, mark)
		mark = l.addSegment(f.Data, mark)
		n = len(l.wbuf)
		l.wbuf = l.wbuf[:n+EpilogueSize]
		PutEpilogue(l.wbuf[n:], CRC(f.Front), dcrc)
	}
	return l.flush(mark)
}

// inlineBytes is what writing f copies into the write buffer: the
// preamble, the epilogue and the segments small enough to copy.
func inlineBytes(f *Frame) int {
	n := PreambleSize + EpilogueSize
	if len(f.Front) <= copySegmentMax {
		n += len(f.Front)
	}
	if len(f.Data) <= copySegmentMax {
		n += len(f.Data)
	}
	return n
}

func (l *StreamLink) putWriteBuf() {
	if l.wb != nil {
		l.wb.Release()
	}
	l.wb, l.wbuf = nil, nil
}

// addSegment copies a small segment into wbuf, or ends the current wbuf
// run and adds a large one as its own iovec. It returns the new mark.
func (l *StreamLink) addSegment(seg []byte, mark int) int {
	if len(seg) <= copySegmentMax {
		l.wbuf = append(l.wbuf, seg...)
		return mark
	}
	if len(l.wbuf) > mark {
		l.iov = append(l.iov, l.wbuf[mark:])
	}
	l.iov = append(l.iov, seg)
	return len(l.wbuf)
}

func (l *StreamLink) flush(mark int) error {
	if len(l.wbuf) > mark {
		l.iov = append(l.iov, l.wbuf[mark:])
	}
	var err error
	if len(l.iov) == 1 {
		_, err = l.w.Write(l.iov[0])
	} else if len(l.iov) > 1 {
		l.tmp = l.iov
		_, err = l.tmp.WriteTo(l.w)
	}
	clear(l.iov) // drop references to caller segments
	l.iov = l.iov[:0]
	l.wbuf = l.wbuf[:0]
	return err
}

// ReadFrame reads and verifies the next frame.
func (l *StreamLink) ReadFrame(f *Frame) error {
	err := l.readFrame(f)
	if err != nil {
		f.Charge.Release()
		if l.chunk != nil {
			// The link is dead after any error; give the chunk back.
			l.chunk.Release()
			l.chunk = nil
			l.rpos, l.rend = 0, 0
		}
	}
	return err
}

func (l *StreamLink) readFrame(f *Frame) error {
	if err := l.fill(PreambleSize); err != nil {
		return err
	}
	if err := f.Preamble.Parse(l.chunk.B[l.rpos:l.rend], l.lim); err != nil {
		return err
	}
	if err := f.Preamble.CheckAgreed(l.features, false); err != nil {
		return err
	}
	total := f.WireSize()
	if total <= bigFrameBytes {
		// A small message is charged whole before the rest of it is read.
		if err := l.charge(f, total-PreambleSize); err != nil {
			return err
		}
		if err := l.fill(total); err != nil {
			return err
		}
		b := l.chunk.B[l.rpos : l.rpos+total]
		l.rpos += total
		if !f.HasSegments() {
			f.Front, f.Data, f.Buf = nil, nil, nil
			return nil
		}
		front := b[PreambleSize : PreambleSize+int(f.FrontLen)]
		data := b[len(front)+PreambleSize : total-EpilogueSize]
		epi := b[total-EpilogueSize:]
		if l.startSum(f) {
			l.sum.Add(data)
		}
		if err := l.checkEpilogue(f, epi, front); err != nil {
			return err
		}
		if len(data) == 0 {
			if l.pinned.Load() <= pinAllowance {
				l.chunk.Ref()
				f.Front, f.Data, f.Buf = front, nil, l.chunk
				return nil
			}
			l.copied.Add(1)
			buf := getFitted(len(front))
			copy(buf.B, front)
			f.Front, f.Data, f.Buf = buf.B, nil, buf
			return nil
		}
		// The data lies wherever the stream put it in the chunk: it moves
		// to a buffer of its own, on a DataAlign boundary, with the front
		// after it (a copy of at most bigFrameBytes, as Ceph copies a
		// segment out of its read-ahead buffer). That also keeps a held
		// message from pinning the whole chunk.
		buf, placed := GetAligned(len(data)+len(front), 0)
		copy(placed, data)
		copy(placed[len(data):], front)
		f.Data, f.Front, f.Buf = placed[:len(data)], placed[len(data):], buf
		l.handChunks(f)
		return nil
	}
	// A large frame: its segments and epilogue go into a buffer of their own.
	l.rpos += PreambleSize
	body := total - PreambleSize
	buf, b, err := l.readBody(f, body)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF { // the preamble was read: this is mid-frame
			return truncated("the stream ended inside a %d-byte frame", total)
		}
		return fmt.Errorf("msgr wire: reading %d-byte frame: %w", total, err)
	}
	front := b[:f.FrontLen]
	data := b[f.FrontLen : body-EpilogueSize]
	if err := l.checkEpilogue(f, b[body-EpilogueSize:], front); err != nil {
		buf.Release()
		return err
	}
	f.Front, f.Data, f.Buf = front, data, buf
	l.handChunks(f)
	return nil
}

// startSum starts l.sum for f's data segment when it is to be
// checksummed: to check the sender's data CRC, or for the chunk CRCs of
// a MESSAGE (LinkOptions.DataChunk), which the sender's CRC is then
// checked against. It reports whether it did.
func (l *StreamLink) startSum(f *Frame) bool {
	chunk := 0
	if f.Tag == TagMessage && f.DataLen > 0 {
		chunk = l.dataChunk
	}
	l.summing = chunk > 0 || f.Flags&FlagNoDataCRC == 0 && f.HasSegments()
	if l.summing {
		l.sum.Start(chunk)
	}
	return l.summing
}

// checkEpilogue verifies a frame's segment CRCs, the data's as l.sum
// folded it (Frame.CheckEpilogue, which hands that CRC up with the frame).
func (l *StreamLink) checkEpilogue(f *Frame, epi, front []byte) error {
	var dcrc uint32
	if l.summing {
		dcrc, _ = l.sum.Finish()
	}
	return f.CheckEpilogue(epi, front, dcrc, l.summing)
}

// handChunks hands the chunk CRCs l.sum computed for f's data up with f,
// in storage of f.Buf's.
func (l *StreamLink) handChunks(f *Frame) {
	if !l.summing || l.sum.chunk == 0 {
		return
	}
	_, crcs := l.sum.Finish()
	f.DataChunkCRCs, f.DataChunk = f.Buf.SetChunkCRCs(crcs), l.sum.chunk
}

// dataCRC is the CRC32C of a data segment a link writes without one
// from its sender. Tests count it through testHookDataCRC.
func dataCRC(b []byte) uint32 {
	if testHookDataCRC != nil {
		testHookDataCRC(len(b))
	}
	return CRC(b)
}

// testHookDataCRC, when set (tests, before any link runs), is called with
// the size of each data segment a link checksums to write it
// (Frame.SendDataCRC).
var testHookDataCRC func(n int)

// readBody reads a large frame's body (segments and epilogue) into a
// buffer of its own, starting with what the read chunk already holds. A
// body above growFrom is read into a buffer that doubles as bytes arrive,
// so memory follows what the peer sent, not what it claimed. So does it
// from growSlow while the budget is more than half spent, so that peers
// that claim large messages and send little cannot spend it; each buffer is
// charged before it is taken.
//
// The body is placed in its buffer so that the data segment starts on a
// DataAlign boundary (GetAligned), the front before it: read straight from
// the socket, the data lands where O_DIRECT can write it from. b is the
// body within buf.
func (l *StreamLink) readBody(f *Frame, body int) (buf *Buffer, b []byte, err error) {
	first := min(body, growFrom)
	if !l.budget.Calm(int64(first)) {
		first = min(body, growSlow)
	}
	if err := l.charge(f, first); err != nil {
		return nil, nil, err
	}
	at := int(f.FrontLen)
	buf, b = GetAligned(first, at)
	l.startSum(f)
	n := 0
	for {
		// What the chunk read ahead comes first: it may hold more than a
		// small first buffer.
		m := copy(b[n:], l.chunk.B[l.rpos:l.rend])
		l.rpos += m
		n += m
		l.sumTo(f, b, n)
		for n < len(b) {
			// Each read's bytes are checksummed right after it, while
			// they are in the cache, not in a second pass over the body.
			end := len(b)
			if l.summing {
				end = min(end, n+sumReadMax)
			}
			k, err := l.r.Read(b[n:end])
			n += k
			l.sumTo(f, b, n)
			if err != nil && n < len(b) {
				buf.Release()
				return nil, nil, err
			}
		}
		if n == body {
			return buf, b, nil
		}
		if err := l.charge(f, min(2*n, body)); err != nil {
			buf.Release()
			return nil, nil, err
		}
		next, nb := GetAligned(min(2*n, body), at)
		copy(nb, b)
		buf.Release()
		buf, b = next, nb
	}
}

// sumTo folds into l.sum the data segment's bytes among the first n of
// body b.
func (l *StreamLink) sumTo(f *Frame, b []byte, n int) {
	if !l.summing {
		return
	}
	from := int(f.FrontLen) + l.sum.Len()
	if to := min(n, int(f.FrontLen)+int(f.DataLen)); to > from {
		l.sum.Add(b[from:to])
	}
}

// charge brings a MESSAGE or SEALED frame's charge of the budget up to
// upTo bytes of its body, counted as its segments (the epilogue is not
// charged), waiting while the budget is spent. A SEALED frame most often
// seals a MESSAGE: charged here, before its payload is read, as a MESSAGE
// in clear is, it holds the budget for the frame the secure link opens
// from it.
func (l *StreamLink) charge(f *Frame, upTo int) error {
	if l.budget == nil || !f.Tag.CarriesMessage() || !f.HasSegments() {
		return nil
	}
	want := min(int64(upTo), int64(f.FrontLen)+int64(f.DataLen))
	if more := want - f.Charge.Bytes(); more > 0 && !l.budget.Grow(&f.Charge, more, l.done) {
		return net.ErrClosed
	}
	return nil
}

// fill makes at least n bytes available at chunk.B[rpos:rend], moving a
// partial frame to a fresh chunk when the current one is full. The old
// chunk stays alive for as long as frames handed out still point into it.
func (l *StreamLink) fill(n int) error {
	if l.rend-l.rpos >= n {
		return nil
	}
	l.need = n
	if l.chunk == nil || l.rpos+n > len(l.chunk.B) {
		l.newChunk()
	}
	for l.rend-l.rpos < n {
		var m int
		var err error
		if l.poll != nil {
			m, err = l.poll.ReadPoll(l.pollBuf, l.pollIdle)
		} else {
			m, err = l.r.Read(l.chunk.B[l.rend:])
		}
		l.rend += m
		l.burst += m
		if l.chunk != nil && l.rend == len(l.chunk.B) {
			// The read filled the chunk: more comes than it holds. (A
			// PollReader that failed may have let the chunk go.)
			l.chunkSize = min(2*l.chunkSize, readChunkSize)
		}
		if err != nil {
			if l.rend-l.rpos >= n {
				return nil
			}
			if err == io.EOF && l.rend > l.rpos {
				return truncated("the stream ended %d bytes into a frame", l.rend-l.rpos)
			}
			return err
		}
	}
	return nil
}

// newChunk starts a chunk that holds need bytes from rpos, moving the
// partial frame of the current one, if any, into it.
func (l *StreamLink) newChunk() {
	c := GetBuffer(max(l.chunkSize, l.need))
	c.B = c.B[:cap(c.B)] // the whole size class
	if l.chunk != nil {
		copy(c.B, l.chunk.B[l.rpos:l.rend])
		l.retire()
	}
	l.rend -= l.rpos
	l.rpos = 0
	l.chunk = c
}

// readBuf is where a PollReader reads: the free end of the chunk, taking
// a new chunk if readIdle let the last one go.
func (l *StreamLink) readBuf() []byte {
	if l.chunk == nil {
		l.newChunk()
	}
	return l.chunk.B[l.rend:]
}

// readIdle runs when a PollReader is about to wait for bytes. At a frame
// boundary the chunk goes back (frames handed out keep it alive as long as
// they need it) and the next one is sized by the burst that just ended;
// in the middle of a frame the chunk is kept.
func (l *StreamLink) readIdle() {
	if l.chunk == nil || l.rpos != l.rend {
		return
	}
	l.chunkSize = minReadChunk
	for l.chunkSize < l.burst && l.chunkSize < readChunkSize {
		l.chunkSize *= 2
	}
	l.burst = 0
	l.retire()
	l.chunk = nil
	l.rpos, l.rend = 0, 0
}

// retire lets the read chunk go. Frames that still point into it keep
// it alive: it counts as pinned until the last of them is released.
func (l *StreamLink) retire() {
	c := l.chunk
	// Only a holder of a reference adds one (a frame in the chunk taken
	// on by a writer, say), so with the link's the last, none comes
	// back; others seen may go meanwhile, and then the link's Release
	// below is the last and takes the chunk off pinned again.
	if c.refs.Load() > 1 {
		c.pin = &l.pinned
		l.pinned.Add(int64(cap(c.B)))
	}
	c.Release()
}

// Pinned is the bytes of read chunks the link has moved past that frames
// it handed out still keep alive (at most 512 KiB: see pinAllowance). The
// chunk being read is not counted. Safe for concurrent use.
func (l *StreamLink) Pinned() int64 { return l.pinned.Load() }

// Copied is how many frames the link copied out of its read chunk because
// held frames pinned too much of its chunks. Safe for concurrent use.
func (l *StreamLink) Copied() int64 { return l.copied.Load() }

// ExchangeBanner writes our banner to rw, reads the peer's and negotiates,
// for a stream link: mine as Banner.Stream makes it.
func ExchangeBanner(rw io.ReadWriter, mine Banner) (uint64, error) {
	mine = mine.Stream()
	var b [BannerSize]byte
	mine.Put(b[:])
	if _, err := rw.Write(b[:]); err != nil {
		return 0, fmt.Errorf("msgr wire: writing banner: %w", err)
	}
	switch n, err := io.ReadFull(rw, b[:]); {
	case err == io.ErrUnexpectedEOF:
		return 0, truncated("the stream ended %d bytes into the banner", n)
	case err != nil:
		return 0, fmt.Errorf("msgr wire: reading banner: %w", err)
	}
	peer, err := ParseBanner(b[:])
	if err != nil {
		return 0, err
	}
	return Negotiate(mine, peer)
}

// Buffered reports whether bytes of a next frame are already read, so the
// caller may hold back an ack until the burst is processed.
func (l *StreamLink) Buffered() bool { return l.rend > l.rpos }

// SetWriteSpace gives the link a way to tell how many bytes a write can
// take now without blocking (free socket send buffer).
func (l *StreamLink) SetWriteSpace(fn func() int) { l.space = fn }

// WriteSpace is the free send-buffer estimate; 0 when unknown, which tells
// the messenger never to write from a sender's goroutine.
func (l *StreamLink) WriteSpace() int {
	if l.space == nil {
		return 0
	}
	return l.space()
}
