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

// NewTransport returns the transport for "rdma+PROVIDER"; FI_PROVIDER, if
// set, overrides the provider.
func NewTransport(provider string, cfg Config) *Transport {
	cfg.setDefaults()
	prov := provider
	if env := os.Getenv("FI_PROVIDER"); env != "" {
		prov = env
	}
	return &Transport{scheme: "rdma+" + provider, prov: prov, cfg: cfg, doms: map[string]*domain{}}
}

// Transports returns rdma+tcp, rdma+sockets and rdma+verbs.
func Transports() []wire.Transport {
	return []wire.Transport{
		NewTransport("tcp", Config{}), NewTransport("sockets", Config{}), NewTransport("verbs", Config{}),
	}
}

// Hint explains a missing rdma+ transport.
func Hint(scheme string) string {
	if strings.HasPrefix(scheme, "rdma+") {
		return "unknown RDMA provider; built-in are rdma+tcp, rdma+sockets and rdma+verbs (FI_PROVIDER overrides the provider)"
	}
	return ""
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
// from a shared pool; and flags (u32; bit 0: we do).
const cmDataSize = wire.BannerSize + 20

const cmFlagSRX = 1

type cmInfo struct {
	features uint64
	peerBuf  int
	peerTag  uint64
	peerSRX  bool
}

func cmData(bn wire.Banner, l *link) []byte {
	b := make([]byte, cmDataSize)
	bn.Put(b)
	binary.LittleEndian.PutUint32(b[wire.BannerSize:], uint32(l.nrecv))
	binary.LittleEndian.PutUint32(b[wire.BannerSize+4:], uint32(l.bufSize))
	binary.LittleEndian.PutUint64(b[wire.BannerSize+8:], l.tag)
	if l.srx {
		binary.LittleEndian.PutUint32(b[wire.BannerSize+16:], cmFlagSRX)
	}
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
	cm.peerSRX = binary.LittleEndian.Uint32(data[wire.BannerSize+16:])&cmFlagSRX != 0
	cm.features, err = wire.Negotiate(mine, peer)
	return cm, err
}

// setPeer applies what the peer's connection data says.
func (l *link) setPeer(cm cmInfo) {
	l.features = cm.features
	l.sendLimit = min(l.bufSize, cm.peerBuf)
	l.peerTag, l.peerSRX = cm.peerTag, cm.peerSRX
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
		C.osp_close(unsafe.Pointer(l.pep))
		C.fi_freeinfo(info)
		return nil, err
	}
	p := C.osp_port((*C.struct_fid)(unsafe.Pointer(l.pep)))
	if p < 0 {
		C.osp_close(unsafe.Pointer(l.pep))
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
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer C.fi_freeinfo(info)
		cm, err := parseCM(l.opts.Banner, data)
		if err != nil {
			C.osp_reject(l.pep, C.osp_info_handle(info))
			return
		}
		lk, err := newLink(l.d, info, l.opts)
		if err != nil {
			C.osp_reject(l.pep, C.osp_info_handle(info))
			return
		}
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
		C.osp_close(unsafe.Pointer(l.pep))
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
		lk.Close()
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
// and the key to read it.
const rdvDescSize = 20 // u64 address, u32 length, u64 key

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
	lim      wire.Limits
	noCRC    bool
	bufSize  int
	nrecv    int
	// sendLimit is the largest frame sent inline: our buffers and the
	// peer's, from the connection data, whichever is smaller.
	sendLimit int

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
	recv     *region // nrecv receive buffers
	recvDesc C.uintptr_t
	recvBufs []*wire.Buffer
	send     *region // SendSlots send buffers
	sendFree chan uint32

	rx       chan rxEvent
	readDone chan readDoneEv

	// reader goroutine only: rendezvous reads in flight, frames in order
	pend      []*pendingRead
	readSlots [maxReads]*pendingRead
	freeReads []uint32
	readsOut  int
	pendFree  []*pendingRead
	connected chan error
	peerCM    []byte
	closed    chan struct{}
	closeOnce sync.Once
	dead      atomic.Bool
	failed    atomic.Bool
	// epMu keeps Close from retiring the send region while a writer fills
	// a send buffer, and rendezvous reads from starting on a closed link.
	// Posts themselves are queued (post.go) and dropped once dead is set.
	epMu sync.RWMutex

	readMu sync.Mutex // held by ReadFrame: Close cleans up after the reader

	held atomic.Int32 // receive buffers held by frames above; the region lives until 0 after close

	postMu  sync.Mutex
	postedN int64 // receives posted and not completed

	// rendezvous: source buffers we sent, freed in order as the peer's
	// count of completed reads (the link word) advances
	rdvMu      sync.Mutex
	rdvOut     []rdvSource
	rdvFreed   uint32
	rdvReadCnt atomic.Uint32 // reads we completed: our link word

	local, remote string
}

func newLink(d *domain, info *C.struct_fi_info, opts wire.LinkOptions) (*link, error) {
	cfg := d.t.cfg
	nrecv := max(opts.RecvWindow, 4)
	if rx := int(C.osp_info_rx_size(info)); rx > 0 && nrecv > rx {
		return nil, fmt.Errorf("rdma: receive window of %d exceeds the provider's receive queue of %d", nrecv, rx)
	}
	l := &link{
		d: d, lim: opts.Limits, noCRC: opts.NoDataCRC, bufSize: cfg.BufSize, nrecv: nrecv,
		rx: make(chan rxEvent, nrecv+16), readDone: make(chan readDoneEv, maxReads), connected: make(chan error, 1),
		closed: make(chan struct{}), sendFree: make(chan uint32, cfg.SendSlots),
	}
	var err error
	// A full pool (or a provider without one) leaves the link its own
	// receive queue.
	l.srx = d.srx != nil && d.srx.reserve(nrecv) == nil
	if !l.srx {
		if l.recv, err = d.register(nrecv * cfg.BufSize); err != nil {
			return nil, err
		}
		l.recvDesc = l.recv.desc
	}
	if l.send, err = d.register(cfg.SendSlots * cfg.BufSize); err != nil {
		l.recv.free()
		return nil, err
	}
	for i := range cfg.SendSlots {
		l.sendFree <- uint32(i)
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
		if l.ep != nil {
			C.osp_close(unsafe.Pointer(l.ep))
		}
		l.freeRegions()
		return nil, err
	}
	d.setCMOwner(unsafe.Pointer(l.ep), l)
	if l.srx {
		l.local = d.name
		return l, nil
	}
	l.recvBufs = make([]*wire.Buffer, nrecv)
	for i := range nrecv {
		b := l.recv.mem[i*cfg.BufSize : (i+1)*cfg.BufSize : (i+1)*cfg.BufSize]
		slot := uint32(i)
		l.recvBufs[i] = wire.NewExternalBuffer(b, func(*wire.Buffer) { l.repost(slot) })
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

func (l *link) freeRegions() {
	if l.srx {
		l.d.srx.unreserve(l.nrecv)
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
		// CM events and completions travel separately: the peer's last
		// frames (a CLOSE) may still be in the CQ. Let the poller hand
		// them over before the reader hears of the shutdown.
		time.AfterFunc(shutdownGrace, func() { l.fail(errors.New("rdma: peer shut the connection down")) })
	}
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
	// Not inline: fail runs on the poller, which Close's drain waits on.
	go l.Close()
}

func (l *link) failure() error { return net.ErrClosed }

// postRecv queues a receive into buffer slot; a failure to post fails the
// link (post.go).
func (l *link) postRecv(slot uint32, lazy bool) {
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
		select {
		case l.sendFree <- slot:
		default:
		}
		if err != nil {
			l.fail(err)
		}
	case opRead:
		select {
		case l.readDone <- readDoneEv{slot: slot, err: err}:
		default:
		}
	}
}

func (l *link) Features() uint64   { return l.features }
func (l *link) LocalAddr() string  { return l.local }
func (l *link) RemoteAddr() string { return l.remote }

// Close shuts the endpoint down and reclaims its memory. Receive buffers
// still held by frames above are unmapped when the last is released.
func (l *link) Close() error {
	l.closeOnce.Do(func() {
		// Drain: sends already posted (a CLOSE frame, say) complete
		// before the endpoint goes, unless the link has failed.
		deadline := time.Now().Add(drainTimeout)
		for !l.failed.Load() && len(l.sendFree) < cap(l.sendFree) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond) // waiting on the poller's completions
		}
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
	})
	return nil
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
		C.osp_shutdown(l.ep)
		// After fi_close the provider no longer touches our
		// buffers; pending completions for this link id are dropped
		// by the poller.
		C.osp_close(unsafe.Pointer(l.ep))
		// Receives still posted die with the endpoint.
		l.postMu.Lock()
		l.d.posted.Add(-l.postedN)
		l.postedN = 0
		l.postMu.Unlock()
	}
	l.d.retire(l.send)
	if l.srx {
		l.d.srx.unreserve(l.nrecv)
	}
	l.rdvMu.Lock()
	for _, src := range l.rdvOut {
		src.release(l.d)
	}
	l.rdvOut = nil
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

func (l *link) maybeFreeRecv() {
	if l.dead.Load() && l.held.Load() <= 0 {
		l.rdvMu.Lock()
		r := l.recv
		l.recv = nil
		l.rdvMu.Unlock()
		if r != nil {
			l.d.retire(r)
		}
	}
}

// ReadFrame returns the next frame. Inline frames point into the receive
// buffer, which is posted again when the frame is released; a rendezvous
// frame's payload is pulled by RDMA read into a registered buffer of its
// own first.
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
		// whose read is still running holds back the ones behind it.
		if len(l.pend) > 0 && l.pend[0].done {
			p := l.pend[0]
			// Shift rather than reslice, so the queue's array is reused.
			n := copy(l.pend, l.pend[1:])
			l.pend[n] = nil
			l.pend = l.pend[:n]
			return l.finish(p, f)
		}
		rx := l.rx
		if l.readsOut >= maxReads {
			rx = nil // enough reads in flight: wait for one to finish
		}
		// Poll for our own completions rather than sleep, if no other
		// reader of the domain does; the select below then finds them.
		l.d.pollFor(l, rx != nil)
		if rx != nil && len(l.pend) == 0 {
			// The common case, a frame with nothing ahead of it, without
			// the multi-way select below. Only with nothing pending: a
			// read's completion must not wait behind a stream of frames.
			select {
			case ev := <-rx:
				if done, err := l.received(ev, f); done {
					return err
				}
				continue
			default:
			}
		}
		select {
		case ev := <-rx:
			if done, err := l.received(ev, f); done {
				return err
			}
		case d := <-l.readDone:
			p := l.readSlots[d.slot]
			l.readSlots[d.slot] = nil
			l.freeReads = append(l.freeReads, d.slot)
			l.readsOut--
			l.d.transfers.Add(-1)
			p.done, p.err = true, d.err
		case <-l.closed:
			select {
			case ev := <-l.rx:
				if len(l.pend) > 0 {
					l.unread(ev)
					return net.ErrClosed
				}
				p, err := l.frameFrom(ev, f)
				if err == nil && p != nil {
					return net.ErrClosed // its read cannot finish now
				}
				return err
			default:
				return net.ErrClosed
			}
		}
	}
}

// received takes the receive ev for ReadFrame: done when f is the next
// frame (or err ends the read); otherwise it joined the pending queue.
func (l *link) received(ev rxEvent, f *wire.Frame) (done bool, err error) {
	p, err := l.frameFrom(ev, f)
	switch {
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
// error ended the link: inline ones release their receive buffer, reads
// retire their destination (the provider may still write into it until
// the endpoint is gone).
func (l *link) dropPending() {
	for i, p := range l.pend {
		switch {
		case p.inline:
			p.f.Release()
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

// maxReads bounds the rendezvous reads one link has in flight.
const maxReads = 16

// pendingRead is a received frame waiting for its turn: a rendezvous whose
// payload is being read, or an inline frame queued behind one.
type pendingRead struct {
	f        wire.Frame
	r        *region
	frontLen int
	size     int
	epi      [wire.EpilogueSize]byte
	done     bool
	inline   bool
	err      error
}

type readDoneEv struct {
	slot uint32
	err  error
}

// frameFrom turns a receive completion into an inline frame in f, or, for
// a rendezvous frame, starts the RDMA read of its payload and returns it.
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
	if f.Flags&wire.FlagRendezvous != 0 {
		return l.startRendezvous(f, buf, b)
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
	front := b[wire.PreambleSize : wire.PreambleSize+int(f.FrontLen)]
	data := b[wire.PreambleSize+len(front) : ev.n-wire.EpilogueSize]
	if err := wire.CheckEpilogue(b[ev.n-wire.EpilogueSize:], front, data, f.Flags&wire.FlagNoDataCRC != 0); err != nil {
		buf.Release()
		return nil, err
	}
	f.Front, f.Data, f.Buf = front, data, buf
	return nil, nil
}

// startRendezvous posts the RDMA read of a rendezvous frame's payload into
// a registered buffer; the receive buffer goes back at once.
func (l *link) startRendezvous(f *wire.Frame, buf *wire.Buffer, b []byte) (*pendingRead, error) {
	if f.DataLen != rdvDescSize || f.WireSize() != len(b) {
		buf.Release()
		return nil, &wire.Error{Kind: wire.ErrKindMalformed, Msg: "bad rendezvous descriptor"}
	}
	front := b[wire.PreambleSize : wire.PreambleSize+int(f.FrontLen)]
	desc := b[wire.PreambleSize+len(front):]
	raddr := binary.LittleEndian.Uint64(desc)
	size := int(binary.LittleEndian.Uint32(desc[8:]))
	rkey := binary.LittleEndian.Uint64(desc[12:])
	if uint32(size) > l.lim.MaxData {
		buf.Release()
		return nil, &wire.Error{Kind: wire.ErrKindTooLarge, Msg: fmt.Sprintf("rendezvous payload of %d bytes exceeds the limit of %d", size, l.lim.MaxData)}
	}
	r, err := l.d.getLarge(len(front) + size)
	if err != nil {
		buf.Release()
		return nil, err
	}
	p := l.newPending()
	p.f, p.r, p.frontLen, p.size = *f, r, len(front), size
	p.epi = [wire.EpilogueSize]byte(b[len(b)-wire.EpilogueSize:])
	copy(r.mem, front)
	buf.Release() // the receive goes back before the read
	slot := l.freeReads[len(l.freeReads)-1]
	l.epMu.RLock()
	defer l.epMu.RUnlock()
	if l.dead.Load() {
		l.d.putLarge(r)
		l.putPending(p)
		return nil, net.ErrClosed
	}
	// A read the provider refuses comes back as a failed read (post.go).
	l.d.post(postOp{l: l, kind: opRead, slot: slot, buf: r.ptr(len(front)), n: size, desc: r.desc, raddr: raddr, rkey: rkey})
	l.freeReads = l.freeReads[:len(l.freeReads)-1]
	l.readSlots[slot] = p
	l.readsOut++
	l.d.transfers.Add(1)
	return p, nil
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
		l.d.inUse.Add(-1)
		l.d.retire(p.r)
		return p.err
	}
	l.rdvReadCnt.Add(1)
	front := p.r.mem[:p.frontLen]
	data := p.r.mem[p.frontLen : p.frontLen+p.size]
	if err := wire.CheckEpilogue(p.epi[:], front, data, p.f.Flags&wire.FlagNoDataCRC != 0); err != nil {
		l.d.putLarge(p.r)
		return err
	}
	*f = p.f
	f.Flags &^= wire.FlagRendezvous
	f.DataLen = uint32(p.size)
	f.Front, f.Data = front, data
	f.Buf = p.r.buffer(p.frontLen + p.size)
	return nil
}

// peerReadsDone frees our rendezvous source buffers the peer has read.
func (l *link) peerReadsDone(count uint32) {
	l.rdvMu.Lock()
	k := 0
	for l.rdvFreed != count && k < len(l.rdvOut) {
		l.rdvOut[k].release(l.d)
		k++
		l.rdvFreed++
	}
	if k > 0 {
		n := copy(l.rdvOut, l.rdvOut[k:])
		clear(l.rdvOut[n:])
		l.rdvOut = l.rdvOut[:n]
	}
	l.rdvMu.Unlock()
}

// rdvSource is what a rendezvous frame's payload is read from until the
// peer has read it: a registered copy (r), or the caller's own registered
// buffer (b), on which the link holds a reference.
type rdvSource struct {
	r *region
	b *wire.Buffer
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
	if f.Buf != nil {
		if r, ok := f.Buf.Owner.(*region); ok && r.d == l.d {
			if off, ok := r.holds(f.Data); ok {
				f.Buf.Ref()
				l.d.zeroCopy.Add(1)
				return rdvSource{b: f.Buf}, r.remoteAddr(off), r.key, nil
			}
		}
	}
	r, err := l.d.getLarge(len(f.Data))
	if err != nil {
		return rdvSource{}, 0, 0, err
	}
	copy(r.mem, f.Data)
	l.d.copied.Add(1)
	return rdvSource{r: r}, r.remoteAddr(0), r.key, nil
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
	var slot uint32
	select {
	case slot = <-l.sendFree: // the common case, without the two-way select
	default:
		select {
		case slot = <-l.sendFree:
		case <-l.closed:
			return net.ErrClosed
		}
	}
	l.epMu.RLock()
	defer l.epMu.RUnlock()
	if l.dead.Load() {
		return net.ErrClosed
	}
	sb := l.send.mem[int(slot)*l.bufSize : (int(slot)+1)*l.bufSize]
	p := f.Preamble
	p.LinkWord = l.rdvReadCnt.Load()
	p.FrontLen, p.DataLen = uint32(len(f.Front)), uint32(len(f.Data))
	noCRC := l.noCRC && l.features&wire.FeatureNoDataCRC != 0 && len(f.Data) > 0
	if noCRC {
		p.Flags |= wire.FlagNoDataCRC
	}
	var dcrc uint32
	if !noCRC {
		dcrc = wire.CRC(f.Data)
	}
	n := p.WireSize()
	if n > l.sendLimit {
		// Rendezvous: the descriptor goes inline, the payload stays in
		// registered memory until the peer has read it.
		if wire.PreambleSize+len(f.Front)+rdvDescSize+wire.EpilogueSize > l.sendLimit {
			l.sendFree <- slot
			return &wire.Error{Kind: wire.ErrKindTooLarge, Msg: fmt.Sprintf("rdma: front of %d bytes does not fit a %d-byte buffer", len(f.Front), l.sendLimit)}
		}
		src, addr, key, err := l.rendezvousSource(f)
		if err != nil {
			l.sendFree <- slot
			return err
		}
		p.Flags |= wire.FlagRendezvous
		p.DataLen = rdvDescSize
		n = p.WireSize()
		p.Put(sb)
		copy(sb[wire.PreambleSize:], f.Front)
		desc := sb[wire.PreambleSize+len(f.Front):]
		binary.LittleEndian.PutUint64(desc, addr)
		binary.LittleEndian.PutUint32(desc[8:], uint32(len(f.Data)))
		binary.LittleEndian.PutUint64(desc[12:], key)
		wire.PutEpilogue(sb[n-wire.EpilogueSize:], wire.CRC(f.Front), dcrc)
		l.rdvMu.Lock()
		l.rdvOut = append(l.rdvOut, src)
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
