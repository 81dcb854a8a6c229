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
	"net/netip"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/wire"
)

// CM data: our banner, the number of receives we post (u32), the size of
// each (u32): a sender never sends an inline frame larger than the peer's
// receive buffers, whatever its own BufSize; our link tag (u64: link id and
// a random token), which the peer attaches to its sends when we receive
// from a shared pool; and flags (u32; bit 0: we do; bit 1: we offer the
// write rendezvous, with receives posted for its control frames; bit 2,
// from a dialer: our session is light both ways, post no more receives
// than we do, wire.LinkOptions.SmallWindow). Unknown flags are ignored.
const cmDataSize = wire.BannerSize + 20

const (
	cmFlagSRX   = 1
	cmFlagWrite = 2
	cmFlagSmall = 4
)

type cmInfo struct {
	features  uint64
	peerRecvs int // receives the peer posts for its window
	peerBuf   int
	peerTag   uint64
	peerSRX   bool
	peerWrite bool
	peerSmall bool // the dialer asks for a small window (cmFlagSmall)
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
	if l.small {
		flags |= cmFlagSmall
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
	cm.peerRecvs = int(binary.LittleEndian.Uint32(data[wire.BannerSize:]))
	cm.peerBuf = int(binary.LittleEndian.Uint32(data[wire.BannerSize+4:]))
	if minBuf := wire.PreambleSize + rdvDescSize + wire.EpilogueSize; cm.peerBuf < minBuf {
		return cm, &wire.Error{Kind: wire.ErrKindBanner, Msg: fmt.Sprintf("peer receive buffers of %d bytes, below %d", cm.peerBuf, minBuf)}
	}
	cm.peerTag = binary.LittleEndian.Uint64(data[wire.BannerSize+8:])
	flags := binary.LittleEndian.Uint32(data[wire.BannerSize+16:])
	cm.peerSRX, cm.peerWrite, cm.peerSmall = flags&cmFlagSRX != 0, flags&cmFlagWrite != 0, flags&cmFlagSmall != 0
	cm.features, err = wire.Negotiate(mine, peer)
	return cm, err
}

// setPeer applies what the peer's connection data says.
func (l *link) setPeer(cm cmInfo) {
	l.features = cm.features
	l.sendLimit = min(l.bufSize, cm.peerBuf)
	l.peerTag, l.peerSRX = cm.peerTag, cm.peerSRX
	l.rdvWrite = l.ctlRecv > 0 && cm.peerWrite && cm.features&wire.FeatureRendezvous != 0
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
	ic, ok := l.opts.Inbound.Admit(l.name(), peerAddr(nil, info))
	if !ok {
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
			ic.BannerFailed()
			ic.Done()
			return
		}
		opts := l.opts
		if cm.peerSmall {
			// A side session: as many receives as the dialer posts, not
			// the listener's full window (the messenger's sessions on
			// the link grant no more: link.RecvWindow).
			opts.RecvWindow, opts.SmallWindow = min(opts.RecvWindow, cm.peerRecvs), true
		}
		lk, err := newLink(l.d, info, opts, ic)
		if err != nil {
			C.osp_reject(l.pep, C.osp_info_handle(info))
			ic.Done()
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
		// Before the link is shared; under epMu, as a receive error may
		// already be closing the endpoint (fail → Close).
		lk.epMu.RLock()
		ep := lk.ep
		if lk.dead.Load() {
			ep = nil
		}
		lk.remote = peerAddr(ep, info)
		lk.epMu.RUnlock()
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
	lk, err := newLink(d, info, opts, nil)
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
			err = fmt.Errorf("rdma: %s refused the connection (nothing listens there, its listener is at its connection limit, or its completion queues are full): %w", addr, err)
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
	l.endOfStream(errors.New("rdma: peer shut the connection down"))
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

// peerAddr is a connection's peer address as host:port, for Conn.Addr and
// logs: ep's peer, else the connection request's source (info). Empty if
// the provider tells neither, or not as an IP socket address.
func peerAddr(ep *C.struct_fid_ep, info *C.struct_fi_info) string {
	var ss C.struct_sockaddr_storage
	n := C.osp_peer(ep, info, &ss)
	return sockaddrString(unsafe.Slice((*byte)(unsafe.Pointer(&ss)), int(n)))
}

// sockaddrString formats a Linux sockaddr_in or sockaddr_in6 as host:port;
// "" for anything else, or too short.
func sockaddrString(b []byte) string {
	if len(b) < 2 {
		return ""
	}
	switch binary.NativeEndian.Uint16(b) {
	case syscall.AF_INET:
		if len(b) < 8 {
			return ""
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:])).String()
	case syscall.AF_INET6:
		if len(b) < 24 {
			return ""
		}
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), binary.BigEndian.Uint16(b[2:])).String()
	}
	return ""
}
