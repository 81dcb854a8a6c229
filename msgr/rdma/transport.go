//go:build rdma

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/wire"
)

// offersWrite reports whether links on info's provider offer the write
// rendezvous (RendezvousMode.writes).
func (t *Transport) offersWrite(info *C.struct_fi_info) bool {
	return t.cfg.Rendezvous.writes(C.GoString(C.osp_info_prov(info)), C.osp_info_saw(info) != 0)
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

// RegisteredBudget is Config.MemBudget (wire.RegisteredMemory).
func (t *Transport) RegisteredBudget() int64 { return t.cfg.MemBudget }

// MaxRecvWindow is the deepest receive window a link of this transport
// may have: Config.MaxRecvWindow, capped by the provider's receive queue
// size.
func (t *Transport) MaxRecvWindow() int {
	t.rxOnce.Do(func() {
		t.rxMax = t.cfg.MaxRecvWindow
		if info, err := t.getinfo("127.0.0.1", "0", true); err == nil {
			if rx := int(C.osp_info_rx_size(info)); rx > 0 {
				rx -= sessCtlRecvs // the session's control frames need their own
				if t.offersWrite(info) {
					rx -= ctlRecvs // and so do the write rendezvous's
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
	// CQPolls counts completion-queue reads (by the poller or a reader),
	// PollerSleeps the times the poller found nothing and slept.
	CQPolls      uint64
	PollerSleeps uint64
	// SpinBudget is how long the pollers spin for a completion before
	// they sleep (the largest of the domains'): Config.BusyPoll while
	// spinning pays, less down to zero while it does not. SpinGrows and
	// SpinShrinks count its doublings and halvings (docs/rdma.md,
	// "Completions").
	SpinBudget             time.Duration
	SpinGrows, SpinShrinks uint64
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
	// ReadPieces counts the RDMA reads posted for RendezvousReads: a
	// payload of 512 KiB or more is read in two to four pieces, each
	// checksummed as it lands.
	ReadPieces uint64
	// ControlRecvs are the receives posted for control frames beside the
	// sessions' credits: three a link for the session's KEEPALIVE,
	// KEEPALIVE_ACK and CLOSE (CONTROL_SLOTS), and 32 a link that offers
	// the write rendezvous for its RDV_READY and RDV_DONE frames. Part of
	// RecvsPosted (or of the shared pool's buffers).
	ControlRecvs int64
	// LentBytes is registered memory handed out for long-lived use
	// (Messenger.AllocRegistered: an OSD's read cache), out or kept for
	// reuse; LentRegions the regions out now. Part of RegisteredBytes.
	LentBytes, LentRegions int64
	// CQs is the completion queues open, and CQReserved the entries of
	// them promised to links: the most completions each link can have
	// outstanding, held from its creation until its endpoint is closed
	// and its CQ read empty (docs/rdma.md, "Completion queues").
	CQs, CQReserved int64
	// MemWaits counts the times a rendezvous transfer found the
	// registered-memory budget (Config.MemBudget) spent and waited for
	// memory to come back, rather than fail its link.
	MemWaits uint64
	// MemGiveUps counts the waits for registered memory that gave up
	// after 2 s and failed their link, so that the session reconnects
	// and replays (a cycle of holders, or a budget too small for the
	// load): each is a stall of the sessions on that link.
	MemGiveUps uint64
	// MemWaiting is the transfers waiting for registered memory now;
	// while any does, AllocRegistered hands out none.
	MemWaiting int64
}

// AllocRegistered returns a buffer of n bytes of memory registered with
// the listener's domain, which every link it accepts shares, for data
// kept past any one link: a large payload sent from it later, on any link
// of the domain, is read by the peer where it lies, with no copy. Unlike a
// link's AllocPayload it is its exact size (rounded to a page), and it is
// page-aligned, so O_DIRECT can read into it. It fails with ErrLentBudget
// past half of Config.MemBudget, or when registration fails; the caller
// then uses ordinary memory. The last Release gives it back; regions still
// out when the transport closes are deregistered then and unmapped at
// their last Release (region.go, lentRegions).
func (l *listener) AllocRegistered(n int) (*wire.Buffer, error) { return l.d.allocLent(n) }

// OnRegisteredPressure has fn called, with the bytes wanted, when a
// transfer of the listener's domain finds its registered memory spent, so
// that a holder of memory from AllocRegistered can give some back (an
// OSD's read cache evicts); fn returns the bytes it let go, and the next
// holder of the domain is asked for the rest. Until the returned func is
// called. fn runs on the transport's goroutines and must not wait for any
// transfer; what it releases comes back once nothing sends from it.
// While a transfer waits, AllocRegistered fails, so a cache does not take
// back what it gave.
func (l *listener) OnRegisteredPressure(fn func(need int64) (freed int64)) (stop func()) {
	return l.d.addReclaimer(fn)
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
		s.CQPolls += d.pollStats.polls.Load()
		s.PollerSleeps += d.pollStats.blocked.Load()
		s.SpinBudget = max(s.SpinBudget, d.spin.budget())
		s.SpinGrows += d.spin.grows.Load()
		s.SpinShrinks += d.spin.shrinks.Load()
		s.ZeroCopySends += d.zeroCopy.Load()
		s.CopiedSends += d.copied.Load()
		s.RendezvousReads += d.reads.Load()
		s.RendezvousWrites += d.writes.Load()
		s.WritePieces += d.writePieces.Load()
		s.ReadPieces += d.readPieces.Load()
		s.ControlRecvs += d.ctlRecvs.Load()
		s.CQs += int64(d.numCQs())
		s.CQReserved += d.cqReserved()
		s.MemWaits += d.memw.waits.Load()
		s.MemGiveUps += d.memw.giveUps.Load()
		s.MemWaiting += int64(d.memw.short.Load())
		d.mu.Lock()
		s.LentBytes += d.lent.bytes
		s.LentRegions += int64(len(d.lent.out))
		d.mu.Unlock()
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
