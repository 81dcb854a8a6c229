package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/transports"
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
	// ZeroCopy takes the client's payloads from Conn.AllocPayload, which on
	// RDMA is registered memory moved with no copy; without it the payload
	// is ordinary memory, copied once into registered memory. Messages take
	// depth such buffers in turn (at most 64 MiB of them), as the raw
	// baseline sends from depth buffers: one buffer for all would stay in
	// the CPU cache and flatter the messenger.
	ZeroCopy bool
	// Logger gets a line per finished row; the messengers get it too, at
	// Warn and above unless it is enabled for Debug. Default: discard.
	Logger *slog.Logger
	// OnRow, if set, is called after each row, e.g. to print progress.
	OnRow func(Row)
	// Segment is the width of a throughput segment; default 1s.
	Segment time.Duration
	// Progress, if set, gets a snapshot of the running row every 250ms
	// and one with PhaseDone when its timeline ends (a live display).
	Progress func(Progress)
	// Conns is the connections of each row, each from its own client
	// messenger with its own sender and Depth messages in flight; the
	// row reports their sum. Default 1.
	Conns int
	// Remote, if set, is the address (SCHEME://HOST:PORT) of a server
	// started with ServeMsgr (`osprey bench msgr --serve`), in another
	// process or on another host, that the rows run against; the
	// transport is the address's scheme. A remote server acknowledges
	// each stream message, so stream latency is then the time from send
	// to acknowledgement, and CPU is this process's only. No baseline.
	Remote string
	// Faults are injected into every messenger of the rows, server and
	// clients (only the clients against a Remote server), as `osprey osd
	// --inject-socket-failures` does into an OSD's. The sessions are
	// lossless, so they reconnect and replay; a row still fails if any
	// message is lost or delivered twice. Rows report the faults and
	// reconnects. With faults on, Conn.AllocPayload hands out ordinary
	// buffers, so ZeroCopy copies like any payload.
	Faults msgr.FaultInjection
	// Auth authenticates every session of the rows (method tls13, as a
	// cluster with auth runs) with keyrings of a CA made for the run: the
	// handshake proves both names, then frames carry CRCs as without
	// auth, so a row shows what authentication costs after the handshake.
	// Not with Remote.
	Auth bool
	// Secure adds, after each combination's rows, the same rows in secure
	// mode (msgr.ModeSecure: authenticated, every frame sealed with
	// AES-256-GCM), so the cost of sealing shows beside crc in one run.
	// The crc rows are authenticated too (as with Auth), so that the
	// secure/crc ratios, the handshake's included, are of the mode
	// alone. Rows then say their mode (Row.ConnMode). Not with Remote.
	Secure bool

	// ca issues the rows' keyrings when Auth or Secure is set.
	ca *auth.CA
}

// maxFrontBytes is room for a BenchPing front: two one-byte tags and two
// varints of at most 10 bytes.
const maxFrontBytes = 2 * (1 + 10)

// zeroCopyBytes bounds the payload buffers a ZeroCopy connection takes.
const zeroCopyBytes = 64 << 20

// maxBenchSize is the largest payload a row sends: 64 MiB, perftest's
// usual largest. The bench's messengers take a message of it and its
// front (benchMaxMessage), a little over the messenger's default limit,
// which bounds front and data together.
const (
	maxBenchSize    = 64 << 20
	benchMaxMessage = maxBenchSize + maxFrontBytes
)

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
	if o.Segment < 0 {
		return fmt.Errorf("bench: segment %v must be positive", o.Segment)
	}
	if o.Conns == 0 {
		o.Conns = 1
	}
	if o.Conns < 1 || o.Conns >= 1<<(64-connShift) {
		return fmt.Errorf("bench: %d connections: want 1 to %d", o.Conns, 1<<(64-connShift)-1)
	}
	if o.Remote != "" {
		scheme, _, ok := strings.Cut(o.Remote, "://")
		if !ok || scheme == "" {
			return fmt.Errorf("bench: remote %q: want SCHEME://HOST:PORT, e.g. tcp://10.0.0.2:7300", o.Remote)
		}
		o.Transports = []string{scheme}
		if o.Auth || o.Secure {
			return errors.New("bench: auth and secure mode need both ends' keyrings from one CA; they cannot run against a remote server")
		}
		if o.Baseline {
			return errors.New("bench: a baseline needs both ends in this process; it cannot run against a remote server")
		}
	}
	if o.Baseline && o.Conns > 1 {
		return errors.New("bench: the baseline runs one connection; use --conns 1 with it")
	}
	if o.Faults.EveryNFrames < 0 || o.Faults.Probability < 0 || o.Faults.Probability > 1 {
		return fmt.Errorf("bench: fault injection %+v: want a count of frames of 0 or more and a probability in [0, 1]", o.Faults)
	}
	for _, s := range o.Sizes {
		if s < 0 || s > maxBenchSize {
			return fmt.Errorf("bench: size %d: want 0 to %d bytes (64 MiB)", s, maxBenchSize)
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

// runOptions describe one row's timeline.
func (o *MsgrOptions) runOptions(transport string, mode Mode, size, depth int) runOptions {
	label := fmt.Sprintf("%s %s %s depth %d", transport, mode, FormatSize(int64(size)), depth)
	if o.Conns > 1 {
		label += fmt.Sprintf(" x%d conns", o.Conns)
	}
	return runOptions{warmup: o.Warmup, duration: o.Duration, segment: o.Segment, size: size, progress: o.Progress, label: label}
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
		return nil, &OptionsError{err}
	}
	for _, tr := range o.Transports {
		if o.Remote != "" {
			break // the client's Connect says whether it can reach the server
		}
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
		if overTCP(&r) {
			r.TCPCongestion = tcpCongestion()
		}
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
					for _, cm := range o.connModes() {
						r, err := runMsgrRow(ctx, &o, tr, mode, size, depth, cm)
						if err != nil {
							return rows, fmt.Errorf("bench: %s %s %s size %s depth %d: %w", tr, cm, mode, FormatSize(int64(size)), depth, err)
						}
						add(r)
					}
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

// overTCP reports whether r's bytes cross a kernel TCP socket.
func overTCP(r *Row) bool {
	switch {
	case r.Transport == "tcp" || r.Transport == RawTransport:
		return true
	case r.Transport == FabricTransport || strings.HasPrefix(r.Transport, "rdma+"):
		return r.Provider == "tcp" || r.Provider == "sockets"
	}
	return false
}

// tcpCongestion is this machine's default TCP congestion control, "" where
// it cannot be read.
var tcpCongestion = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

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
		if b := findBaseline(rows, r, base, prov); b != nil {
			r.VsRawBytesPerSec = ratio(r.BytesPerSec, b.BytesPerSec)
			r.VsRawP50 = ratio(r.P50Us, b.P50Us)
			r.VsRawP99 = ratio(r.P99Us, b.P99Us)
			r.Starved = b.Starved
		}
	}
}

// findBaseline returns the last row of transport base on provider prov
// with r's mode, size and depth, or nil.
func findBaseline(rows []Row, r *Row, base, prov string) *Row {
	var found *Row
	for j := range rows {
		b := &rows[j]
		if b.Transport == base && b.Provider == prov && b.Mode == r.Mode && b.Size == r.Size && b.Depth == r.Depth {
			found = b
		}
	}
	return found
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

// connModes are the modes each combination's messenger rows run in: crc,
// then secure with Secure.
func (o *MsgrOptions) connModes() []msgr.Mode {
	if o.Secure {
		return []msgr.Mode{msgr.ModeCRC, msgr.ModeSecure}
	}
	return []msgr.Mode{msgr.ModeCRC}
}

// authFor is the auth options of a row's messenger named name in mode cm:
// nil without Auth or Secure; else a keyring the run's CA issues, and
// any peer the CA signed is accepted (the rows have no mon to keep
// records).
func (o *MsgrOptions) authFor(name msgr.EntityName, cm msgr.Mode) (*msgr.AuthOptions, error) {
	if !o.Auth && !o.Secure {
		return nil, nil
	}
	if o.ca == nil {
		ca, err := auth.NewCA("bench")
		if err != nil {
			return nil, err
		}
		o.ca = ca
	}
	k, err := o.ca.Issue(string(name))
	if err != nil {
		return nil, err
	}
	return &msgr.AuthOptions{Keyring: k, Modes: []msgr.Mode{cm}}, nil
}

// newMessenger is msgr.New on transports of its own, the build's defaults
// (transports.Default), as a messenger in a process of its own has: the two
// ends of a row on rdma never share a libfabric domain. Close the
// transports after the messenger has shut down.
func newMessenger(opts msgr.Options) (*msgr.Messenger, transports.Set, error) {
	ts, err := transports.Default()
	if err != nil {
		return nil, nil, err
	}
	opts.Transports = ts
	opts.MaxMessageSize = benchMaxMessage
	m, err := msgr.New(opts)
	if err != nil {
		ts.Close()
		return nil, nil, err
	}
	return m, ts, nil
}

// probeTransport checks that the messenger can listen on the transport.
func probeTransport(ctx context.Context, o *MsgrOptions, tr string) error {
	m, ts, err := newMessenger(msgr.Options{Name: "osd.0", Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) { m.Release() }),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer ts.Close()
	defer m.Shutdown(context.Background())
	if _, err := m.Listen(ctx, tr+"://127.0.0.1:0"); err != nil {
		return fmt.Errorf("bench: transport %q: %w", tr, err)
	}
	return nil
}

// Message types of the benchmark; all are fast-dispatched. Every one has
// a BenchPing front whose id carries, above connShift, the index of the
// client connection that sent the request, so that a server handling
// several connections finds the one a message belongs to without a map.
const (
	typePing   uint16 = 0xbe01 // pingpong request, echoed
	typePong   uint16 = 0xbe02 // pingpong reply
	typeStream uint16 = 0xbe03 // stream message
	typeAck    uint16 = 0xbe04 // a --serve server's front-only answer to a stream message
)

// connShift places the connection index in a BenchPing id.
const connShift = 48

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
	typ     uint16
	list    freeList[*msgr.Message] // returned by the messenger
	owned   []*msgr.Message         // takeOwned's; its single caller only
	payload []byte
	bufs    []*wire.Buffer // payload buffers with ZeroCopy, taken in turn; else nil
	nextBuf atomic.Uint32
	release func(*msgr.Message) // p.put, made once so assigning it does not allocate
}

func newMsgPool(typ uint16, size, prealloc int) *msgPool {
	p := &msgPool{typ: typ, payload: make([]byte, size), owned: make([]*msgr.Message, 0, 2*prealloc)}
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
	return &msgr.Message{Type: p.typ, Front: make([]byte, 0, maxFrontBytes), Data: p.payload, OnRelease: p.release}
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

// echo is a server reply. A pingpong echo carries the request's own front
// and payload back, so echoing copies nothing, and the request is released
// (returning its receive buffer and credit) only when the messenger is
// done with the reply. A stream acknowledgement (typeAck, from a --serve
// server) copies the front and no payload, and releases the request at
// once.
type echo struct {
	m     msgr.Message
	req   *msgr.Message
	front [maxFrontBytes]byte
	pool  *echoPool
}

func (e *echo) release(*msgr.Message) {
	req := e.req
	e.req, e.m.Front, e.m.Data = nil, nil, nil
	e.pool.put(e)
	if req != nil {
		req.Release()
	}
}

type echoPool struct {
	list freeList[*echo]
}

func (p *echoPool) get() *echo {
	if e, ok := p.list.pop(); ok {
		return e
	}
	e := &echo{pool: p}
	e.m.OnRelease = e.release
	return e
}

func (p *echoPool) put(e *echo) { p.list.push(e) }

// reply makes the answer to request m: its echo, or for a stream
// message an acknowledgement. ok is false for a message no server answers.
func (p *echoPool) reply(m *msgr.Message) (*msgr.Message, bool) {
	switch m.Type {
	case typePing:
		e := p.get()
		e.m.Type, e.req = typePong, m
		e.m.Front, e.m.Data = m.Front, m.Data
		return &e.m, true
	case typeStream:
		if len(m.Front) > maxFrontBytes {
			return nil, false
		}
		e := p.get()
		e.m.Type = typeAck
		e.m.Front = e.front[:copy(e.front[:], m.Front)]
		m.Release()
		return &e.m, true
	}
	return nil, false
}

// msgrRow is one messenger row in progress: one server (in this process,
// or a --serve one elsewhere) and Conns client connections, each from its
// own client messenger.
type msgrRow struct {
	mode        Mode
	size, depth int
	remote      bool // the server is a --serve process: stream messages are acknowledged
	// probe is probeHandshakes' messenger's name, set before any messenger
	// starts: the server's handlers read it.
	probe msgr.EntityName
	// handshakeCPU is the process's CPU time per probe handshake, both
	// ends (the server is in this process unless remote).
	handshakeCPU time.Duration
	run          *run
	ctx          context.Context // cancelled on failure
	cancel       context.CancelFunc
	conns        []*msgrConn
	echoes       echoPool

	// started is set once conns, run and the tallies are in place and
	// before the first message is sent. The server's handlers load it
	// first: messages reach them through the kernel, which gives the race
	// detector no happens-before edge from the setup to a link's reader
	// goroutine (a new one after every reconnect).
	started atomic.Bool
	closing atomic.Bool // shutting down: resets and send errors are expected
	errOnce sync.Once
	err     error
	failed  chan struct{}
	wg      sync.WaitGroup // fallback senders
	// dialErr is the last failed dial of the row's client sessions (not
	// an injected fault): the server gone, or never there; dials counts
	// them.
	dialErr atomic.Pointer[error]
	dials   atomic.Int64
	// dialStreak counts the dials failed since a session last came up.
	dialStreak atomic.Int64
}

// noteDialError is the clients' msgr.Options.OnDialError.
func (r *msgrRow) noteDialError(_ *msgr.Conn, err error) {
	if !errors.Is(err, msgr.ErrInjectedFault) {
		r.dialErr.Store(&err)
		r.dialStreak.Add(1)
		r.dials.Add(1)
	}
}

// dialsDecisive reports whether the failed dials say the server is gone:
// refused (nothing listens), or three in a row with no session up between
// (a handshake that timed out once on a loaded host is no verdict).
func (r *msgrRow) dialsDecisive() bool {
	return errors.Is(r.lastDialError(), syscall.ECONNREFUSED) || r.dialStreak.Load() >= 3
}

// untilDialFails is parent, cut short (its cause the dial's error) when
// a client session's dial fails from now on: the server does not answer,
// so a wait for it ends at once.
func (r *msgrRow) untilDialFails(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	from := r.dials.Load()
	stop := make(chan struct{})
	go func() {
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tk.C:
				if r.dials.Load() > from && r.dialsDecisive() {
					cancel(r.lastDialError())
					return
				}
			}
		}
	}()
	return ctx, func() { close(stop); cancel(nil) }
}

// lastDialError is noteDialError's last, or nil.
func (r *msgrRow) lastDialError() error {
	if p := r.dialErr.Load(); p != nil {
		return *p
	}
	return nil
}

// msgrConn is one client connection of a row.
type msgrConn struct {
	row  *msgrRow
	idx  uint64
	conn *msgr.Conn
	// tally is written by the goroutine that completes this connection's
	// messages: the server's receive path for a stream in this process,
	// the client's otherwise. The messenger calls a Dispatcher for one
	// Conn from one goroutine.
	tally   *tally
	win     *window // stream
	pool    *msgPool
	nextID  atomic.Uint64 // messages sent: every one is stamped with the next id
	replies atomic.Uint64 // pingpong: replies received
	pending atomic.Int64  // pingpong: requests without a reply
	drained chan struct{} // pingpong: closed when pending reaches 0 after stop
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

// connOf returns the connection a message's front names.
func (r *msgrRow) connOf(m *msgr.Message) (c *msgrConn, sent int64, err error) {
	id, sent, err := parsePing(m.Front)
	if err != nil {
		return nil, 0, err
	}
	if i := id >> connShift; i < uint64(len(r.conns)) {
		return r.conns[i], sent, nil
	}
	return nil, 0, fmt.Errorf("message of connection %d of %d", id>>connShift, len(r.conns))
}

// record counts a completed message that was sent at sent (the front's
// clock); payload is its payload length, checked against the row's.
func (c *msgrConn) record(payload int, sent int64) {
	r := c.row
	if payload != r.size {
		r.fail(fmt.Errorf("message with %d payload bytes, want %d", payload, r.size))
		return
	}
	if !r.run.measuring() {
		return
	}
	now := r.run.clk.now()
	c.tally.record(now, now-(sent-r.run.clk.base))
}

// stamp prepares a message for sending now.
func (c *msgrConn) stamp(m *msgr.Message) {
	r := c.row
	m.Front = appendPing(m.Front[:0], c.idx<<connShift|c.nextID.Add(1), r.run.clk.base+r.run.clk.now())
	if bufs := c.pool.bufs; len(bufs) > 0 {
		// Each message holds a reference on its payload buffer until the
		// messenger is done with it; a buffer may be in two messages.
		b := bufs[int(c.pool.nextBuf.Add(1))%len(bufs)]
		b.Ref()
		m.SetPayload(b)
	}
}

// send is a non-blocking send for handlers, which run on the messenger's
// receive path and must not wait. A full send queue (possible with large
// messages at depth) is handed to a goroutine that waits instead; that
// allocates, but only on this rare path.
func (r *msgrRow) send(c *msgr.Conn, m *msgr.Message, from *msgrConn) {
	err := c.TrySend(m)
	if err == nil {
		return
	}
	if errors.Is(err, msgr.ErrWouldBlock) {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := c.Send(r.ctx, m); err != nil {
				r.sendFailed(m, err, from)
			}
		}()
		return
	}
	r.sendFailed(m, err, from)
}

// sendFailed recycles a message the messenger refused, which stays ours;
// from is the client connection of a request, nil for a reply.
func (r *msgrRow) sendFailed(m *msgr.Message, err error, from *msgrConn) {
	m.OnRelease(m)
	if from != nil {
		from.replied()
	}
	r.fail(fmt.Errorf("send: %w", err))
}

// replied accounts for a request that will get no further reply.
func (c *msgrConn) replied() {
	if c.pending.Add(-1) == 0 {
		close(c.drained)
	}
}

func (r *msgrRow) HandleEvent(ev msgr.Event) {
	if ev.Conn != nil && ev.Conn.Peer() == r.probe {
		return // probeHandshakes closes its sessions
	}
	if ev.Kind == msgr.EventConnect {
		r.dialStreak.Store(0)
	}
	if ev.Kind == msgr.EventReset || ev.Kind == msgr.EventRemoteReset {
		r.fail(fmt.Errorf("connection %s: %v", ev.Kind, ev.Err))
	}
}

// HandshakeSamples is how many handshakes a row that authenticates
// measures besides its first connection's, before its measured interval:
// enough that p99 is not simply the max, few enough (about 1 ms each on
// loopback) that a 3 s row takes about 3% longer.
const HandshakeSamples = 100

// probeHandshakes measures HandshakeSamples full handshakes to addr's
// osd.0, each Connect to ready then closed, from one more client messenger
// (the probe) with its own credential from the run's CA, appending each to
// *d, and the process's CPU time per handshake to r.handshakeCPU. Each is
// a new session, so each dials, authenticates (a full TLS 1.3 handshake,
// mutual certificates: the probe does not resume) and takes fresh keys. The caller shuts
// the probe down with the row's messengers.
func (r *msgrRow) probeHandshakes(o *MsgrOptions, addr string, cm msgr.Mode, d *[]time.Duration) (*msgr.Messenger, transports.Set, error) {
	opts := msgr.Options{Name: r.probe, Dispatcher: probeDispatcher{}, Logger: o.messengerLogger(),
		DisableDataCRC: o.DisableDataCRC}
	var err error
	if opts.Auth, err = o.authFor(opts.Name, cm); err != nil {
		return nil, nil, err
	}
	if opts.Auth != nil { // full handshakes, not the resumed ones its reconnects would make
		opts.Auth.NoResumption = true
	}
	m, ts, err := newMessenger(opts)
	if err != nil {
		return nil, nil, err
	}
	cpu0 := cpuTime()
	defer func() { r.handshakeCPU = (cpuTime() - cpu0) / time.Duration(max(len(*d), 1)) }()
	for range HandshakeSamples {
		start := time.Now()
		c, err := m.Connect(r.ctx, addr, "osd.0")
		if err != nil {
			return m, ts, err
		}
		if err := waitReady(r.ctx, c, addr); err != nil {
			return m, ts, err
		}
		*d = append(*d, time.Since(start))
		c.Close()
	}
	return m, ts, nil
}

// probeDispatcher is probeHandshakes' messenger's: it is sent nothing.
type probeDispatcher struct{}

func (probeDispatcher) Dispatch(m *msgr.Message) { m.Release() }
func (probeDispatcher) HandleEvent(msgr.Event)   {}

// serverDispatcher is the "osd.0" end in this process.
type serverDispatcher struct{ *msgrRow }

func (serverDispatcher) CanFastDispatch(uint16) bool { return true }

func (d serverDispatcher) Dispatch(m *msgr.Message) {
	r := d.msgrRow
	if !r.started.Load() {
		r.fail(fmt.Errorf("server: message of type %#x before the row started", m.Type))
		m.Release()
		return
	}
	if m.Type != typeStream {
		reply, ok := r.echoes.reply(m)
		if !ok {
			r.fail(fmt.Errorf("server: message of type %#x", m.Type))
			m.Release()
			return
		}
		r.send(m.Conn(), reply, nil)
		return
	}
	c, sent, err := r.connOf(m)
	if err != nil {
		r.fail(err)
		m.Release()
		return
	}
	c.record(len(m.Data), sent)
	m.Release()
	c.win.complete()
}

// clientDispatcher is one "client.bench.N" end; it hears pingpong replies
// and, from a --serve server, stream acknowledgements.
type clientDispatcher struct{ *msgrConn }

func (clientDispatcher) CanFastDispatch(uint16) bool { return true }

func (d clientDispatcher) HandleEvent(ev msgr.Event) { d.row.HandleEvent(ev) }

func (d clientDispatcher) Dispatch(m *msgr.Message) {
	c, r := d.msgrConn, d.row
	_, sent, err := parsePing(m.Front)
	if err != nil {
		r.fail(err)
		m.Release()
		return
	}
	if m.Type == typeAck {
		c.record(r.size, sent) // the acknowledgement carries no payload
		m.Release()
		c.win.complete()
		return
	}
	conn := m.Conn()
	c.replies.Add(1)
	c.record(len(m.Data), sent)
	m.Release()
	if r.run.stopping() {
		c.replied()
		return
	}
	next := c.pool.get()
	c.stamp(next)
	r.send(conn, next, c)
}

// shutdownTimeout bounds tearing a row's messengers down, and drainTimeout
// waiting for the last messages after the measured interval.
const (
	shutdownTimeout = 10 * time.Second
	drainTimeout    = 10 * time.Second
)

// clientName is the entity name of a row's client messenger number i. A
// remote server keeps a session per name, so the names are the same for
// every row of this process (a new row's session replaces the last one's)
// and differ between processes.
func clientName(remote bool, i int) msgr.EntityName {
	if !remote {
		return msgr.EntityName(fmt.Sprintf("client.bench.%d", i))
	}
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, host)
	return msgr.EntityName(fmt.Sprintf("client.bench-%.40s-%d.%d", host, os.Getpid(), i))
}

func runMsgrRow(ctx context.Context, o *MsgrOptions, transport string, mode Mode, size, depth int, cm msgr.Mode) (row Row, err error) {
	r := &msgrRow{mode: mode, size: size, depth: depth, remote: o.Remote != "", failed: make(chan struct{})}
	r.probe = clientName(r.remote, o.Conns)
	r.ctx, r.cancel = context.WithCancel(ctx)
	defer r.cancel()
	log := o.messengerLogger()
	typ := typePing
	if mode == Stream {
		typ = typeStream
	}

	var srv *msgr.Messenger
	var clients []*msgr.Messenger
	var handshake time.Duration    // the first connection's, Connect to ready
	var handshakes []time.Duration // the probe's (probeHandshakes)
	var sets []transports.Set      // the messengers', closed after their shutdown
	defer func() {
		r.closing.Store(true)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		// All at once: each side's close waits a little for the other.
		errc := make(chan error, len(clients)+1)
		for _, m := range append(clients, srv) {
			if m != nil {
				go func() { errc <- m.Shutdown(sctx) }()
			} else {
				errc <- nil
			}
		}
		var errs []error
		for range len(clients) + 1 {
			errs = append(errs, <-errc)
		}
		for _, s := range sets {
			s.Close()
		}
		r.wg.Wait()
		if serr := errors.Join(errs...); err == nil && serr != nil {
			err = serr
		}
		if err == nil {
			// Every goroutine that recorded has ended: the tallies and
			// the delivery counts are ours.
			err = r.checkDelivered()
		}
		if err == nil {
			tallies := make([]*tally, len(r.conns))
			for i, c := range r.conns {
				tallies[i] = c.tally
			}
			row = r.run.row(transport, mode, size, depth, tallies...)
			row.Provider, _ = fabricProvider(transport)
			row.ZeroCopy, row.NoDataCRC = o.ZeroCopy, o.DisableDataCRC
			row.Conns, row.Remote = len(r.conns), o.Remote
			if o.Secure || o.Auth {
				row.ConnMode = string(cm)
			}
			row.HandshakeUs = float64(handshake) / float64(time.Microsecond)
			row.setHandshakes(handshakes)
			row.HandshakeCPUUs = float64(r.handshakeCPU) / float64(time.Microsecond)
			row.InjectSocketFailures = o.Faults.EveryNFrames
			for _, c := range r.conns {
				st := c.conn.Stats()
				row.Faults += st.Faults
				row.Reconnects += st.Reconnects
			}
		}
	}()

	addr := o.Remote
	if addr == "" {
		var ts transports.Set
		sopts := msgr.Options{Name: "osd.0", Dispatcher: serverDispatcher{r}, Logger: log, DisableDataCRC: o.DisableDataCRC,
			Faults: o.Faults}
		if sopts.Auth, err = o.authFor(sopts.Name, cm); err != nil {
			return row, err
		}
		srv, ts, err = newMessenger(sopts)
		if err != nil {
			return row, err
		}
		sets = append(sets, ts)
		if addr, err = srv.Listen(r.ctx, transport+"://127.0.0.1:0"); err != nil {
			return row, err
		}
	}
	for i := range o.Conns {
		c := &msgrConn{row: r, idx: uint64(i), drained: make(chan struct{})}
		// A stream sender wakes when a quarter of the window is free; a
		// pingpong client needs no window, each reply sends the next
		// request.
		c.win = newWindow(depth, depth/4)
		c.pool = newMsgPool(typ, size, depth)
		copts := msgr.Options{Name: clientName(r.remote, i), Dispatcher: clientDispatcher{c}, Logger: log,
			DisableDataCRC: o.DisableDataCRC, Faults: o.Faults, OnDialError: r.noteDialError}
		// The send queue holds the whole window, so that --depth is what
		// the row keeps in flight: the messenger's defaults (4,096
		// messages, 128 MiB) held two 64 MiB messages of a depth of 16.
		copts.SendQueueMsgs = max(depth, 4096)
		copts.SendQueueBytes = max(int64(depth)*int64(size+maxFrontBytes), 128<<20)
		if copts.Auth, err = o.authFor(copts.Name, cm); err != nil {
			return row, err
		}
		cli, ts, err := newMessenger(copts)
		if err != nil {
			return row, err
		}
		clients, sets = append(clients, cli), append(sets, ts)
		start := time.Now()
		if c.conn, err = cli.Connect(r.ctx, addr, "osd.0"); err != nil {
			return row, err
		}
		r.conns = append(r.conns, c)
		if i == 0 {
			// The first connection's setup, waited for alone: dial,
			// banner, auth and session, what a row's handshake costs.
			if err := r.waitReady(c.conn, addr); err != nil {
				return row, err
			}
			handshake = time.Since(start)
		}
	}
	for _, c := range r.conns {
		if err := r.waitReady(c.conn, addr); err != nil {
			return row, err
		}
		if o.ZeroCopy {
			for range min(depth, max(1, zeroCopyBytes/max(size, 1))) {
				b, err := c.conn.AllocPayload(size)
				if err != nil {
					return row, fmt.Errorf("allocating a %d-byte payload: %w", size, err)
				}
				copy(b.B, c.pool.payload)
				c.pool.bufs = append(c.pool.bufs, b)
				// Messages still with the messenger hold references of their own.
				defer b.Release()
			}
		}
	}

	if o.Secure || o.Auth {
		probe, ts, err := r.probeHandshakes(o, addr, cm, &handshakes)
		if probe != nil {
			clients, sets = append(clients, probe), append(sets, ts)
		}
		if err != nil {
			return row, err
		}
	}

	r.run = startRun(r.ctx, o.runOptions(transport, mode, size, depth))
	for _, c := range r.conns {
		c.tally = r.run.newTally()
	}
	r.started.Store(true)
	var senders sync.WaitGroup
	for _, c := range r.conns {
		senders.Go(func() {
			if mode == Stream {
				c.stream()
			} else {
				c.pingpong()
			}
		})
	}
	senders.Wait()
	<-r.run.stopped
	if o.Logger.Enabled(ctx, slog.LevelDebug) {
		// The counters say where a slow row went: stalls, grant frames.
		for _, c := range r.conns {
			o.Logger.Debug("bench: client conn", "transport", transport, "mode", mode, "size", size, "depth", depth,
				"conn", c.idx, "stats", fmt.Sprintf("%+v", c.conn.Stats()))
		}
		if srv != nil {
			for sc := range srv.Conns() {
				o.Logger.Debug("bench: server conn", "transport", transport, "mode", mode, "size", size, "depth", depth,
					"stats", fmt.Sprintf("%+v", sc.Stats()))
			}
		}
	}
	select {
	case <-r.failed:
		return row, r.err
	default:
	}
	return row, ctx.Err()
}

// checkDelivered fails a finished row whose sessions lost or duplicated a
// message: every message sent must have been handled by the server (or,
// remote, acknowledged) exactly once, and every pingpong request answered
// exactly once. A loss usually shows earlier, as a drain that times out;
// this catches duplicates, and losses the drain missed. REQUIRES: every
// messenger of the row has shut down.
func (r *msgrRow) checkDelivered() error {
	for _, c := range r.conns {
		sent := c.nextID.Load()
		got, what := uint64(c.win.done.Load()), "handled by the server"
		switch {
		case r.mode == PingPong:
			got, what = c.replies.Load(), "answered"
		case r.remote:
			what = "acknowledged"
		}
		if got != sent {
			return fmt.Errorf("connection %d: %d messages sent, %d %s: the session lost or duplicated messages", c.idx, sent, got, what)
		}
	}
	return nil
}

// stream sends until the run stops, then waits for the server to handle
// (or, remote, acknowledge) everything in flight.
func (c *msgrConn) stream() {
	r := c.row
	for !r.run.stopping() {
		if !c.win.acquire(r.run.stopped) {
			break
		}
		m := c.pool.takeOwned()
		c.stamp(m)
		if err := c.conn.Send(r.ctx, m); err != nil {
			c.pool.putOwned(m)
			c.win.unacquire()
			r.fail(fmt.Errorf("send: %w", err))
			return
		}
	}
	// A dial that fails while the last messages wait for their acks:
	// the server is gone, and the wait ends.
	wctx, stop := r.untilDialFails(r.ctx)
	defer stop()
	dctx, cancel := context.WithTimeout(wctx, drainTimeout)
	defer cancel()
	if !c.win.drain(dctx.Done()) {
		n := c.win.sent - c.win.done.Load()
		if r.ctx.Err() == nil && wctx.Err() != nil {
			r.fail(serverGone(n, "messages", context.Cause(wctx)))
			return
		}
		r.fail(r.unanswered(drainErr(r.ctx, "messages", n)))
	}
}

// drainErr is a stream's failure to see its last n messages (frames)
// answered: interrupted (ctx ended, Ctrl-C: an error that is
// context.Canceled, which the CLI reports as such, not a loss), or none
// came in drainTimeout.
func drainErr(ctx context.Context, what string, n int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stopped with %d %s in flight: %w", n, what, err)
	}
	return fmt.Errorf("%d %s still in flight %v after the end", n, what, drainTimeout)
}

// unanswered adds to err, a row's failure to see its last messages
// answered, the last failed dial (the server gone) when there is one.
func (r *msgrRow) unanswered(err error) error {
	if derr := r.lastDialError(); derr != nil && r.ctx.Err() == nil {
		err = fmt.Errorf("%w: the server does not answer (its session's last dial: %w)", err, derr)
	}
	return err
}

// pingpong puts depth requests in flight; replies keep them going until the
// run stops, and then the last replies are waited for.
func (c *msgrConn) pingpong() {
	r := c.row
	c.pending.Store(int64(r.depth))
	for i := range r.depth {
		m := c.pool.get()
		c.stamp(m)
		if err := c.conn.Send(r.ctx, m); err != nil {
			c.pool.put(m)
			for range r.depth - i {
				c.replied()
			}
			r.fail(fmt.Errorf("send: %w", err))
			return
		}
	}
	<-r.run.stopped
	wctx, stop := r.untilDialFails(r.ctx)
	defer stop()
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	select {
	case <-c.drained:
	case <-r.failed:
	case <-wctx.Done():
		if r.ctx.Err() == nil {
			r.fail(serverGone(c.pending.Load(), "requests", context.Cause(wctx)))
		}
	case <-t.C:
		r.fail(r.unanswered(fmt.Errorf("%d requests without a reply %v after the end", c.pending.Load(), drainTimeout)))
	}
}

// serverGone is a row's failure to see its last n messages answered
// because its session's dial failed (err) while it waited for them.
func serverGone(n int64, what string, err error) error {
	return fmt.Errorf("%d %s unanswered: the server does not answer (its session's last dial: %w)", n, what, err)
}

// ServeOptions configure ServeMsgr.
type ServeOptions struct {
	// Addr is the address to listen on, SCHEME://HOST:PORT, e.g.
	// tcp://0.0.0.0:7300 or rdma+tcp://10.0.0.1:7300.
	Addr           string
	DisableDataCRC bool
	// Faults are injected into the server's messenger (MsgrOptions.Faults).
	Faults msgr.FaultInjection
	Logger *slog.Logger // default: discard
	// Listening, if set, is called with the address listened on (the port
	// chosen, for port 0) once clients can connect.
	Listening func(addr string)
}

// ServeMsgr is the server end of a two-process `bench msgr`: a messenger
// named osd.0 on o.Addr that echoes every pingpong request and acknowledges
// every stream message with a front-only reply, for any number of clients
// and rows, until ctx is done. It measures nothing; the client does.
func ServeMsgr(ctx context.Context, o ServeOptions) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	mo := MsgrOptions{Logger: o.Logger}
	d := &serveDispatcher{log: o.Logger}
	srv, ts, err := newMessenger(msgr.Options{Name: "osd.0", Dispatcher: d, Logger: mo.messengerLogger(), DisableDataCRC: o.DisableDataCRC,
		Faults: o.Faults})
	if err != nil {
		return err
	}
	defer ts.Close()
	addr, err := srv.Listen(ctx, o.Addr)
	if err != nil {
		srv.Shutdown(context.Background())
		return err
	}
	o.Logger.Info("bench: serving the messenger benchmark", "addr", addr)
	if o.Listening != nil {
		o.Listening(addr)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return srv.Shutdown(sctx)
}

// serveDispatcher answers clients of ServeMsgr.
type serveDispatcher struct {
	echoes echoPool
	log    *slog.Logger
}

func (*serveDispatcher) CanFastDispatch(uint16) bool { return true }

func (d *serveDispatcher) Dispatch(m *msgr.Message) {
	conn := m.Conn()
	reply, ok := d.echoes.reply(m)
	if !ok {
		d.log.Warn("bench: server: dropping a message of an unknown type", "type", m.Type, "peer", conn.Peer())
		m.Release()
		return
	}
	if err := conn.TrySend(reply); err != nil {
		if !errors.Is(err, msgr.ErrWouldBlock) {
			reply.OnRelease(reply)
			return // the client went away; its next row has a new session
		}
		go func() {
			if err := conn.Send(context.Background(), reply); err != nil {
				reply.OnRelease(reply)
			}
		}()
	}
}

func (d *serveDispatcher) HandleEvent(ev msgr.Event) {
	d.log.Debug("bench: server: connection event", "kind", ev.Kind, "err", ev.Err)
}

// waitReady waits for c's session, bounded by shutdownTimeout.
// waitReady is waitReady for a client connection of r: a dial that fails
// before the session was ever up ends the wait at once, with its error
// (connection refused: nothing listens), as perftest's client does.
func (r *msgrRow) waitReady(c *msgr.Conn, addr string) error {
	ctx, cancel := r.untilDialFails(r.ctx)
	defer cancel()
	err := waitReady(ctx, c, addr)
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("connecting to %s: %w", addr, cause)
	}
	return err
}

func waitReady(ctx context.Context, c *msgr.Conn, addr string) error {
	wctx, cancel := context.WithTimeout(ctx, shutdownTimeout)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		return fmt.Errorf("connecting to %s: %w", addr, err)
	}
	return nil
}

// setHandshakes sets the row's handshake distribution from samples d
// (sorted here): exact ranks, as they are few.
func (row *Row) setHandshakes(d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		i := min(len(d)-1, int(math.Ceil(q*float64(len(d))))-1)
		return float64(d[max(i, 0)]) / float64(time.Microsecond)
	}
	row.Handshakes = len(d)
	row.HandshakeP50Us, row.HandshakeP99Us, row.HandshakeMaxUs = at(0.5), at(0.99), at(1)
}
