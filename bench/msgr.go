package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// MsgrOptions configure RunMsgr. Zero fields take the defaults noted.
type MsgrOptions struct {
	// Transports are msgr address schemes; each row runs on
	// SCHEME://127.0.0.1:0. Default tcp.
	Transports []string
	// Sizes are payload bytes per message. Default 64, 4 KiB, 1 MiB.
	Sizes []int
	// Depths are messages in flight. Default 1, 16, 128.
	Depths []int
	// Modes default to stream and pingpong.
	Modes []Mode
	// Duration is measured per row, after Warmup, which is discarded.
	// Defaults 3s and 500ms; a negative Warmup means none.
	Duration time.Duration
	Warmup   time.Duration
	// Baseline adds a raw TCP row after each combination's messenger
	// rows, and for every rdma+PROVIDER transport a raw libfabric row on
	// PROVIDER.
	Baseline bool
	// DisableDataCRC turns off the messenger's data CRC (the front and
	// preamble keep theirs). The raw baseline never checksums.
	DisableDataCRC bool
	// ZeroCopy takes the client's payload from Conn.AllocPayload, which on
	// RDMA is registered memory the peer reads with no copy; without it the
	// payload is ordinary memory, copied once into registered memory.
	ZeroCopy bool
	// Logger gets a line per finished row; the messengers get it too, at
	// Warn and above unless it is enabled for Debug. Default: discard.
	Logger *slog.Logger
	// OnRow, if set, is called after each row, e.g. to print progress.
	OnRow func(Row)
}

// maxFrontBytes is room for a BenchPing front: two one-byte tags and two
// varints of at most 10 bytes.
const maxFrontBytes = 2 * (1 + 10)

// maxBenchSize is the largest payload the messenger's default limit takes.
const maxBenchSize = 64<<20 - maxFrontBytes

func (o *MsgrOptions) setDefaults() error {
	if len(o.Transports) == 0 {
		o.Transports = []string{"tcp"}
	}
	if len(o.Sizes) == 0 {
		o.Sizes = []int{64, 4 << 10, 1 << 20}
	}
	if len(o.Depths) == 0 {
		o.Depths = []int{1, 16, 128}
	}
	if len(o.Modes) == 0 {
		o.Modes = []Mode{Stream, PingPong}
	}
	if o.Duration == 0 {
		o.Duration = 3 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 500 * time.Millisecond
	}
	o.Warmup = max(o.Warmup, 0)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Duration < 0 {
		return fmt.Errorf("bench: duration %v must be positive", o.Duration)
	}
	for _, s := range o.Sizes {
		if s < 0 || s > maxBenchSize {
			return fmt.Errorf("bench: size %d: want 0 to %d bytes (the messenger's 64 MiB message limit)", s, maxBenchSize)
		}
	}
	for _, d := range o.Depths {
		if d < 1 {
			return fmt.Errorf("bench: depth %d: want at least 1", d)
		}
	}
	for _, m := range o.Modes {
		if _, err := ParseMode(string(m)); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	return nil
}

// messengerLogger is what the messengers log to: warnings and errors only,
// unless the caller asked for debug output.
func (o *MsgrOptions) messengerLogger() *slog.Logger {
	h := o.Logger.Handler()
	if h.Enabled(context.Background(), slog.LevelDebug) {
		return o.Logger
	}
	return slog.New(levelFloor{h, slog.LevelWarn})
}

// RunMsgr runs every combination of the options and returns one row per
// combination and transport (plus the baseline rows), in the order they
// ran. A transport the messenger cannot use fails the whole run before
// anything is measured, so a typo does not cost minutes.
func RunMsgr(ctx context.Context, o MsgrOptions) ([]Row, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	for _, tr := range o.Transports {
		if err := probeTransport(ctx, &o, tr); err != nil {
			return nil, err
		}
	}
	if o.Baseline {
		if err := checkFabricBaseline(&o); err != nil {
			return nil, err
		}
	}
	var rows []Row
	add := func(r Row) {
		o.Logger.Info("bench: row done", "transport", r.Transport, "mode", r.Mode, "size", FormatSize(int64(r.Size)),
			"depth", r.Depth, "msgs_per_sec", int64(r.MsgsPerSec), "p50_us", r.P50Us)
		if o.OnRow != nil {
			o.OnRow(r)
		}
		rows = append(rows, r)
	}
	for _, size := range o.Sizes {
		for _, depth := range o.Depths {
			for _, mode := range o.Modes {
				for _, tr := range o.Transports {
					r, err := runMsgrRow(ctx, &o, tr, mode, size, depth)
					if err != nil {
						return rows, fmt.Errorf("bench: %s %s size %s depth %d: %w", tr, mode, FormatSize(int64(size)), depth, err)
					}
					add(r)
				}
				if o.Baseline {
					r, err := runRawRow(ctx, &o, mode, size, depth)
					if err != nil {
						return rows, fmt.Errorf("bench: raw tcp %s size %s depth %d: %w", mode, FormatSize(int64(size)), depth, err)
					}
					add(r)
					for _, prov := range fabricProviders(o.Transports) {
						r, err := runFabricRow(ctx, &o, prov, mode, size, depth)
						if err != nil {
							return rows, fmt.Errorf("bench: raw libfabric %s %s size %s depth %d: %w", prov, mode, FormatSize(int64(size)), depth, err)
						}
						add(r)
					}
				}
			}
		}
	}
	CompareToRaw(rows)
	return rows, nil
}

// CompareToRaw fills the VsRaw fields of messenger rows that have a
// baseline row for the same mode, size and depth: raw-fabric on the same
// provider for rdma+ rows, raw-tcp for the others.
func CompareToRaw(rows []Row) {
	for i := range rows {
		r := &rows[i]
		base, prov := baselineOf(r)
		if base == "" {
			continue
		}
		for j := range rows {
			b := &rows[j]
			if b.Transport != base || b.Provider != prov || b.Mode != r.Mode || b.Size != r.Size || b.Depth != r.Depth {
				continue
			}
			r.VsRawBytesPerSec = ratio(r.BytesPerSec, b.BytesPerSec)
			r.VsRawP50 = ratio(r.P50Us, b.P50Us)
			r.VsRawP99 = ratio(r.P99Us, b.P99Us)
		}
	}
}

// baselineOf returns the transport and provider of the baseline r is
// compared with, or "" if r is a baseline row itself.
func baselineOf(r *Row) (transport, provider string) {
	switch r.Transport {
	case RawTransport, FabricTransport:
		return "", ""
	}
	if strings.HasPrefix(r.Transport, "rdma+") {
		if r.Provider != "" {
			return FabricTransport, r.Provider
		}
		return FabricTransport, strings.TrimPrefix(r.Transport, "rdma+")
	}
	return RawTransport, ""
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// probeTransport checks that the messenger can listen on the transport.
func probeTransport(ctx context.Context, o *MsgrOptions, tr string) error {
	m, err := msgr.New(msgr.Options{Name: "osd.0", Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) { m.Release() }),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer m.Shutdown(context.Background())
	if _, err := m.Listen(ctx, tr+"://127.0.0.1:0"); err != nil {
		return fmt.Errorf("bench: transport %q: %w", tr, err)
	}
	return nil
}

// Message types of the benchmark; both are fast-dispatched.
const (
	typePing uint16 = 0xbe01
	typePong uint16 = 0xbe02
)

// appendPing appends a BenchPing front. It writes the protobuf wire format
// by hand, byte for byte what proto.Marshal produces for non-zero fields,
// because reflection-based marshalling would cost more than the rest of
// the send path for a 64-byte message.
func appendPing(b []byte, id uint64, sentUnixNano int64) []byte {
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, id)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(sentUnixNano))
}

// parsePing decodes a BenchPing front, skipping unknown fields as proto
// does.
func parsePing(b []byte) (id uint64, sentUnixNano int64, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, fmt.Errorf("bench ping front: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ == protowire.VarintType && (num == 1 || num == 2) {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, 0, fmt.Errorf("bench ping front: %w", protowire.ParseError(n))
			}
			b = b[n:]
			if num == 1 {
				id = v
			} else {
				sentUnixNano = int64(v)
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, 0, fmt.Errorf("bench ping front: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return id, sentUnixNano, nil
}

// msgPool recycles the client's outgoing messages. The messenger hands a
// message back through OnRelease once the server acked it, so in steady
// state the pool holds every message there will ever be and sending
// allocates nothing. It grows on demand rather than holding exactly depth
// messages because a message stays with the messenger until acked, which
// can be well after the server handled it. All messages share one payload
// buffer: the messenger only reads it and its contents do not matter.
//
// Returns (on the client's receive path) and takes (on the sender) are on
// different cores in a stream, and a lock per message each way made the
// pool's mutex one of the hotter lines of the profile. So a single sender
// takes with takeOwned from a list only it touches, refilled by swapping
// in everything returned meanwhile under one lock acquisition.
// freeList is a stack of reusable values shared by goroutines.
type freeList[T any] struct {
	mu   sync.Mutex
	free []T
}

// pop returns a value and true, or the zero value and false when empty.
func (l *freeList[T]) pop() (T, bool) {
	var zero T
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.free)
	if n == 0 {
		return zero, false
	}
	v := l.free[n-1]
	l.free[n-1] = zero
	l.free = l.free[:n-1]
	return v, true
}

func (l *freeList[T]) push(v T) {
	l.mu.Lock()
	l.free = append(l.free, v)
	l.mu.Unlock()
}

type msgPool struct {
	list    freeList[*msgr.Message] // returned by the messenger
	owned   []*msgr.Message         // takeOwned's; its single caller only
	payload []byte
	buf     *wire.Buffer        // payload's buffer with ZeroCopy, else nil
	release func(*msgr.Message) // p.put, made once so assigning it does not allocate
}

func newMsgPool(size, prealloc int) *msgPool {
	p := &msgPool{payload: make([]byte, size), owned: make([]*msgr.Message, 0, 2*prealloc)}
	p.list.free = make([]*msgr.Message, 0, 2*prealloc)
	for i := range p.payload {
		p.payload[i] = byte(i)
	}
	p.release = p.put
	for range prealloc {
		p.list.free = append(p.list.free, p.newMessage())
	}
	return p
}

func (p *msgPool) newMessage() *msgr.Message {
	return &msgr.Message{Type: typePing, Front: make([]byte, 0, maxFrontBytes), Data: p.payload, OnRelease: p.release}
}

// get takes a message; any goroutine may call it.
func (p *msgPool) get() *msgr.Message {
	if m, ok := p.list.pop(); ok {
		return m
	}
	return p.newMessage()
}

// takeOwned takes a message; only one goroutine may call it, and the
// messages it holds are not seen by get.
func (p *msgPool) takeOwned() *msgr.Message {
	if len(p.owned) == 0 {
		p.list.mu.Lock()
		p.owned, p.list.free = p.list.free, p.owned
		p.list.mu.Unlock()
	}
	if n := len(p.owned); n > 0 {
		m := p.owned[n-1]
		p.owned[n-1] = nil
		p.owned = p.owned[:n-1]
		return m
	}
	return p.newMessage()
}

// putOwned returns a message takeOwned gave and the messenger refused.
func (p *msgPool) putOwned(m *msgr.Message) { p.owned = append(p.owned, m) }

func (p *msgPool) put(m *msgr.Message) { p.list.push(m) }

// echo is a server reply that carries the request's own front and payload
// back, so echoing copies nothing; the request is released (returning its
// receive buffer and credit) only when the messenger is done with the
// reply.
type echo struct {
	m    msgr.Message
	req  *msgr.Message
	pool *echoPool
}

func (e *echo) release(*msgr.Message) {
	req := e.req
	e.req, e.m.Front, e.m.Data = nil, nil, nil
	e.pool.put(e)
	req.Release()
}

type echoPool struct {
	list freeList[*echo]
}

func (p *echoPool) get() *echo {
	if e, ok := p.list.pop(); ok {
		return e
	}
	e := &echo{pool: p}
	e.m.Type = typePong
	e.m.OnRelease = e.release
	return e
}

func (p *echoPool) put(e *echo) { p.list.push(e) }

// msgrRow is one messenger row in progress.
type msgrRow struct {
	mode        Mode
	size, depth int
	run         *run
	ctx         context.Context // cancelled on failure
	cancel      context.CancelFunc

	// hist is written by the goroutine that completes messages: the
	// server's receive path for stream, the client's for pingpong. The
	// messenger calls a Dispatcher for one Conn from one goroutine.
	hist    *Histogram
	win     *window // stream
	pool    *msgPool
	echoes  echoPool
	nextID  atomic.Uint64
	pending atomic.Int64  // pingpong: requests without a reply
	drained chan struct{} // pingpong: closed when pending reaches 0 after stop

	closing atomic.Bool // shutting down: resets and send errors are expected
	errOnce sync.Once
	err     error
	failed  chan struct{}
	wg      sync.WaitGroup // fallback senders
}

// fail records the first error and stops the row.
func (r *msgrRow) fail(err error) {
	if r.closing.Load() {
		return
	}
	r.errOnce.Do(func() {
		r.err = err
		close(r.failed)
		r.cancel()
	})
}

// record counts a completed message whose front says when it was sent.
func (r *msgrRow) record(m *msgr.Message) {
	if len(m.Data) != r.size {
		r.fail(fmt.Errorf("message with %d payload bytes, want %d", len(m.Data), r.size))
		return
	}
	if !r.run.measuring() {
		return
	}
	_, sent, err := parsePing(m.Front)
	if err != nil {
		r.fail(err)
		return
	}
	r.hist.Record(r.run.clk.now() - (sent - r.run.clk.base))
}

// stamp prepares a ping for sending now.
func (r *msgrRow) stamp(m *msgr.Message) {
	m.Front = appendPing(m.Front[:0], r.nextID.Add(1), r.run.clk.base+r.run.clk.now())
	if b := r.pool.buf; b != nil {
		// Each message holds a reference on the shared payload buffer
		// until the messenger is done with it.
		b.Ref()
		m.SetPayload(b)
	}
}

// send is a non-blocking send for handlers, which run on the messenger's
// receive path and must not wait. A full send queue (possible with large
// messages at depth) is handed to a goroutine that waits instead; that
// allocates, but only on this rare path.
func (r *msgrRow) send(c *msgr.Conn, m *msgr.Message) {
	err := c.TrySend(m)
	if err == nil {
		return
	}
	if errors.Is(err, msgr.ErrWouldBlock) {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := c.Send(r.ctx, m); err != nil {
				r.sendFailed(m, err)
			}
		}()
		return
	}
	r.sendFailed(m, err)
}

// sendFailed recycles a message the messenger refused, which stays ours.
func (r *msgrRow) sendFailed(m *msgr.Message, err error) {
	isPing := m.Type == typePing
	m.OnRelease(m)
	if isPing {
		r.replied()
	}
	r.fail(fmt.Errorf("send: %w", err))
}

// replied accounts for a request that will get no further reply.
func (r *msgrRow) replied() {
	if r.pending.Add(-1) == 0 {
		close(r.drained)
	}
}

func (r *msgrRow) HandleEvent(ev msgr.Event) {
	if ev.Kind == msgr.EventReset || ev.Kind == msgr.EventRemoteReset {
		r.fail(fmt.Errorf("connection %s: %v", ev.Kind, ev.Err))
	}
}

// serverDispatcher is the "osd.0" end.
type serverDispatcher struct{ *msgrRow }

func (serverDispatcher) CanFastDispatch(uint16) bool { return true }

func (d serverDispatcher) Dispatch(m *msgr.Message) {
	r := d.msgrRow
	if r.mode == Stream {
		r.record(m)
		m.Release()
		r.win.complete()
		return
	}
	e := r.echoes.get()
	e.req = m
	e.m.Front, e.m.Data = m.Front, m.Data
	r.send(m.Conn(), &e.m)
}

// clientDispatcher is the "client.bench" end; it hears pingpong replies.
type clientDispatcher struct{ *msgrRow }

func (clientDispatcher) CanFastDispatch(uint16) bool { return true }

func (d clientDispatcher) Dispatch(m *msgr.Message) {
	r := d.msgrRow
	c := m.Conn()
	r.record(m)
	m.Release()
	if r.run.stopping() {
		r.replied()
		return
	}
	next := r.pool.get()
	r.stamp(next)
	r.send(c, next)
}

// shutdownTimeout bounds tearing a row's messengers down, and drainTimeout
// waiting for the last messages after the measured interval.
const (
	shutdownTimeout = 10 * time.Second
	drainTimeout    = 10 * time.Second
)

func runMsgrRow(ctx context.Context, o *MsgrOptions, transport string, mode Mode, size, depth int) (row Row, err error) {
	r := &msgrRow{mode: mode, size: size, depth: depth, hist: NewHistogram(), failed: make(chan struct{}), drained: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(ctx)
	defer r.cancel()
	// A stream sender wakes when a quarter of the window is free; a pingpong
	// client needs no window, each reply sends the next request.
	r.win = newWindow(depth, depth/4)
	r.pool = newMsgPool(size, depth)
	log := o.messengerLogger()

	srv, err := msgr.New(msgr.Options{Name: "osd.0", Dispatcher: serverDispatcher{r}, Logger: log, DisableDataCRC: o.DisableDataCRC})
	if err != nil {
		return row, err
	}
	cli, err := msgr.New(msgr.Options{Name: "client.bench", Dispatcher: clientDispatcher{r}, Logger: log, DisableDataCRC: o.DisableDataCRC})
	if err != nil {
		srv.Shutdown(ctx)
		return row, err
	}
	defer func() {
		r.closing.Store(true)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		// Both at once: each side's close waits a little for the other.
		errc := make(chan error, 1)
		go func() { errc <- srv.Shutdown(sctx) }()
		serr := errors.Join(cli.Shutdown(sctx), <-errc)
		r.wg.Wait()
		if err == nil && serr != nil {
			err = serr
		}
		if err == nil {
			// Every goroutine that recorded has ended: the histogram is ours.
			row = r.run.row(transport, mode, size, depth, r.hist)
			row.Provider, _ = fabricProvider(transport)
			row.ZeroCopy = o.ZeroCopy
		}
	}()

	addr, err := srv.Listen(r.ctx, transport+"://127.0.0.1:0")
	if err != nil {
		return row, err
	}
	conn, err := cli.Connect(r.ctx, addr, "osd.0")
	if err != nil {
		return row, err
	}
	wctx, cancel := context.WithTimeout(r.ctx, shutdownTimeout)
	err = conn.WaitReady(wctx)
	cancel()
	if err != nil {
		return row, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	if o.ZeroCopy {
		b, err := conn.AllocPayload(size)
		if err != nil {
			return row, fmt.Errorf("allocating a %d-byte payload: %w", size, err)
		}
		copy(b.B, r.pool.payload)
		r.pool.payload, r.pool.buf = b.B, b
		// Messages still with the messenger hold references of their own.
		defer b.Release()
	}

	r.run = startRun(r.ctx, o.Warmup, o.Duration)
	if mode == Stream {
		r.stream(conn)
	} else {
		r.pingpong(conn)
	}
	<-r.run.stopped
	if o.Logger.Enabled(ctx, slog.LevelDebug) {
		// The counters say where a slow row went: stalls, grant frames.
		o.Logger.Debug("bench: client conn", "transport", transport, "mode", mode, "size", size, "depth", depth,
			"stats", fmt.Sprintf("%+v", conn.Stats()))
		for sc := range srv.Conns() {
			o.Logger.Debug("bench: server conn", "transport", transport, "mode", mode, "size", size, "depth", depth,
				"stats", fmt.Sprintf("%+v", sc.Stats()))
		}
	}
	select {
	case <-r.failed:
		return row, r.err
	default:
	}
	return row, ctx.Err()
}

// stream sends until the run stops, then waits for the server to handle
// everything in flight.
func (r *msgrRow) stream(conn *msgr.Conn) {
	for !r.run.stopping() {
		if !r.win.acquire(r.run.stopped) {
			break
		}
		m := r.pool.takeOwned()
		r.stamp(m)
		if err := conn.Send(r.ctx, m); err != nil {
			r.pool.putOwned(m)
			r.win.unacquire()
			r.fail(fmt.Errorf("send: %w", err))
			return
		}
	}
	dctx, cancel := context.WithTimeout(r.ctx, drainTimeout)
	defer cancel()
	if !r.win.drain(dctx.Done()) {
		r.fail(fmt.Errorf("%d messages still in flight %v after the end", r.win.sent-r.win.done.Load(), drainTimeout))
	}
}

// pingpong puts depth requests in flight; replies keep them going until the
// run stops, and then the last replies are waited for.
func (r *msgrRow) pingpong(conn *msgr.Conn) {
	r.pending.Store(int64(r.depth))
	for i := range r.depth {
		m := r.pool.get()
		r.stamp(m)
		if err := conn.Send(r.ctx, m); err != nil {
			r.pool.put(m)
			for range r.depth - i {
				r.replied()
			}
			r.fail(fmt.Errorf("send: %w", err))
			return
		}
	}
	<-r.run.stopped
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	select {
	case <-r.drained:
	case <-r.failed:
	case <-t.C:
		r.fail(fmt.Errorf("%d requests without a reply %v after the end", r.pending.Load(), drainTimeout))
	}
}
