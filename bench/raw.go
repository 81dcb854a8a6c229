package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// The raw baseline: the same traffic as the messenger rows on a plain
// loopback TCP socket pair, framed as
//
//	u32 payload length | u64 id | i64 send time (clock ns) | payload
//
// It is written the way a careful hand-rolled TCP protocol would be, so
// the ratio measures the messenger's overhead and not a weak baseline:
// small frames are coalesced in a user-space buffer that is flushed when
// the writer would otherwise wait (or when the reader has no complete
// request left to answer), large payloads go out by writev without a copy,
// and reads go through a large buffer. It has no sequence numbers, acks,
// credits or CRCs: that is the work the messenger adds.
const (
	rawHeaderSize = 20
	rawBufSize    = 256 << 10 // as the messenger's stream link
	rawCopyMax    = 16 << 10  // payloads up to this are copied into the write buffer
)

// frameWriter coalesces frames into one buffer and sends large payloads as
// their own iovec.
type frameWriter struct {
	c   *net.TCPConn
	buf []byte
	iov net.Buffers
	tmp net.Buffers // what writev consumes; a field so it does not escape per call
}

func newFrameWriter(c *net.TCPConn) *frameWriter {
	return &frameWriter{c: c, buf: make([]byte, 0, rawBufSize), iov: make(net.Buffers, 0, 2)}
}

func putRawHeader(b []byte, n int, id uint64, sent int64) {
	binary.LittleEndian.PutUint32(b[0:], uint32(n))
	binary.LittleEndian.PutUint64(b[4:], id)
	binary.LittleEndian.PutUint64(b[12:], uint64(sent))
}

// write queues one frame; hdr must be rawHeaderSize bytes.
func (w *frameWriter) write(hdr, payload []byte) error {
	if len(payload) > rawCopyMax {
		w.buf = append(w.buf, hdr...)
		w.iov = append(w.iov[:0], w.buf, payload)
		w.tmp = w.iov
		_, err := w.tmp.WriteTo(w.c)
		clear(w.iov)
		w.buf = w.buf[:0]
		return err
	}
	if len(w.buf)+len(hdr)+len(payload) > cap(w.buf) {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, hdr...)
	w.buf = append(w.buf, payload...)
	return nil
}

func (w *frameWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.c.Write(w.buf)
	w.buf = w.buf[:0]
	return err
}

// readFrame reads one frame into hdr and payload (which must hold size
// bytes) and returns the payload length.
func readFrame(br *bufio.Reader, hdr []byte, payload []byte) (int, error) {
	if _, err := io.ReadFull(br, hdr); err != nil {
		return 0, err
	}
	n := int(binary.LittleEndian.Uint32(hdr))
	if n > len(payload) {
		return 0, fmt.Errorf("raw frame of %d bytes, want at most %d", n, len(payload))
	}
	_, err := io.ReadFull(br, payload[:n])
	return n, err
}

// nextFrameBuffered reports whether a whole frame is already buffered, so
// the echo server can answer it before flushing its replies.
func nextFrameBuffered(br *bufio.Reader) bool {
	if br.Buffered() < rawHeaderSize {
		return false
	}
	h, err := br.Peek(rawHeaderSize)
	if err != nil {
		return false
	}
	return br.Buffered() >= rawHeaderSize+int(binary.LittleEndian.Uint32(h))
}

// tcpPair connects two loopback TCP sockets. Go sets TCP_NODELAY on both,
// as the messenger's TCP transport does.
func tcpPair(ctx context.Context) (cli, srv *net.TCPConn, err error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
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
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		ln.Close()
		<-ch
		return nil, nil, err
	}
	a := <-ch
	if a.err != nil {
		c.Close()
		return nil, nil, a.err
	}
	return c.(*net.TCPConn), a.c.(*net.TCPConn), nil
}

// rawRow is one baseline row in progress.
type rawRow struct {
	ctx         context.Context
	mode        Mode
	size, depth int
	run         *run
	tally       *tally // written by the client's completing goroutine only
	win         *window
}

func runRawRow(ctx context.Context, o *MsgrOptions, mode Mode, size, depth int) (Row, error) {
	cli, srv, err := tcpPair(ctx)
	if err != nil {
		return Row{}, err
	}
	defer cli.Close()
	defer srv.Close()
	r := &rawRow{ctx: ctx, mode: mode, size: size, depth: depth}
	// Pingpong wakes the writer per reply, as each reply frees a slot; a
	// stream wakes it per quarter window, as the messenger rows do.
	batch := depth / 4
	if mode == PingPong {
		batch = 1
	}
	r.win = newWindow(depth, batch)
	// The run exists before the reader that records into it starts.
	r.run = startRun(ctx, o.runOptions(RawTransport, mode, size, depth))
	r.tally = r.run.newTally()

	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if mode == Stream {
			errs[0] = r.streamReader(srv)
		} else {
			errs[0] = r.echoServer(srv)
		}
	}()
	var werr error
	switch {
	case mode == Stream:
		werr = r.writer(cli)
	case depth == 1:
		werr = r.pingpongLoop(cli)
	default:
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[1] = r.replyReader(cli)
		}()
		werr = r.writer(cli)
	}
	<-r.run.stopped
	// Closing the client ends the server (EOF), whose close ends the
	// client's reader. After a failure nothing is drained and a side may
	// be stuck writing to a peer that stopped reading: close both.
	cli.CloseWrite()
	if werr != nil {
		cli.Close()
		srv.Close()
	}
	wg.Wait()
	for i, err := range errs {
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			errs[i] = nil
		}
	}
	if err := errors.Join(werr, errs[0], errs[1], ctx.Err()); err != nil {
		return Row{}, err
	}
	return r.run.row(RawTransport, mode, size, depth, r.tally), nil
}

// record counts a completed frame by the send time in its header.
func (r *rawRow) record(hdr []byte) {
	if r.run.measuring() {
		sent := int64(binary.LittleEndian.Uint64(hdr[12:]))
		now := r.run.clk.now()
		r.tally.record(now, now-sent)
	}
}

// writer sends frames within the window until the run stops, then waits
// for the rest to complete. Used by stream and by pingpong at depth > 1.
func (r *rawRow) writer(c *net.TCPConn) error {
	w := newFrameWriter(c)
	payload := make([]byte, r.size)
	var hdr [rawHeaderSize]byte
	var id uint64
	for !r.run.stopping() {
		if r.win.full() {
			// About to wait: what is buffered must go out first, or what
			// we wait for would never come.
			if err := w.flush(); err != nil {
				return err
			}
		}
		if !r.win.acquire(r.run.stopped) {
			break
		}
		id++
		putRawHeader(hdr[:], r.size, id, r.run.clk.now())
		if err := w.write(hdr[:], payload); err != nil {
			return err
		}
	}
	if err := w.flush(); err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(r.ctx, drainTimeout)
	defer cancel()
	if !r.win.drain(dctx.Done()) {
		return drainErr(r.ctx, "frames", r.win.sent-r.win.done.Load())
	}
	return nil
}

// streamReader is the stream's receiving end.
func (r *rawRow) streamReader(c *net.TCPConn) error {
	defer c.Close()
	return r.replyReader(c)
}

// replyReader records every frame that arrives on c: the stream's
// receiving end, and the pingpong client's at depth > 1.
func (r *rawRow) replyReader(c *net.TCPConn) error {
	br := bufio.NewReaderSize(c, rawBufSize)
	var hdr [rawHeaderSize]byte
	payload := make([]byte, r.size)
	for {
		if _, err := readFrame(br, hdr[:], payload); err != nil {
			return err
		}
		r.record(hdr[:])
		r.win.complete()
	}
}

// echoServer answers every frame with itself, flushing its replies once
// it has no complete request left to read.
func (r *rawRow) echoServer(c *net.TCPConn) error {
	defer c.Close()
	br := bufio.NewReaderSize(c, rawBufSize)
	w := newFrameWriter(c)
	var hdr [rawHeaderSize]byte
	payload := make([]byte, r.size)
	for {
		n, err := readFrame(br, hdr[:], payload)
		if err != nil {
			return err
		}
		if err := w.write(hdr[:], payload[:n]); err != nil {
			return err
		}
		if !nextFrameBuffered(br) {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
}

// pingpongLoop is depth-1 pingpong in one goroutine, write then read, the
// lowest latency plain TCP gives: the anchor TARGETS.md quotes.
func (r *rawRow) pingpongLoop(c *net.TCPConn) error {
	br := bufio.NewReaderSize(c, rawBufSize)
	frame := make([]byte, rawHeaderSize+r.size)
	in := make([]byte, r.size)
	var hdr [rawHeaderSize]byte
	var id uint64
	for !r.run.stopping() {
		id++
		putRawHeader(frame, r.size, id, r.run.clk.now())
		if _, err := c.Write(frame); err != nil {
			return err
		}
		if _, err := readFrame(br, hdr[:], in); err != nil {
			return err
		}
		r.record(hdr[:])
	}
	return nil
}
