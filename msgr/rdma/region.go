//go:build rdma

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/wire"
)

// region is registered memory outside the Go heap: mmap'd, registered
// once, released with munmap after deregistration. Being mmap'd, mem
// starts on a page, a multiple of wire.DataAlign: a rendezvous payload
// received at offset 0 is aligned for O_DIRECT (link.startTransfer).
type region struct {
	d   *domain
	wb  *wire.Buffer // handed up with received rendezvous payloads; reused
	mem []byte
	// lent: the region was handed out by allocLent, not by getLarge; its
	// buffer's last Release gives it back to the lent pool.
	lent     bool
	unmapped bool
	// pooled: r is in the domain's large pool (invariants build only;
	// under d.mu), so a second putLarge or a write while there is caught.
	pooled bool
	mr     *C.struct_fid_mr
	// desc is the provider's memory descriptor: an opaque handle that need
	// not be a pointer (sockets returns small integers), so it is kept as an
	// integer: a Go pointer-typed slot holding 0x1 crashes the stack copier.
	desc C.uintptr_t
	key  uint64
}

func (d *domain) register(size int) (*region, error) {
	size = pageRound(size)
	if int64(size) > d.t.cfg.MemBudget {
		// Never satisfiable: a wire error of kind too-large, so the
		// session ends with ErrMessageTooLarge instead of redialing.
		return nil, &wire.Error{Kind: wire.ErrKindTooLarge, Msg: fmt.Sprintf(
			"rdma: %d bytes of registered memory asked, the budget is %d", size, d.t.cfg.MemBudget)}
	}
	// The bytes are counted in registered before they are registered,
	// so that registrations racing each other (readers woken together
	// when memory came back) cannot all fit the budget at once.
	hw, trimmed := int64(0), false
	for {
		cur := d.registered.Load()
		if cur+int64(size) > d.t.cfg.MemBudget {
			if !trimmed {
				d.trimLarge(int64(size))
				trimmed = true
				continue
			}
			// For now: a caller that can wait for memory to come back
			// does (memwait.go), rather than fail its link.
			return nil, fmt.Errorf("%w: registered memory budget of %d bytes exhausted (%d in use, %d more asked)",
				errMemBudget, d.t.cfg.MemBudget, cur, size)
		}
		if d.registered.CompareAndSwap(cur, cur+int64(size)) {
			hw = cur + int64(size)
			break
		}
	}
	unreserve := func() {
		d.registered.Add(-int64(size))
		d.memReturned()
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		unreserve()
		return nil, fmt.Errorf("rdma: mmap %d bytes: %w", size, err)
	}
	r := &region{d: d, mem: mem}
	d.mu.Lock()
	d.nextKey++
	key := d.nextKey
	d.mu.Unlock()
	var ckey C.uint64_t
	if err := fiErrI("fi_mr_reg", C.osp_mr_reg(d.dom, unsafe.Pointer(&mem[0]), C.size_t(size), C.uint64_t(key), cBool(d.rdvWrite), &r.mr, &r.desc, &ckey)); err != nil {
		syscall.Munmap(mem)
		unreserve()
		return nil, fmt.Errorf("%w (check `ulimit -l`: registered memory must be lockable)", err)
	}
	r.key = uint64(ckey)
	for {
		old := d.highWater.Load()
		if hw <= old || d.highWater.CompareAndSwap(old, hw) {
			break
		}
	}
	return r, nil
}

func pageRound(n int) int { return (n + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1) }

func (r *region) free() {
	if r.mr != nil {
		r.deregister()
		r.unmap()
	}
}

// deregister ends r's registration and leaves its memory mapped, for a
// holder that still reads it (closeLent).
func (r *region) deregister() {
	if r.mr != nil {
		C.osp_close(unsafe.Pointer(r.mr))
		r.mr = nil
		r.d.registered.Add(-int64(len(r.mem)))
		r.d.memReturned()
	}
}

// unmap gives r's memory back to the kernel, once it is deregistered.
func (r *region) unmap() {
	if !r.unmapped {
		r.unmapped = true
		syscall.Munmap(r.mem)
	}
}

// remoteAddr is what a peer puts in fi_read for b: the virtual address
// under FI_MR_VIRT_ADDR, else the offset into the region.
func (r *region) remoteAddr(off int) uint64 {
	if r.d.mrMode&C.FI_MR_VIRT_ADDR != 0 {
		return uint64(uintptr(unsafe.Pointer(&r.mem[0]))) + uint64(off)
	}
	return uint64(off)
}

// holds reports where p's bytes start in r, if they lie in it.
func (r *region) holds(p []byte) (off int, ok bool) {
	if len(p) == 0 || len(r.mem) == 0 {
		return 0, false
	}
	o := int(uintptr(unsafe.Pointer(&p[0])) - uintptr(unsafe.Pointer(&r.mem[0])))
	return o, o >= 0 && o+len(p) <= len(r.mem)
}

func (r *region) ptr(off int) unsafe.Pointer { return unsafe.Pointer(&r.mem[off]) }

// buffer wraps the first n bytes of a rendezvous region for the frame that
// carries them; the last Release puts the region back in the cache. The
// wrapper is made once per region, so a cached region costs no allocation.
func (r *region) buffer(n int) *wire.Buffer {
	if r.wb == nil {
		r.wb = wire.NewExternalBuffer(r.mem, r.release)
		r.wb.Owner = r
	}
	// A holder may have resliced B (to the bytes it used): from the
	// region's start again.
	r.wb.B = r.mem
	r.wb.Reset(n)
	return r.wb
}

// release is the last Release of r's buffer: r goes back to the pool it
// came from.
func (r *region) release(*wire.Buffer) {
	if r.lent {
		r.d.putLent(r)
	} else {
		r.d.putLarge(r)
	}
}

// freeClosed frees a region of an endpoint whose fi_close has returned.
// After fi_close a provider no longer uses the endpoint's buffers, so the
// region goes at once and its bytes leave the budget: with the 2 s delay
// every closed link used to take, 1,000 links dialed and closed in 1.5 s
// ran the default 1 GiB budget out. The exception is sockets, whose
// progress thread the code has long been said to touch buffers shortly
// after fi_close (never reproduced here): it still retires them.
func (d *domain) freeClosed(r *region) {
	if d.t.prov == "sockets" {
		d.retire(r, nil)
		return
	}
	r.free()
}

// retire frees a region once nothing can write into it any more: the
// destination of a transfer that failed, or that was dropped with its
// link, may be written to until the endpoint of ep (nil: none, already
// closed) is closed, and some providers' progress threads (sockets) are
// said to touch an endpoint's buffers shortly after fi_close returns. So
// it goes retireDelay after it was retired and not before ep's fi_close
// returned, however long that takes: the reader drops its transfers when
// it sees the fault, and under load Close may close the endpoint
// seconds later. A region unmapped while a read into it is still in
// flight lets the provider write into whatever mmap puts at that address
// next, such as another link's rendezvous source, which its reader then
// refuses as corrupt.
func (d *domain) retire(r *region, ep *link) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		r.free()
		return
	}
	d.retired = append(d.retired, retiredRegion{r: r, ep: ep, at: time.Now()})
	d.mu.Unlock()
}

// reapRetired frees retired regions whose delay has passed and whose
// endpoint is closed; all of them when all is set (domain close, after
// every link's).
func (d *domain) reapRetired(all bool) {
	d.mu.Lock()
	var drop []*region
	keep := d.retired[:0]
	for _, rr := range d.retired {
		if all || rr.freeable() {
			drop = append(drop, rr.r)
		} else {
			keep = append(keep, rr)
		}
	}
	clear(d.retired[len(keep):])
	d.retired = keep
	d.mu.Unlock()
	for _, r := range drop {
		r.free()
	}
}

type retiredRegion struct {
	r  *region
	ep *link // whose endpoint may still write into r; nil if none
	at time.Time
}

func (rr retiredRegion) freeable() bool {
	return time.Since(rr.at) > retireDelay && (rr.ep == nil || rr.ep.epClosed.Load())
}

const retireDelay = 2 * time.Second

// largeSize is the size of the rendezvous buffer that holds n bytes, by
// which they are cached: n rounded up to a sixteenth of the power of two
// at or above it (to a page at least), at most an eighth more than n. So a
// payload of a power of two and its front (a 4 MiB put and its header)
// takes 4.5 MiB, not the next power of two, and buffers of sizes close
// together still share one size, and the cache.
func largeSize(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	g := max(p/16, os.Getpagesize())
	return (n + g - 1) / g * g
}

func (d *domain) getLarge(n int) (*region, error) {
	c := largeSize(n)
	d.mu.Lock()
	if rs := d.large[c]; len(rs) > 0 {
		r := rs[len(rs)-1]
		d.large[c] = rs[:len(rs)-1]
		broken := r.checkUnpool()
		d.mu.Unlock()
		if broken != "" {
			panic(broken)
		}
		d.inUse.Add(1)
		return r, nil
	}
	d.mu.Unlock()
	r, err := d.register(c)
	if err == nil {
		d.inUse.Add(1)
	}
	return r, err
}

func (d *domain) putLarge(r *region) {
	d.inUse.Add(-1)
	d.mu.Lock()
	if d.closed || d.large == nil {
		d.mu.Unlock()
		r.free()
		return
	}
	if broken := r.checkPool(); broken != "" {
		d.mu.Unlock()
		panic(broken)
	}
	c := len(r.mem) // a largeSize: a multiple of the page
	d.large[c] = append(d.large[c], r)
	d.mu.Unlock()
	d.memReturned() // a cached buffer can be taken, or trimmed
}

// trimLarge frees cached rendezvous buffers, and lent regions given back,
// to make room for need bytes.
func (d *domain) trimLarge(need int64) {
	d.mu.Lock()
	drop := d.lent.dropSpare(need)
	var freed int64
	for _, r := range drop {
		freed += int64(len(r.mem))
	}
	for c, rs := range d.large {
		for len(rs) > 0 && freed < need {
			drop = append(drop, rs[len(rs)-1])
			freed += int64(len(rs[len(rs)-1].mem))
			rs = rs[:len(rs)-1]
		}
		d.large[c] = rs
	}
	d.mu.Unlock()
	for _, r := range drop {
		r.free()
	}
}

// Lent regions are registered memory handed out for as long as the
// holder likes, not for one frame (Messenger.AllocRegistered): an OSD
// keeps its read cache of whole objects in them, so that a cached get is
// read by the peer where it lies, with no copy (rendezvousSource). Each is
// its size rounded to a page, not to a sixteenth of a power of two as
// the rendezvous buffers are (largeSize): a cache of 4 MiB + 4 KiB
// objects would otherwise register an eighth more than it holds.
//
// They may take at most lentShare of Config.MemBudget, so that links
// always find room for their own buffers; past that, and when
// registration fails (RLIMIT_MEMLOCK, a NIC's limits), allocLent fails
// and the caller uses ordinary memory, which a send then copies.
//
// A region given back is kept for the next of its size, up to
// lentSpareBytes: a fresh one costs an mmap, a registration and a page
// fault per page (on this project's VMs about 13 ms per 4 MiB), and a
// cache that churns asks for the sizes it just gave back.
//
// When the domain closes with regions still out, close deregisters them
// (their registration must end before the domain's) but leaves them
// mapped: their holders may still read them, and the last Release unmaps.
type lentRegions struct {
	out        map[*region]struct{} // handed out; nil once the domain closed
	spare      map[int][]*region    // given back, by size
	spareBytes int64
	bytes      int64 // registered, out and spare
}

const (
	lentShare      = 2 // lent regions take at most MemBudget/lentShare
	lentSpareBytes = 64 << 20
)

// ErrLentBudget is the error of an allocation of lent memory beyond its
// share of Config.MemBudget (see lentRegions).
var ErrLentBudget = errors.New("rdma: the registered memory that may be lent is spent")

// allocLent returns a buffer of n bytes in a lent region of d, page
// aligned (mmap'd: a multiple of wire.DataAlign, so O_DIRECT can read into
// it), with one reference.
func (d *domain) allocLent(n int) (*wire.Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("rdma: lent region of %d bytes", n)
	}
	size := pageRound(n)
	limit := d.t.cfg.MemBudget / lentShare
	d.mu.Lock()
	lr := &d.lent
	if d.closed {
		d.mu.Unlock()
		return nil, net.ErrClosed
	}
	if lr.out == nil {
		lr.out, lr.spare = map[*region]struct{}{}, map[int][]*region{}
	}
	if d.memw.short.Load() > 0 {
		// A transfer waits for the budget: what a cache would take
		// now is what it was asked to give back (reclaim).
		used := lr.bytes
		d.mu.Unlock()
		return nil, fmt.Errorf("rdma: %d bytes of lent memory asked (%d of %d lent): %w", size, used, limit, wire.ErrRegisteredPressure)
	}
	var drop []*region
	r := lr.takeSpare(size)
	if r == nil {
		if lr.bytes+int64(size) > limit {
			drop = lr.dropSpare(lr.bytes + int64(size) - limit)
		}
		if lr.bytes+int64(size) > limit {
			used := lr.bytes
			d.mu.Unlock()
			freeAll(drop)
			return nil, fmt.Errorf("%w: %d bytes asked, %d of %d in use", ErrLentBudget, size, used, limit)
		}
		lr.bytes += int64(size) // reserved while it registers
	}
	d.mu.Unlock()
	freeAll(drop)
	if r == nil {
		var err error
		if r, err = d.register(size); err != nil {
			d.mu.Lock()
			lr.bytes -= int64(size)
			d.mu.Unlock()
			return nil, err
		}
		r.lent = true
	}
	d.mu.Lock()
	if d.closed {
		// The domain closed meanwhile (closeLent may have run).
		d.mu.Unlock()
		r.free()
		return nil, net.ErrClosed
	}
	lr.out[r] = struct{}{}
	d.mu.Unlock()
	return r.buffer(n), nil
}

// putLent takes back a lent region whose last holder let it go.
func (d *domain) putLent(r *region) {
	d.mu.Lock()
	lr := &d.lent
	if _, ok := lr.out[r]; !ok {
		// The domain closed while r was out, and closeLent deregistered
		// it.
		d.mu.Unlock()
		r.unmap()
		return
	}
	delete(lr.out, r)
	if lr.spareBytes+int64(len(r.mem)) <= lentSpareBytes {
		lr.spare[len(r.mem)] = append(lr.spare[len(r.mem)], r)
		lr.spareBytes += int64(len(r.mem))
		d.mu.Unlock()
		d.memReturned() // trimLarge may free it
		return
	}
	lr.bytes -= int64(len(r.mem))
	d.mu.Unlock()
	r.free()
}

// takeSpare takes the smallest spare region of at least size bytes and
// at most an eighth more, if there is one: objects of a cache are seldom
// all of one size, and a region a little too large is cheaper than a new
// one.
//
// REQUIRES: d.mu held.
func (lr *lentRegions) takeSpare(size int) *region {
	best := 0
	for s, rs := range lr.spare {
		if len(rs) > 0 && s >= size && s <= size+size/8 && (best == 0 || s < best) {
			best = s
		}
	}
	if best == 0 {
		return nil
	}
	rs := lr.spare[best]
	r := rs[len(rs)-1]
	lr.spare[best] = rs[:len(rs)-1]
	lr.spareBytes -= int64(best)
	return r
}

// dropSpare takes spare regions of at least need bytes off the pool (all
// there are, if fewer) for the caller to free outside d.mu.
//
// REQUIRES: d.mu held.
func (lr *lentRegions) dropSpare(need int64) []*region {
	var drop []*region
	var freed int64
	for size, rs := range lr.spare {
		for len(rs) > 0 && freed < need {
			drop = append(drop, rs[len(rs)-1])
			rs = rs[:len(rs)-1]
			freed += int64(size)
		}
		lr.spare[size] = rs
	}
	lr.spareBytes -= freed
	lr.bytes -= freed
	return drop
}

// closeLent ends the lent regions' registrations when the domain closes:
// spare ones go at once, those out stay mapped until their last Release
// (putLent). The links are closed: nothing moves from them any more.
func (d *domain) closeLent() {
	d.mu.Lock()
	lr := &d.lent
	out := lr.out
	drop := lr.dropSpare(lr.spareBytes)
	lr.out, lr.spare = nil, nil
	// Under d.mu, so that a putLent of the same region, which unmaps it,
	// waits for the deregistration.
	for r := range out {
		r.deregister()
	}
	lr.bytes = 0
	d.mu.Unlock()
	freeAll(drop)
}

func freeAll(rs []*region) {
	for _, r := range rs {
		r.free()
	}
}
