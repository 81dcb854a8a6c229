//go:build rdma

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/wire"
)

// Config tunes the RDMA transport. Zero fields take the defaults noted.
type Config struct {
	// BufSize is the size of each registered send and receive buffer: a
	// frame up to this size goes inline in one send; larger payloads go
	// by rendezvous (RDMA read). Default 16 KiB.
	BufSize int
	// SendSlots is the number of send buffers per link. Default 64.
	SendSlots int
	// MemBudget bounds all registered memory of the transport. Default
	// 1 GiB.
	MemBudget int64
	// MaxRecvWindow caps the sessions' receive window over this transport
	// (one credit is one posted BufSize receive). Default 256, and never
	// above the provider's receive queue.
	MaxRecvWindow int
	// BusyPoll is how long the completion poller spins after the last
	// completion before it sleeps on the CQ's wait fd. Default 50µs.
	BusyPoll time.Duration
	// NoSharedRecv makes every link post its own receives even where the
	// provider has a shared receive context (srx.go).
	NoSharedRecv bool
	// Rendezvous chooses how a payload above BufSize moves: the receiver
	// reads it (RDMA read) or has the sender write it (RDMA write).
	// Default RendezvousAuto.
	Rendezvous RendezvousMode
	// WriteChunk is the longest RDMA write the write rendezvous posts: a
	// longer payload is written in pieces of at most this many bytes, one
	// post each, and RDV_DONE follows the last. 0 takes the provider's
	// default: DefaultWriteChunk on tcp, which copies a write into its
	// socket inside fi_write and where a large payload in one write moved
	// 25-45% less than in pieces (docs/rdma.md, "Writes in pieces"); one
	// write per payload elsewhere (sockets queues writes for a thread of
	// its own and gained nothing; a NIC moves a payload in hardware, in
	// one work request). Negative: one write per payload.
	WriteChunk int
}

// DefaultWriteChunk is Config.WriteChunk's default on tcp: eight of
// loopback's 65,483-byte TCP segments less 864 bytes, room for the
// provider's header and some slack, so that every piece but the last fills
// whole segments on loopback. A piece that spills a few bytes into one
// more segment (128 KiB, 256 KiB) lost most of what splitting gains, and
// pieces of four segments made 4 MiB object gets 8% slower than one write
// (docs/benchmarks.md). Across an Ethernet path, with segments of 1448 or
// 8948 bytes, the size should matter less (not measured).
const DefaultWriteChunk = 523_000

// writeChunk is the write size on a domain of provider prov: 0 for one
// write per payload.
func (c *Config) writeChunk(prov string) int {
	switch {
	case c.WriteChunk < 0:
		return 0
	case c.WriteChunk > 0:
		return c.WriteChunk
	case prov == "tcp":
		return DefaultWriteChunk
	}
	return 0
}

// RendezvousMode is how a large payload crosses a link.
type RendezvousMode int

const (
	// RendezvousAuto writes on the software providers (tcp, sockets) and
	// reads on the others (verbs). A software provider emulates RDMA read
	// with a request and a response over its socket, which moved 0.65 to
	// 0.77x of what a send or an RDMA write moves on tcp here
	// (bench/rmabw, docs/benchmarks.md); a NIC reads in hardware, and the
	// read needs no extra frame.
	RendezvousAuto RendezvousMode = iota
	// RendezvousRead: the receiver pulls the payload with fi_read.
	RendezvousRead
	// RendezvousWrite: the receiver sends the sender a destination
	// (RDV_READY); the sender writes the payload there with fi_write and
	// says so (RDV_DONE). Both ends must offer it, else the link reads.
	RendezvousWrite
)

func (m RendezvousMode) String() string {
	switch m {
	case RendezvousAuto:
		return "auto"
	case RendezvousRead:
		return "read"
	case RendezvousWrite:
		return "write"
	}
	return fmt.Sprintf("RendezvousMode(%d)", int(m))
}

// offersWrite reports whether links on info's provider offer the write
// rendezvous (RendezvousMode.writes).
func (t *Transport) offersWrite(info *C.struct_fi_info) bool {
	return t.cfg.Rendezvous.writes(C.GoString(C.osp_info_prov(info)), C.osp_info_saw(info) != 0)
}

// ParseRendezvousMode reads "read", "write", or "auto" (or "" for auto).
// Anything else is an error: a mode misspelt in a flag or the environment
// must not quietly run the default.
func ParseRendezvousMode(s string) (RendezvousMode, error) {
	switch s {
	case "", "auto":
		return RendezvousAuto, nil
	case "read":
		return RendezvousRead, nil
	case "write":
		return RendezvousWrite, nil
	}
	return RendezvousAuto, fmt.Errorf("rdma: rendezvous mode %q: want read, write or auto", s)
}

// writes reports whether links of a domain on prov offer the write
// rendezvous: asked for (or auto on a software provider) and possible,
// which needs a send to be processed after the write posted before it.
func (m RendezvousMode) writes(prov string, sendAfterWrite bool) bool {
	switch m {
	case RendezvousWrite:
		return sendAfterWrite
	case RendezvousAuto:
		return sendAfterWrite && (prov == "tcp" || prov == "sockets")
	}
	return false
}

func (c *Config) setDefaults() {
	if c.BufSize <= 0 {
		c.BufSize = 16 << 10
	}
	c.BufSize = max(c.BufSize, 1024)
	if c.SendSlots <= 0 {
		c.SendSlots = 64
	}
	if c.MemBudget <= 0 {
		c.MemBudget = 1 << 30
	}
	if c.MaxRecvWindow <= 0 {
		c.MaxRecvWindow = 256
	}
	if c.BusyPoll <= 0 {
		c.BusyPoll = 50 * time.Microsecond
	}
}

// Transport is the RDMA transport for one libfabric provider.
type Transport struct {
	scheme string
	prov   string
	cfg    Config

	mu   sync.Mutex
	doms map[string]*domain // by libfabric domain name

	rxOnce sync.Once
	rxMax  int
}

// NewTransport returns the transport for "rdma+PROVIDER", which runs on
// that libfabric provider and no other. It reads no environment variable:
// what a binary takes from its environment it reads at its edge
// (msgr/transports) and passes in cfg, so that a library's transport does
// what its code says.
func NewTransport(provider string, cfg Config) *Transport {
	cfg.setDefaults()
	return &Transport{scheme: "rdma+" + provider, prov: provider, cfg: cfg, doms: map[string]*domain{}}
}

// ProviderConflictError is the error of a Listen or Dial whose provider
// the environment's FI_PROVIDER leaves out. libfabric applies FI_PROVIDER
// to the whole process when it loads its providers, so such an address
// could only fail in fi_getinfo, or, had the transport followed the
// variable, run on another provider than the one it names.
type ProviderConflictError struct {
	Scheme     string // the address's scheme, "rdma+verbs"
	FIProvider string // the value of FI_PROVIDER
}

func (e *ProviderConflictError) Error() string {
	return fmt.Sprintf("rdma: %s needs libfabric's %q provider, but FI_PROVIDER=%q leaves it out (libfabric applies it to the whole process): unset FI_PROVIDER, or use the scheme of the provider it names",
		e.Scheme, strings.TrimPrefix(e.Scheme, "rdma+"), e.FIProvider)
}

// checkFIProvider fails when FI_PROVIDER leaves out our provider.
func (t *Transport) checkFIProvider() error {
	if env := os.Getenv("FI_PROVIDER"); !providerAllowed(env, t.prov) {
		return &ProviderConflictError{Scheme: t.scheme, FIProvider: env}
	}
	return nil
}

// providerAllowed reports whether libfabric loads provider prov under
// FI_PROVIDER=filter: a comma-separated list of provider names, the
// providers left out when it starts with '^', names compared without case
// (libfabric's ofi_create_filter and ofi_apply_filter). Empty allows all.
func providerAllowed(filter, prov string) bool {
	if filter == "" {
		return true
	}
	names, negated := strings.CutPrefix(filter, "^")
	for name := range strings.SplitSeq(names, ",") {
		if strings.EqualFold(strings.TrimSpace(name), prov) {
			return !negated
		}
	}
	return negated
}

func (t *Transport) Scheme() string { return t.scheme }

// MaxRecvWindow is the deepest receive window a session over this
// transport may have: Config.MaxRecvWindow, capped by the provider's
// receive queue size.
func (t *Transport) MaxRecvWindow() int {
	t.rxOnce.Do(func() {
		t.rxMax = t.cfg.MaxRecvWindow
		if info, err := t.getinfo("127.0.0.1", "0", true); err == nil {
			if rx := int(C.osp_info_rx_size(info)); rx > 0 {
				if t.offersWrite(info) {
					rx -= ctlRecvs // the write rendezvous's control frames need their own
				}
				t.rxMax = min(t.rxMax, rx)
			}
			C.fi_freeinfo(info)
		}
	})
	return t.rxMax
}

// Stats are the transport's registered-memory counters.
type Stats struct {
	RegisteredBytes int64 // registered now
	HighWaterBytes  int64 // most ever registered at once
	BuffersInUse    int64 // rendezvous buffers handed out
	RecvsPosted     int64 // receive buffers posted now
	PollerSleeps    uint64
	// SharedRecvBufs is the size of the shared receive pools (0 when the
	// provider has none or Config.NoSharedRecv); SharedRecvLost counts
	// their buffers the provider refused to take back (each one a buffer
	// fewer behind the credits: none is expected).
	SharedRecvBufs int64
	SharedRecvLost uint64
	// Rendezvous sends: read by the peer straight from the caller's
	// registered payload (Conn.AllocPayload), or from a copy.
	ZeroCopySends, CopiedSends uint64
	// Rendezvous payloads moved by an RDMA read we posted (we received
	// them) or by an RDMA write we posted (we sent them): Config.Rendezvous.
	RendezvousReads, RendezvousWrites uint64
	// WritePieces counts the RDMA writes posted for RendezvousWrites:
	// more than one a payload where Config.WriteChunk splits them.
	WritePieces uint64
	// ControlRecvs are the receives posted for the write rendezvous's
	// RDV_READY and RDV_DONE frames, beside the sessions' credits: part
	// of RecvsPosted (or of the shared pool's buffers).
	ControlRecvs int64
}

// Stats sums the counters of the transport's domains.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s Stats
	for _, d := range t.doms {
		s.RegisteredBytes += d.registered.Load()
		s.HighWaterBytes += d.highWater.Load()
		s.BuffersInUse += d.inUse.Load()
		s.RecvsPosted += d.posted.Load()
		s.PollerSleeps += d.pollStats.blocked.Load()
		s.ZeroCopySends += d.zeroCopy.Load()
		s.CopiedSends += d.copied.Load()
		s.RendezvousReads += d.reads.Load()
		s.RendezvousWrites += d.writes.Load()
		s.WritePieces += d.writePieces.Load()
		s.ControlRecvs += d.ctlRecvs.Load()
		if d.srx != nil {
			d.srx.mu.Lock()
			s.SharedRecvBufs += int64(d.srx.n)
			d.srx.mu.Unlock()
			s.SharedRecvLost += d.srx.postErrs.Load()
		}
	}
	return s
}

// Close closes every link and listener and releases all registered memory.
func (t *Transport) Close() error {
	t.mu.Lock()
	doms := t.doms
	t.doms = map[string]*domain{}
	t.mu.Unlock()
	for _, d := range doms {
		d.close()
	}
	return nil
}

// getinfo asks libfabric for MSG endpoints of our provider at host:port
// (as a local address with source, else as a destination).
func (t *Transport) getinfo(host, port string, source bool) (*C.struct_fi_info, error) {
	if err := t.checkFIProvider(); err != nil {
		return nil, err
	}
	var info *C.struct_fi_info
	cprov, chost, cport := C.CString(t.prov), C.CString(host), C.CString(port)
	defer C.free(unsafe.Pointer(cprov))
	defer C.free(unsafe.Pointer(chost))
	defer C.free(unsafe.Pointer(cport))
	src := C.int(0)
	if source {
		src = 1
	}
	if err := fiErrI("fi_getinfo", C.osp_getinfo(cprov, chost, cport, src, &info)); err != nil {
		return nil, fmt.Errorf("%w: provider %q at %s (see `fi_info -p %s -t FI_EP_MSG`)",
			err, t.prov, net.JoinHostPort(host, port), t.prov)
	}
	return info, nil
}

// resolve finds host:port with libfabric (as a local address to bind with
// source, else as a destination) and opens its domain. The caller frees
// info.
func (t *Transport) resolve(addr string, source bool) (string, *C.struct_fi_info, *domain, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", nil, nil, err
	}
	info, err := t.getinfo(host, port, source)
	if err != nil {
		return "", nil, nil, err
	}
	d, err := t.domainFor(info)
	if err != nil {
		C.fi_freeinfo(info)
		return "", nil, nil, err
	}
	return host, info, d, nil
}

// domainFor returns the open domain libfabric chose in info, one per
// domain name, shared by listeners and dialers.
func (t *Transport) domainFor(info *C.struct_fi_info) (*domain, error) {
	name := C.GoString(C.osp_info_domain(info))
	t.mu.Lock()
	defer t.mu.Unlock()
	if d := t.doms[name]; d != nil {
		return d, nil
	}
	d, err := openDomain(t, info)
	if err != nil {
		return nil, err
	}
	t.doms[name] = d
	return d, nil
}

// CM data: our banner, the number of receives we post (u32), the size of
// each (u32): a sender never sends an inline frame larger than the peer's
// receive buffers, whatever its own BufSize; our link tag (u64: link id and
// a random token), which the peer attaches to its sends when we receive
// from a shared pool; and flags (u32; bit 0: we do; bit 1: we offer the
// write rendezvous, with receives posted for its control frames).
const cmDataSize = wire.BannerSize + 20

const (
	cmFlagSRX   = 1
	cmFlagWrite = 2
)

type cmInfo struct {
	features  uint64
	peerBuf   int
	peerTag   uint64
	peerSRX   bool
	peerWrite bool
}

func cmData(bn wire.Banner, l *link) []byte {
	b := make([]byte, cmDataSize)
	bn.Put(b)
	binary.LittleEndian.PutUint32(b[wire.BannerSize:], uint32(l.nrecv))
	binary.LittleEndian.PutUint32(b[wire.BannerSize+4:], uint32(l.bufSize))
	binary.LittleEndian.PutUint64(b[wire.BannerSize+8:], l.tag)
	var flags uint32
	if l.srx {
		flags |= cmFlagSRX
	}
	if l.ctlRecv > 0 {
		flags |= cmFlagWrite
	}
	binary.LittleEndian.PutUint32(b[wire.BannerSize+16:], flags)
	return b
}

// parseCM checks the peer's connection data and returns the agreed
// features and what the peer says of its receives.
func parseCM(mine wire.Banner, data []byte) (cm cmInfo, err error) {
	if len(data) < cmDataSize {
		return cm, &wire.Error{Kind: wire.ErrKindBanner, Msg: fmt.Sprintf("connection data of %d bytes, want %d", len(data), cmDataSize)}
	}
	peer, err := wire.ParseBanner(data)
	if err != nil {
		return cm, err
	}
	cm.peerBuf = int(binary.LittleEndian.Uint32(data[wire.BannerSize+4:]))
	if minBuf := wire.PreambleSize + rdvDescSize + wire.EpilogueSize; cm.peerBuf < minBuf {
		return cm, &wire.Error{Kind: wire.ErrKindBanner, Msg: fmt.Sprintf("peer receive buffers of %d bytes, below %d", cm.peerBuf, minBuf)}
	}
	cm.peerTag = binary.LittleEndian.Uint64(data[wire.BannerSize+8:])
	flags := binary.LittleEndian.Uint32(data[wire.BannerSize+16:])
	cm.peerSRX, cm.peerWrite = flags&cmFlagSRX != 0, flags&cmFlagWrite != 0
	cm.features, err = wire.Negotiate(mine, peer)
	return cm, err
}

// setPeer applies what the peer's connection data says.
func (l *link) setPeer(cm cmInfo) {
	l.features = cm.features
	l.sendLimit = min(l.bufSize, cm.peerBuf)
	l.peerTag, l.peerSRX = cm.peerTag, cm.peerSRX
	l.rdvWrite = l.ctlRecv > 0 && cm.peerWrite
}

// Listen binds host:port and accepts connections through libfabric's CM.
func (t *Transport) Listen(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Listener, error) {
	host, info, d, err := t.resolve(addr, true)
	if err != nil {
		return nil, err
	}
	// The passive endpoint keeps pointers into info (the sockets provider
	// reads it on every connection request): it lives until Close.
	l := &listener{d: d, info: info, opts: opts, host: host, links: make(chan *link, 16), done: make(chan struct{})}
	if err := fiErrI("listen", C.osp_passive(d.fabric, info, d.eq, &l.pep)); err != nil {
		d.closeCM(unsafe.Pointer(l.pep))
		C.fi_freeinfo(info)
		return nil, err
	}
	p := C.osp_port((*C.struct_fid)(unsafe.Pointer(l.pep)))
	if p < 0 {
		d.closeCM(unsafe.Pointer(l.pep))
		C.fi_freeinfo(info)
		return nil, fiErrI("fi_getname", p)
	}
	l.port = int(p)
	d.setCMOwner(unsafe.Pointer(l.pep), l)
	d.addListener(l)
	return l, nil
}

type listener struct {
	d     *domain
	info  *C.struct_fi_info
	pep   *C.struct_fid_pep
	opts  wire.LinkOptions
	host  string
	port  int
	links chan *link
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func (l *listener) Addr() string { return net.JoinHostPort(l.host, fmt.Sprint(l.port)) }

// name is the listener's address for logs.
func (l *listener) name() string { return "rdma://" + l.Addr() }

// cmEvent handles a connection request: the endpoint is built, its
// receives posted and the request accepted on a goroutine of its own, so
// the CM loop never waits on one peer.
func (l *listener) cmEvent(event uint32, info *C.struct_fi_info, data []byte, err error) {
	if err != nil || event != C.FI_CONNREQ || info == nil {
		if info != nil {
			C.fi_freeinfo(info)
		}
		return
	}
	select {
	case <-l.done:
		C.osp_reject(l.pep, C.osp_info_handle(info))
		C.fi_freeinfo(info)
		return
	default:
	}
	if !l.opts.Inbound.Admit(l.name(), "") {
		C.osp_reject(l.pep, C.osp_info_handle(info))
		C.fi_freeinfo(info)
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer C.fi_freeinfo(info)
		cm, err := parseCM(l.opts.Banner, data)
		if err != nil {
			C.osp_reject(l.pep, C.osp_info_handle(info))
			l.opts.Inbound.Done()
			return
		}
		lk, err := newLink(l.d, info, l.opts)
		if err != nil {
			C.osp_reject(l.pep, C.osp_info_handle(info))
			l.opts.Inbound.Done()
			return
		}
		lk.onClose = l.opts.Inbound.Done // from here Close releases the count
		lk.setPeer(cm)
		reply := cmData(l.opts.Banner, lk)
		if err := fiErrI("fi_accept", C.osp_accept(lk.ep, unsafe.Pointer(&reply[0]), C.size_t(len(reply)))); err != nil {
			lk.Close()
			return
		}
		l.d.wakeSleeper() // a new socket to poll (see cmLoop)
		if err := lk.waitConnected(l.done, 10*time.Second); err != nil {
			lk.Close()
			return
		}
		select {
		case l.links <- lk:
		case <-l.done:
			lk.Close()
		}
	}()
}

func (l *listener) Accept(ctx context.Context) (wire.Link, error) {
	select {
	case lk := <-l.links:
		return lk, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.d.setCMOwner(unsafe.Pointer(l.pep), nil)
		l.d.removeListener(l)
		l.d.closeCM(unsafe.Pointer(l.pep))
		C.fi_freeinfo(l.info)
		l.wg.Wait()
		for {
			select {
			case lk := <-l.links:
				lk.Close()
				continue
			default:
			}
			break
		}
	})
	return nil
}

// Dial connects to host:port.
func (t *Transport) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
	_, info, d, err := t.resolve(addr, false)
	if err != nil {
		return nil, err
	}
	defer C.fi_freeinfo(info)
	lk, err := newLink(d, info, opts)
	if err != nil {
		return nil, err
	}
	lk.remote = addr
	req := cmData(opts.Banner, lk)
	if err := fiErrI("fi_connect", C.osp_connect(lk.ep, info, unsafe.Pointer(&req[0]), C.size_t(len(req)))); err != nil {
		lk.Close()
		return nil, err
	}
	d.wakeSleeper() // a new socket to poll (see cmLoop)
	if err := lk.waitConnected(ctx.Done(), 10*time.Second); err != nil {
		// The connection may be half open (no event answered the
		// request): its teardown is the provider's to finish, and the
		// caller's deadline is now (see Close).
		go lk.Close()
		if fe := (*FabricError)(nil); errors.As(err, &fe) && fe.Code == C.FI_ECONNREFUSED {
			// A reject carries no reason that every provider passes on,
			// so name both of ours (listener.cmEvent).
			err = fmt.Errorf("rdma: %s refused the connection (nothing listens there, or its listener is at its connection limit): %w", addr, err)
		}
		return nil, err
	}
	cm, err := parseCM(opts.Banner, lk.peerCM)
	if err != nil {
		lk.Close()
		return nil, err
	}
	lk.setPeer(cm)
	return lk, nil
}

// shutdownGrace is how long a peer's shutdown waits behind its last
// completions; more than the poller's longest sleep.
const shutdownGrace = 100 * time.Millisecond

// drainTimeout bounds how long Close waits for posted sends to complete.
const drainTimeout = 500 * time.Millisecond

// rdvDesc is the data segment of a rendezvous frame: where the payload is
// and the key to read it; of an RDV_READY frame: where to write it.
const rdvDescSize = 20 // u64 address, u32 length, u64 key

type rdvDesc struct {
	addr uint64
	n    int
	key  uint64
}

func (d rdvDesc) put(b []byte) {
	binary.LittleEndian.PutUint64(b, d.addr)
	binary.LittleEndian.PutUint32(b[8:], uint32(d.n))
	binary.LittleEndian.PutUint64(b[12:], d.key)
}

func parseDesc(b []byte) rdvDesc {
	return rdvDesc{binary.LittleEndian.Uint64(b), int(binary.LittleEndian.Uint32(b[8:])), binary.LittleEndian.Uint64(b[12:])}
}

// The write rendezvous's control frames: each link that offers it posts
// ctlRecvs receives for them beside its window (a peer has at most
// maxReads RDV_READY or RDV_DONE frames of one link unanswered), and
// sends them from ctlSlots small buffers after its send buffers.
const (
	ctlRecvs   = 2 * maxReads // RDV_READYs for our payloads, RDV_DONEs for the peer's
	ctlSlots   = 2 * maxReads
	ctlBufSize = 128 // an RDV_READY is 76 bytes, an RDV_DONE 48
)

// errConsumed: the receive held a frame of the link's own, which is not
// handed up.
var errConsumed = errors.New("rdma: link control frame")

type rxEvent struct {
	slot uint32
	n    int
	err  error
}

// link is one connected MSG endpoint. One credit of the session above is
// one of its posted receives: a receive buffer is posted again when the
// frame in it is released, before the credit for it is granted.
type link struct {
	d        *domain
	id       uint32
	ep       *C.struct_fid_ep
	features uint64
	lim      wire.Limits // in force: wire.HandshakeLimits until EndHandshake
	steady   wire.Limits
	noCRC    bool
	bufSize  int
	onClose  func() // the listener's accounting of open connections
	nrecv    int
	// sendLimit is the largest frame sent inline: our buffers and the
	// peer's, from the connection data, whichever is smaller.
	sendLimit int
	// ctlRecv: receives posted for control frames (ctlRecvs when the
	// domain offers the write rendezvous); rdvWrite: the peer offers it
	// too, so our rendezvous payloads are written by the peer.
	ctlRecv  int
	rdvWrite bool

	// srx: our receives come from the domain's shared pool (srx.go), and
	// recv/recvBufs are unused; peerSRX: the peer's do, so our sends
	// carry its link tag as remote CQ data. A tag is the link id and, where
	// the provider carries 8 bytes of CQ data, a random token the
	// completion must match: a peer cannot steer frames into another
	// link's session by naming its id.
	srx      bool
	tag      uint64
	peerSRX  bool
	peerTag  uint64
	recv     *region // recvs() receive buffers
	recvDesc C.uintptr_t
	recvBufs []*wire.Buffer
	send     *region // SendSlots send buffers, then ctlSlots control buffers
	sendFree chan uint32
	// draining: Close waits for posted sends; sendsIdle wakes it when the
	// last send slot comes back or the link fails.
	draining  atomic.Bool
	sendsIdle chan struct{}
	ctlFree   chan uint32

	rx       chan rxEvent
	readDone chan readDoneEv

	// reader goroutine only: rendezvous transfers in flight, frames in
	// order; rdvSeen numbers the rendezvous frames received
	pend      []*pendingRead
	rdvSeen   uint32
	readSlots [maxReads]*pendingRead
	freeReads []uint32
	readsOut  int
	pendFree  []*pendingRead
	connected chan error
	peerCM    []byte
	closed    chan struct{}
	// closing is set by the first Close, which closes closeDone once the
	// endpoint is closed and the link's memory given back.
	closing   atomic.Bool
	closeDone chan struct{}
	dead      atomic.Bool
	failed    atomic.Bool
	// epMu keeps Close from retiring the send region while a writer fills
	// a send buffer, and rendezvous reads from starting on a closed link.
	// Posts themselves are queued (post.go) and dropped once dead is set.
	epMu sync.RWMutex

	readMu sync.Mutex // held by ReadFrame: Close cleans up after the reader

	held atomic.Int32 // receive buffers held by frames above; the region lives until 0 after close
	// epClosed: fi_close of the endpoint has returned (dead comes first),
	// so the provider no longer uses the link's regions.
	epClosed atomic.Bool

	postMu  sync.Mutex
	postedN int64 // receives posted and not completed
	ledger  recvLedger

	// rendezvous: source buffers we sent, freed in order as the peer's
	// count of completed reads (the link word) advances
	rdvMu      sync.Mutex
	rdvOut     []rdvSource
	rdvOutN    atomic.Int32 // len(rdvOut), read without rdvMu
	rdvFreed   uint32
	rdvReadCnt atomic.Uint32 // rendezvous frames we handed up: our link word

	local, remote string
}

func newLink(d *domain, info *C.struct_fi_info, opts wire.LinkOptions) (*link, error) {
	cfg := d.t.cfg
	nrecv := max(opts.RecvWindow, 4)
	if rx := int(C.osp_info_rx_size(info)); rx > 0 && nrecv > rx {
		return nil, fmt.Errorf("rdma: receive window of %d exceeds the provider's receive queue of %d", nrecv, rx)
	}
	l := &link{
		d: d, lim: opts.Limits, steady: opts.Limits, noCRC: opts.NoDataCRC, bufSize: cfg.BufSize, nrecv: nrecv,
		readDone: make(chan readDoneEv, maxReads), connected: make(chan error, 1),
		closed: make(chan struct{}), closeDone: make(chan struct{}), sendFree: make(chan uint32, cfg.SendSlots), sendsIdle: make(chan struct{}, 1),
	}
	if opts.Handshake {
		l.lim = wire.HandshakeLimits
	}
	nctl := 0
	if d.rdvWrite {
		l.ctlRecv, nctl = ctlRecvs, ctlSlots
	}
	d.ctlRecvs.Add(int64(l.ctlRecv)) // freeRegions or Close takes it back
	l.rx = make(chan rxEvent, l.recvs()+16)
	var err error
	// A full pool (or a provider without one) leaves the link its own
	// receive queue.
	l.srx = d.srx != nil && d.srx.reserve(l.recvs()) == nil
	if !l.srx {
		if l.recv, err = d.register(l.recvs() * cfg.BufSize); err != nil {
			l.freeRegions()
			return nil, err
		}
		l.recvDesc = l.recv.desc
	}
	if l.send, err = d.register(cfg.SendSlots*cfg.BufSize + nctl*ctlBufSize); err != nil {
		l.freeRegions()
		return nil, err
	}
	for i := range cfg.SendSlots {
		l.sendFree <- uint32(i)
	}
	l.ctlFree = make(chan uint32, nctl)
	for i := range nctl {
		l.ctlFree <- uint32(i)
	}
	for i := range maxReads {
		l.freeReads = append(l.freeReads, uint32(maxReads-1-i))
	}
	if err := d.addLink(l); err != nil {
		l.freeRegions()
		return nil, err
	}
	var srxEP *C.struct_fid_ep
	if l.srx {
		srxEP = d.srx.ep
	}
	if err := fiErrI("fi_endpoint", C.osp_endpoint(d.dom, info, d.eq, d.cq, srxEP, &l.ep)); err != nil {
		d.removeLink(l)
		d.closeCM(unsafe.Pointer(l.ep))
		l.freeRegions()
		return nil, err
	}
	d.setCMOwner(unsafe.Pointer(l.ep), l)
	if l.srx {
		l.local = d.name
		return l, nil
	}
	l.recvBufs = make([]*wire.Buffer, l.recvs())
	for i := range l.recvs() {
		b := l.recv.mem[i*cfg.BufSize : (i+1)*cfg.BufSize : (i+1)*cfg.BufSize]
		slot := uint32(i)
		l.recvBufs[i] = wire.NewExternalBuffer(b, func(*wire.Buffer) { l.repost(slot) })
		l.recvBufs[i].Lent = true
		l.postRecv(slot, false)
	}
	// Every receive is posted before the connection is requested or
	// accepted, so the peer's first frame finds a buffer.
	d.flushPosts()
	if l.failed.Load() {
		l.Close()
		return nil, errors.New("rdma: posting the receive buffers failed")
	}
	l.local = d.name
	return l, nil
}

// recvs is the number of receives the link posts: its window and those
// for control frames.
func (l *link) recvs() int { return l.nrecv + l.ctlRecv }

func (l *link) freeRegions() {
	l.d.ctlRecvs.Add(-int64(l.ctlRecv))
	if l.srx {
		l.d.srx.unreserve(l.recvs())
	}
	if l.recv != nil {
		l.recv.free()
	}
	if l.send != nil {
		l.send.free()
	}
}

func (l *link) cmEvent(event uint32, info *C.struct_fi_info, data []byte, err error) {
	if info != nil {
		C.fi_freeinfo(info)
	}
	switch {
	case err != nil:
		l.fail(err)
	case event == C.FI_CONNECTED:
		l.peerCM = data
		select {
		case l.connected <- nil:
		default:
		}
	case event == C.FI_SHUTDOWN:
		time.AfterFunc(shutdownGrace, l.peerShutDown)
	}
}

// peerShutDown fails the link after the peer shut it down, once what the
// peer sent before that is handed over. CM events and completions travel
// separately: the peer's last frames (a CLOSE) may still be in the CQ, or
// on a provider that progresses manually (tcp) in its socket. The grace
// gives the poller its chance; then a poll of our own to an empty queue
// takes what is left, however busy the machine kept the poller (a CI run
// under the race detector once lost a CLOSE that way, and the peer's
// session waited for a redial that never came).
func (l *link) peerShutDown() {
	d := l.d
	d.lockToken()
	// Under the token a link not yet dead keeps its endpoint, and the
	// domain its CQ, until we let go (closeEndpoint's passToken).
	if !l.dead.Load() {
		for range 64 { // bounded: other links' traffic may never pause
			if n, _, _ := d.pollLocked(); n == 0 {
				break
			}
		}
	}
	d.fiMu.Unlock()
	l.fail(errors.New("rdma: peer shut the connection down"))
}

func (l *link) waitConnected(cancel <-chan struct{}, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-l.connected:
		return err
	case <-l.closed:
		return l.failure()
	case <-cancel:
		return context.Canceled
	case <-t.C:
		return errors.New("rdma: connect timed out")
	}
}

// fail makes the link report err to its reader and writer.
func (l *link) fail(err error) {
	select {
	case l.connected <- err:
	default:
	}
	select {
	case l.rx <- rxEvent{err: err}:
	default:
	}
	l.failed.Store(true)
	l.pokeDrain()
	// Not inline: fail runs on the poller, which Close's drain waits on.
	go l.Close()
}

func (l *link) failure() error { return net.ErrClosed }

// freeSendSlot gives a send buffer back after its send completed or failed.
func (l *link) freeSendSlot(slot uint32) {
	select {
	case l.sendFree <- slot:
	default:
	}
	if l.draining.Load() && len(l.sendFree) == cap(l.sendFree) {
		l.pokeDrain()
	}
}

// pokeDrain wakes Close's drain, if it waits.
func (l *link) pokeDrain() {
	select {
	case l.sendsIdle <- struct{}{}:
	default:
	}
}

// postRecv queues a receive into buffer slot; a failure to post fails the
// link (post.go).
func (l *link) postRecv(slot uint32, lazy bool) {
	l.ledgerPost()
	if l.dead.Load() {
		return
	}
	b := l.recvBufs[slot].B
	l.d.postMaybeLater(postOp{l: l, kind: opRecv, slot: slot, buf: unsafe.Pointer(&b[:1][0]), n: l.bufSize, desc: l.recvDesc}, lazy)
}

// repost gives a receive buffer back to the provider once the frame in it
// is released; after Close it only counts the buffer as returned.
func (l *link) repost(slot uint32) {
	l.recvBufs[slot].Reset(l.bufSize)
	l.postRecv(slot, true)
	l.held.Add(-1)
	l.maybeFreeRecv()
}

func (l *link) complete(op uint8, slot uint32, n int, err error) {
	switch op {
	case opRecv:
		if !l.srx {
			l.countPosted(-1) // the pool counts its own
		}
		if err != nil {
			l.fail(err)
			return
		}
		select {
		case l.rx <- rxEvent{slot: slot, n: n}:
		default:
			// More completions than posted receives: impossible unless
			// the provider misbehaves.
			l.unread(rxEvent{slot: slot, n: n})
			l.fail(errors.New("rdma: receive completions overflow"))
		}
	case opSend:
		l.freeSendSlot(slot)
		if err != nil {
			l.fail(err)
		}
	case opRead:
		select {
		case l.readDone <- readDoneEv{slot: slot, err: err}:
		default:
		}
	case opCtl:
		l.ctlDone(slot)
		if err != nil {
			l.fail(err)
		}
	case opWrite:
		if err != nil {
			l.fail(err)
		}
	}
}

// EndHandshake lifts the handshake limits (wire.LinkOptions.Handshake).
func (l *link) EndHandshake() { l.lim = l.steady }

func (l *link) Features() uint64   { return l.features }
func (l *link) LocalAddr() string  { return l.local }
func (l *link) RemoteAddr() string { return l.remote }

// Close shuts the endpoint down and reclaims its memory. Receive buffers
// still held by frames above are unmapped when the last is released.
//
// Only the first call tears the link down; a later or concurrent one
// returns at once. The teardown waits on the provider (fi_shutdown, and
// fi_close on the CM loop), which may take its time with an endpoint
// whose connection never completed (the sockets provider's fi_close waits
// for its own connection thread; verbs' rdma_destroy_id for the CM events
// of the id): a dial or handshake given up at its deadline closes its link
// and must return then, not when the provider is done. closeDone says
// when it is (waitClosed).
func (l *link) Close() error {
	if !l.closing.CompareAndSwap(false, true) {
		return nil
	}
	l.d.closeBegun(l)
	defer func() {
		l.d.closeEnded(l)
		close(l.closeDone)
	}()
	func() {
		if l.onClose != nil {
			defer l.onClose()
		}
		// Drain: sends already posted (a CLOSE frame, say) complete
		// before the endpoint goes, unless the link has failed. The
		// completions that free the last send slot, and a failure, signal
		// sendsIdle once draining is set.
		l.draining.Store(true)
		deadline := time.NewTimer(drainTimeout)
	drain:
		for !l.failed.Load() && len(l.sendFree) < cap(l.sendFree) {
			select {
			case <-l.sendsIdle:
			case <-deadline.C:
				break drain
			}
		}
		deadline.Stop()
		l.closeEndpoint()
		// The reader may have stopped calling ReadFrame (its caller gave
		// up on the link after a frame) with frames queued behind a
		// rendezvous read and completions in the channel: let go of
		// them once it is out of ReadFrame, which the close ends.
		l.readMu.Lock()
		l.dropPending()
		l.drainRx()
		l.readMu.Unlock()
		l.maybeFreeRecv()
	}()
	return nil
}

// testHookProviderClose, when set (tests), runs where Close hands the
// endpoint to the provider's teardown, to make that teardown slow.
var testHookProviderClose func()

// waitClosed closes the link and waits until its teardown, whoever began
// it, is over.
func (l *link) waitClosed() {
	l.Close()
	<-l.closeDone
}

// closeEndpoint marks the link dead, closes the endpoint and gives back
// what the link held of the domain's.
func (l *link) closeEndpoint() {
	l.epMu.Lock()
	defer l.epMu.Unlock()
	l.dead.Store(true)
	close(l.closed)
	l.d.removeLink(l)
	// Whatever is still queued for the endpoint is dropped from now.
	l.d.passToken()
	if l.ep != nil {
		l.d.setCMOwner(unsafe.Pointer(l.ep), nil)
		if testHookProviderClose != nil {
			testHookProviderClose()
		}
		C.osp_shutdown(l.ep)
		// After fi_close the provider no longer touches our
		// buffers; pending completions for this link id are dropped
		// by the poller.
		l.d.closeCM(unsafe.Pointer(l.ep))
		// Receives still posted die with the endpoint.
		l.postMu.Lock()
		l.d.posted.Add(-l.postedN)
		l.postedN = 0
		l.postMu.Unlock()
	}
	l.epClosed.Store(true)
	l.d.freeClosed(l.send)
	l.d.ctlRecvs.Add(-int64(l.ctlRecv))
	if l.srx {
		l.d.srx.unreserve(l.recvs())
	}
	l.rdvMu.Lock()
	for _, src := range l.rdvOut {
		src.release(l.d)
	}
	l.rdvOut = nil
	l.rdvOutN.Store(0)
	l.rdvMu.Unlock()
}

// countPosted tracks this link's posted receives in the domain's
// counter; once the link is dead its receives were written off by Close.
func (l *link) countPosted(n int64) {
	l.postMu.Lock()
	if !l.dead.Load() {
		l.postedN += n
		l.d.posted.Add(n)
	}
	l.postMu.Unlock()
}

// maybeFreeRecv frees the receive region once the endpoint is closed and
// no frame above holds a buffer of it; Close and the last release call it.
func (l *link) maybeFreeRecv() {
	if l.epClosed.Load() && l.held.Load() <= 0 {
		l.rdvMu.Lock()
		r := l.recv
		l.recv = nil
		l.rdvMu.Unlock()
		if r != nil {
			l.d.freeClosed(r)
		}
	}
}

// ReadFrame returns the next frame. Inline frames point into the receive
// buffer, which is posted again when the frame is released; a rendezvous
// frame's payload is first moved into a registered buffer of its own, by
// our RDMA read or by the peer's RDMA write (Config.Rendezvous).
func (l *link) ReadFrame(f *wire.Frame) (err error) {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	defer func() {
		if err != nil {
			l.dropPending()
			l.d.dropDuty(l)
		}
	}()
	for {
		// Frames leave in the order they arrived: a rendezvous frame
		// whose payload is still moving holds back the ones behind it.
		if len(l.pend) > 0 && l.pend[0].done {
			p := l.pend[0]
			// Shift rather than reslice, so the queue's array is reused.
			n := copy(l.pend, l.pend[1:])
			l.pend[n] = nil
			l.pend = l.pend[:n]
			return l.finish(p, f)
		}
		// Poll for our own completions rather than sleep, if no other
		// reader of the domain does; the select below then finds them.
		// Receives are taken even with every transfer slot busy: the
		// RDV_DONE that frees one comes as a receive.
		l.d.pollFor(l)
		if len(l.pend) == 0 {
			// The common case, a frame with nothing ahead of it, without
			// the multi-way select below. Only with nothing pending: a
			// read's completion must not wait behind a stream of frames.
			select {
			case ev := <-l.rx:
				if done, err := l.received(ev, f); done {
					return err
				}
				continue
			default:
			}
		}
		select {
		case ev := <-l.rx:
			if done, err := l.received(ev, f); done {
				return err
			}
		case d := <-l.readDone:
			l.transferDone(d.slot, d.err)
		case <-l.closed:
			select {
			case ev := <-l.rx:
				if len(l.pend) > 0 {
					l.unread(ev)
					return net.ErrClosed
				}
				p, err := l.frameFrom(ev, f)
				if p != nil {
					l.pend = append(l.pend, p) // for dropPending
				}
				if err == nil && p != nil || err == errConsumed {
					return net.ErrClosed // its payload cannot come now
				}
				return err
			default:
				return net.ErrClosed
			}
		}
	}
}

// received takes the receive ev for ReadFrame: done when f is the next
// frame (or err ends the read); otherwise it was the link's own frame or it
// joined the pending queue.
func (l *link) received(ev rxEvent, f *wire.Frame) (done bool, err error) {
	p, err := l.frameFrom(ev, f)
	switch {
	case err == errConsumed:
		return false, nil
	case err != nil:
		return true, err
	case p == nil && len(l.pend) == 0:
		return true, nil // an inline frame with nothing ahead of it
	case p == nil:
		q := l.newPending()
		q.f, q.done, q.inline = *f, true, true
		l.pend = append(l.pend, q)
		*f = wire.Frame{}
	default:
		l.pend = append(l.pend, p)
	}
	return false, nil
}

// unread gives back the buffer of a receive the reader will not take: a
// shared pool's goes back to the pool (a link's own dies with its region).
func (l *link) unread(ev rxEvent) {
	if l.srx && ev.err == nil {
		l.d.srx.repost(ev.slot)
	}
}

// dropPending lets go of frames the reader will never deliver, after an
// error ended the link: inline ones and those waiting for a transfer slot
// release their receive buffer, transfers retire their destination (the
// provider may still write into it until the endpoint is gone).
func (l *link) dropPending() {
	for i, p := range l.pend {
		switch {
		case p.inline:
			p.f.Release()
		case p.waiting:
			p.buf.Release()
		case p.r != nil:
			l.d.inUse.Add(-1)
			l.d.retire(p.r)
		}
		l.pend[i] = nil
	}
	l.pend = l.pend[:0]
	l.d.transfers.Add(-int64(l.readsOut))
	l.readsOut = 0
	clear(l.readSlots[:])
}

// maxReads bounds the rendezvous transfers one link has in flight: reads
// it posted, or destinations it offered the peer's writes.
const maxReads = 16

// pendingRead is a received frame waiting for its turn: a rendezvous whose
// payload is moving (or waiting for a transfer slot), or an inline frame
// queued behind one.
type pendingRead struct {
	f        wire.Frame
	r        *region
	frontLen int
	size     int
	epi      [wire.EpilogueSize]byte
	done     bool
	inline   bool
	err      error
	// id numbers the rendezvous frame on the link (rdvSeen); a waiting
	// frame keeps its receive buffer (buf) and the descriptor until a
	// transfer slot is free.
	id      uint32
	waiting bool
	buf     *wire.Buffer
	src     rdvDesc
}

type readDoneEv struct {
	slot uint32
	err  error
}

// frameFrom turns a receive completion into an inline frame in f, or, for
// a rendezvous frame, starts moving its payload and returns it; a control
// frame of the link's own is handled here (errConsumed).
func (l *link) frameFrom(ev rxEvent, f *wire.Frame) (*pendingRead, error) {
	if ev.err != nil {
		return nil, ev.err
	}
	var buf *wire.Buffer
	if l.srx {
		if l.dead.Load() {
			l.unread(ev)
			return nil, net.ErrClosed
		}
		buf = l.d.srx.bufs[ev.slot]
	} else {
		// held first, then dead: Close sets dead first, then looks at
		// held, so the region cannot be unmapped under us.
		l.held.Add(1)
		if l.dead.Load() {
			l.held.Add(-1)
			l.maybeFreeRecv()
			return nil, net.ErrClosed
		}
		buf = l.recvBufs[ev.slot]
	}
	b := buf.B[:ev.n]
	if err := f.Preamble.Parse(b, l.lim); err != nil {
		buf.Release()
		return nil, err
	}
	l.peerReadsDone(f.LinkWord)
	if f.Tag.LinkOnly() {
		err := l.control(f, buf, b)
		l.ledgerRead(f.Tag)
		return nil, err
	}
	l.ledgerRead(f.Tag)
	if f.Flags&wire.FlagRendezvous != 0 {
		return l.rendezvous(f, buf, b)
	}
	if f.WireSize() != ev.n {
		buf.Release()
		return nil, &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("frame says %d bytes, the receive got %d", f.WireSize(), ev.n)}
	}
	if !f.HasSegments() {
		buf.Release() // posted again now: nothing points into it
		f.Front, f.Data, f.Buf = nil, nil, nil
		return nil, nil
	}
	// An inline frame's data stays where the receive put it, right after
	// the preamble and front in its BufSize (16 KiB) receive buffer, so it
	// is not on a wire.DataAlign boundary as a rendezvous payload is
	// (finish). Placing it would cost a copy per small message to save
	// one that does not happen: an object this small goes into the
	// store's Pebble, not to an O_DIRECT data file, and the receive
	// buffer must go back to be posted soon anyway.
	front := b[wire.PreambleSize : wire.PreambleSize+int(f.FrontLen)]
	data := b[wire.PreambleSize+len(front) : ev.n-wire.EpilogueSize]
	epi := b[ev.n-wire.EpilogueSize:]
	if err := wire.CheckEpilogue(epi, front, data, f.Flags&wire.FlagNoDataCRC != 0); err != nil {
		buf.Release()
		return nil, err
	}
	f.Front, f.Data, f.Buf = front, data, buf
	f.DataCRC, f.HasDataCRC = checkedDataCRC(f, epi)
	return nil, nil
}

// checkedDataCRC is the data CRC to hand up with f (Frame.DataCRC), once
// CheckEpilogue accepted epi: the CRC the data was verified against, so
// the layer above (Message.DataCRC) need not read the data again; none
// when the sender skipped it (FLAG_NO_DATA_CRC) or there is no data.
func checkedDataCRC(f *wire.Frame, epi []byte) (uint32, bool) {
	if f.Flags&wire.FlagNoDataCRC != 0 || len(f.Data) == 0 {
		return 0, false
	}
	return wire.EpilogueDataCRC(epi), true
}

// rendezvous takes a rendezvous frame: it checks the descriptor and starts
// moving the payload, or queues the frame until a transfer slot is free.
func (l *link) rendezvous(f *wire.Frame, buf *wire.Buffer, b []byte) (*pendingRead, error) {
	if f.DataLen != rdvDescSize || f.WireSize() != len(b) {
		buf.Release()
		return nil, &wire.Error{Kind: wire.ErrKindMalformed, Msg: "bad rendezvous descriptor"}
	}
	src := parseDesc(b[wire.PreambleSize+int(f.FrontLen):])
	if uint32(src.n) > l.lim.MaxData {
		buf.Release()
		return nil, &wire.Error{Kind: wire.ErrKindTooLarge, Msg: fmt.Sprintf("rendezvous payload of %d bytes exceeds the limit of %d", src.n, l.lim.MaxData)}
	}
	p := l.newPending()
	p.f, p.buf, p.frontLen, p.size, p.src = *f, buf, int(f.FrontLen), src.n, src
	p.id = l.rdvSeen
	l.rdvSeen++
	p.epi = [wire.EpilogueSize]byte(b[len(b)-wire.EpilogueSize:])
	if len(l.freeReads) == 0 {
		p.waiting = true
		return p, nil
	}
	if err := l.startTransfer(p); err != nil {
		l.putPending(p)
		return nil, err
	}
	return p, nil
}

// startTransfer moves p's payload into a registered buffer of its own:
// it posts the RDMA read, or offers the buffer to the peer's RDMA write
// (RDV_READY). The frame's receive buffer goes back first.
//
// The payload goes to offset 0 of the buffer and the front right after
// it (rdvFrontAt), as a stream link places a small frame: a registered
// buffer is mmap'd, so it starts on a page and the data on a
// wire.DataAlign boundary, and the store can write it with O_DIRECT from
// where it lies. Putting the front first would need padding up to the
// boundary, which pushes a payload of a power of two plus a front into
// the next size class (a 64 MiB message would take a 128 MiB region).
func (l *link) startTransfer(p *pendingRead) error {
	buf := p.buf
	p.buf, p.waiting = nil, false
	r, err := l.d.getLarge(p.size + p.frontLen)
	if err != nil {
		buf.Release()
		return err
	}
	copy(r.mem[rdvFrontAt(p):], buf.B[wire.PreambleSize:wire.PreambleSize+p.frontLen])
	buf.Release()
	slot := l.freeReads[len(l.freeReads)-1]
	l.epMu.RLock()
	if l.dead.Load() {
		l.epMu.RUnlock()
		l.d.putLarge(r)
		return net.ErrClosed
	}
	p.r = r
	l.freeReads = l.freeReads[:len(l.freeReads)-1]
	l.readSlots[slot] = p
	l.readsOut++
	l.d.transfers.Add(1)
	if !l.rdvWrite {
		// A read the provider refuses comes back as a failed read (post.go).
		l.d.post(postOp{l: l, kind: opRead, slot: slot, buf: r.ptr(0), n: p.size, desc: r.desc, raddr: p.src.addr, rkey: p.src.key})
		l.d.reads.Add(1)
		l.epMu.RUnlock()
		return nil
	}
	l.epMu.RUnlock()
	l.sendCtl(wire.TagRdvReady, uint64(slot)<<32|uint64(p.id), rdvDesc{r.remoteAddr(0), p.size, r.key})
	return nil
}

// rdvFrontAt is where p's front lies in its rendezvous buffer: after the
// payload, which starts the buffer (startTransfer).
func rdvFrontAt(p *pendingRead) int { return p.size }

// transferDone marks the transfer in slot finished (its read completed or
// its RDV_DONE came) and starts those waiting for a slot, in order.
func (l *link) transferDone(slot uint32, err error) {
	p := l.readSlots[slot]
	if p == nil {
		return // dropped with the link
	}
	l.readSlots[slot] = nil
	l.freeReads = append(l.freeReads, slot)
	l.readsOut--
	l.d.transfers.Add(-1)
	p.done, p.err = true, err
	for _, q := range l.pend {
		if len(l.freeReads) == 0 {
			break
		}
		if q.waiting {
			if err := l.startTransfer(q); err != nil {
				q.done, q.err = true, err
			}
		}
	}
}

// control handles the write rendezvous's frames: an RDV_READY asks us to
// write a payload we sent, an RDV_DONE says the peer wrote one we receive.
// It returns errConsumed, or the error that ends the link.
func (l *link) control(f *wire.Frame, buf *wire.Buffer, b []byte) error {
	dst, err := l.checkControl(f, b)
	// Posted again before anything is sent: the peer's next control
	// frame may need it.
	buf.Release()
	if err != nil {
		return err
	}
	if f.Tag == wire.TagRdvDone {
		l.transferDone(uint32(f.Seq>>32), nil)
		return errConsumed
	}
	return l.writePayload(f.Seq, dst)
}

// checkControl validates a control frame in b and returns an RDV_READY's
// destination.
func (l *link) checkControl(f *wire.Frame, b []byte) (rdvDesc, error) {
	if !l.rdvWrite {
		return rdvDesc{}, &wire.Error{Kind: wire.ErrKindProtocol, Msg: fmt.Sprintf("%v frame, but the write rendezvous was not agreed", f.Tag)}
	}
	if f.WireSize() != len(b) {
		return rdvDesc{}, &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("%v frame says %d bytes, the receive got %d", f.Tag, f.WireSize(), len(b))}
	}
	id, slot := uint32(f.Seq), uint32(f.Seq>>32)
	if f.Tag == wire.TagRdvDone {
		if slot >= maxReads || l.readSlots[slot] == nil || l.readSlots[slot].id != id {
			return rdvDesc{}, &wire.Error{Kind: wire.ErrKindProtocol, Msg: fmt.Sprintf("RDV_DONE for rendezvous %d in slot %d, which is not being written", id, slot)}
		}
		return rdvDesc{}, nil
	}
	if f.DataLen != rdvDescSize {
		return rdvDesc{}, &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("RDV_READY with %d bytes of data, want %d", f.DataLen, rdvDescSize)}
	}
	d := b[wire.PreambleSize : wire.PreambleSize+rdvDescSize]
	if err := wire.CheckEpilogue(b[len(b)-wire.EpilogueSize:], nil, d, false); err != nil {
		return rdvDesc{}, err
	}
	return parseDesc(d), nil
}

// writePayload writes the payload of our rendezvous frame number
// uint32(seq) where the peer's RDV_READY says, and sends RDV_DONE behind
// it: the provider processes a send after the writes posted before it
// (FI_ORDER_SAW, checked when the domain opened), so the payload is in
// place when RDV_DONE arrives. The source stays ours until the peer's link
// word says it handed the frame up, as after a read.
func (l *link) writePayload(seq uint64, dst rdvDesc) error {
	l.epMu.RLock()
	if l.dead.Load() {
		l.epMu.RUnlock()
		return net.ErrClosed
	}
	l.rdvMu.Lock()
	k := uint32(seq) - l.rdvFreed
	var src rdvSource
	ok := k < uint32(len(l.rdvOut))
	if ok {
		src = l.rdvOut[k]
	}
	l.rdvMu.Unlock()
	if !ok || src.n != dst.n {
		l.epMu.RUnlock()
		return &wire.Error{Kind: wire.ErrKindProtocol, Msg: fmt.Sprintf("RDV_READY for rendezvous %d of %d bytes, which is not outstanding", uint32(seq), dst.n)}
	}
	// A write the provider refuses fails the link (post.go).
	l.d.post(postOp{l: l, kind: opWrite, buf: src.ptr, n: dst.n, desc: src.desc, raddr: dst.addr, rkey: dst.key})
	l.d.writes.Add(1)
	l.epMu.RUnlock()
	l.sendCtl(wire.TagRdvDone, seq, rdvDesc{})
	return errConsumed
}

// sendCtl sends a control frame from one of the link's control buffers,
// with dst as its data when dst.n > 0 (RDV_READY).
// One is free but for a moment: a peer has at most maxReads of our
// RDV_READY and maxReads of our RDV_DONE unanswered, and each is
// answered only after it was delivered.
func (l *link) sendCtl(tag wire.Tag, seq uint64, dst rdvDesc) {
	slot, ok := takeSlot(l.ctlFree, l.closed)
	if !ok {
		return
	}
	l.epMu.RLock()
	defer l.epMu.RUnlock()
	if l.dead.Load() {
		return
	}
	off := l.d.t.cfg.SendSlots*l.bufSize + int(slot)*ctlBufSize
	b := l.send.mem[off : off+ctlBufSize]
	p := wire.Preamble{Tag: tag, Seq: seq, LinkWord: l.rdvReadCnt.Load()}
	if dst.n > 0 {
		p.DataLen = rdvDescSize
	}
	n := p.WireSize()
	p.Put(b)
	if dst.n > 0 {
		desc := b[wire.PreambleSize : wire.PreambleSize+rdvDescSize]
		dst.put(desc)
		wire.PutEpilogue(b[n-wire.EpilogueSize:], 0, wire.CRC(desc))
	}
	l.d.post(postOp{l: l, kind: opCtl, slot: slot, buf: unsafe.Pointer(&b[0]), n: n, desc: l.send.desc,
		imm: l.peerSRX, data: l.peerTag})
}

// ctlDone gives a control buffer back once its send is over.
func (l *link) ctlDone(slot uint32) {
	select {
	case l.ctlFree <- slot:
	default:
	}
}

// takeSlot takes a free buffer's index from free, waiting for one unless
// closed is closed first.
func takeSlot(free chan uint32, closed chan struct{}) (uint32, bool) {
	select {
	case s := <-free: // the common case, without the two-way select
		return s, true
	default:
	}
	select {
	case s := <-free:
		return s, true
	case <-closed:
		return 0, false
	}
}

// newPending and putPending recycle pendingReads (reader goroutine only),
// so a rendezvous costs no allocation.
func (l *link) newPending() *pendingRead {
	if n := len(l.pendFree); n > 0 {
		p := l.pendFree[n-1]
		l.pendFree = l.pendFree[:n-1]
		return p
	}
	return new(pendingRead)
}

func (l *link) putPending(p *pendingRead) {
	*p = pendingRead{}
	l.pendFree = append(l.pendFree, p)
}

// finish hands a pending frame over once its turn has come.
func (l *link) finish(p *pendingRead, f *wire.Frame) error {
	defer l.putPending(p)
	if p.inline {
		*f = p.f
		return nil
	}
	if p.err != nil {
		// The provider may still write into the buffer: retire it
		// rather than put it back in the cache.
		if p.r != nil {
			l.d.inUse.Add(-1)
			l.d.retire(p.r)
		}
		return p.err
	}
	l.rdvReadCnt.Add(1)
	at := rdvFrontAt(p)
	data := p.r.mem[:p.size]
	front := p.r.mem[at : at+p.frontLen]
	if err := wire.CheckEpilogue(p.epi[:], front, data, p.f.Flags&wire.FlagNoDataCRC != 0); err != nil {
		l.d.putLarge(p.r)
		return err
	}
	*f = p.f
	f.Flags &^= wire.FlagRendezvous
	f.DataLen = uint32(p.size)
	f.Front, f.Data = front, data
	f.DataCRC, f.HasDataCRC = checkedDataCRC(f, p.epi[:])
	f.Buf = p.r.buffer(p.size + p.frontLen)
	return nil
}

// peerReadsDone frees our rendezvous source buffers the peer has moved,
// as its link word (count) says. A count behind ours is ignored: control
// frames, sent by the reader, can pass the writer's frames with an older
// count.
func (l *link) peerReadsDone(count uint32) {
	if l.rdvOutN.Load() == 0 {
		// Nothing of ours outstanding, the common case for small
		// messages: no lock on every frame. A source appended meanwhile
		// cannot be counted in this frame's word yet.
		return
	}
	l.rdvMu.Lock()
	k := 0
	if ahead := count - l.rdvFreed; int32(ahead) > 0 {
		k = min(int(ahead), len(l.rdvOut))
	}
	for i := range k {
		l.rdvOut[i].release(l.d)
	}
	l.rdvFreed += uint32(k)
	if k > 0 {
		n := copy(l.rdvOut, l.rdvOut[k:])
		clear(l.rdvOut[n:])
		l.rdvOut = l.rdvOut[:n]
		l.rdvOutN.Store(int32(n))
	}
	l.rdvMu.Unlock()
}

// rdvSource is what a rendezvous frame's payload is moved from until the
// peer has it: a registered copy (r), or the caller's own registered
// buffer (b), on which the link holds a reference; ptr, n and desc are the
// payload for an RDMA write of ours.
type rdvSource struct {
	r    *region
	b    *wire.Buffer
	ptr  unsafe.Pointer
	n    int
	desc C.uintptr_t
}

func (s rdvSource) release(d *domain) {
	d.transfers.Add(-1)
	if s.b != nil {
		s.b.Release()
		return
	}
	d.putLarge(s.r)
}

// rendezvousSource returns where the peer reads f's payload from: straight
// from the caller's buffer when it is memory this domain registered
// (AllocPayload), else from a registered copy.
func (l *link) rendezvousSource(f *wire.Frame) (src rdvSource, addr, key uint64, err error) {
	n := len(f.Data)
	if f.Buf != nil {
		if r, ok := f.Buf.Owner.(*region); ok && r.d == l.d {
			if off, ok := r.holds(f.Data); ok {
				f.Buf.Ref()
				l.d.zeroCopy.Add(1)
				return rdvSource{b: f.Buf, ptr: r.ptr(off), n: n, desc: r.desc}, r.remoteAddr(off), r.key, nil
			}
		}
	}
	r, err := l.d.getLarge(n)
	if err != nil {
		return rdvSource{}, 0, 0, err
	}
	copy(r.mem, f.Data)
	l.d.copied.Add(1)
	return rdvSource{r: r, ptr: r.ptr(0), n: n, desc: r.desc}, r.remoteAddr(0), r.key, nil
}

// AllocPayload hands out registered memory for a payload too large to go
// inline whatever the front, so the rendezvous reads it where the caller
// wrote it; smaller payloads are copied into a send buffer anyway and get an
// ordinary pooled buffer. Either way the caller holds one reference.
func (l *link) AllocPayload(n int) (*wire.Buffer, error) {
	if n+wire.PreambleSize+wire.EpilogueSize <= l.sendLimit {
		return wire.GetBuffer(n), nil
	}
	r, err := l.d.getLarge(n)
	if err != nil {
		return nil, err
	}
	return r.buffer(n), nil
}

// WriteFrames posts one send per frame, inline when it fits a buffer,
// else as a rendezvous descriptor over a registered copy of the payload.
func (l *link) WriteFrames(frames []wire.Frame) error {
	for i := range frames {
		if err := l.writeFrame(&frames[i]); err != nil {
			return err
		}
	}
	return nil
}

func (l *link) writeFrame(f *wire.Frame) error {
	slot, ok := takeSlot(l.sendFree, l.closed)
	if !ok {
		return net.ErrClosed
	}
	l.epMu.RLock()
	defer l.epMu.RUnlock()
	if l.dead.Load() {
		return net.ErrClosed
	}
	sb := l.send.mem[int(slot)*l.bufSize : (int(slot)+1)*l.bufSize]
	p := f.Preamble
	l.checkGrant(&p)
	p.LinkWord = l.rdvReadCnt.Load()
	p.FrontLen, p.DataLen = uint32(len(f.Front)), uint32(len(f.Data))
	noCRC := l.noCRC && l.features&wire.FeatureNoDataCRC != 0 && len(f.Data) > 0
	if noCRC {
		p.Flags |= wire.FlagNoDataCRC
	}
	var dcrc uint32
	switch {
	case noCRC:
	case f.HasDataCRC:
		// The sender's (Message.SetDataCRC): one pass over the data
		// fewer. It is not checked here: the receiver refuses a wrong
		// one as corrupt, and recomputing it would launder data that
		// changed after its CRC was taken (protocol.md §4.2).
		dcrc = f.DataCRC
	default:
		dcrc = wire.CRC(f.Data)
	}
	n := p.WireSize()
	if n > l.sendLimit {
		// Rendezvous: the descriptor goes inline, the payload stays in
		// registered memory until the peer has read it.
		if wire.PreambleSize+len(f.Front)+rdvDescSize+wire.EpilogueSize > l.sendLimit {
			l.freeSendSlot(slot)
			return &wire.Error{Kind: wire.ErrKindTooLarge, Msg: fmt.Sprintf("rdma: front of %d bytes does not fit a %d-byte buffer", len(f.Front), l.sendLimit)}
		}
		src, addr, key, err := l.rendezvousSource(f)
		if err != nil {
			l.freeSendSlot(slot)
			return err
		}
		p.Flags |= wire.FlagRendezvous
		p.DataLen = rdvDescSize
		n = p.WireSize()
		p.Put(sb)
		copy(sb[wire.PreambleSize:], f.Front)
		rdvDesc{addr, len(f.Data), key}.put(sb[wire.PreambleSize+len(f.Front):])
		wire.PutEpilogue(sb[n-wire.EpilogueSize:], wire.CRC(f.Front), dcrc)
		l.rdvMu.Lock()
		l.rdvOut = append(l.rdvOut, src)
		l.rdvOutN.Store(int32(len(l.rdvOut)))
		l.d.transfers.Add(1)
		l.rdvMu.Unlock()
	} else {
		p.Put(sb)
		if p.HasSegments() {
			copy(sb[wire.PreambleSize:], f.Front)
			copy(sb[wire.PreambleSize+len(f.Front):], f.Data)
			wire.PutEpilogue(sb[n-wire.EpilogueSize:], wire.CRC(f.Front), dcrc)
		}
	}
	// A send the provider refuses fails the link (post.go).
	l.d.post(postOp{l: l, kind: opSend, slot: slot, buf: unsafe.Pointer(&sb[0]), n: n, desc: l.send.desc,
		imm: l.peerSRX, data: l.peerTag})
	return nil
}

// WriteSpace tells the messenger how much a write can take without
// waiting: the free send buffers. A sender with room writes its message
// itself (the messenger's writeInline), saving the hand-off to the writer
// goroutine on each side of a request and its reply.
func (l *link) WriteSpace() int { return len(l.sendFree) * l.sendLimit }
