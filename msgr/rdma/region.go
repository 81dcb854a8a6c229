//go:build rdma

package rdma

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
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
	mr  *C.struct_fid_mr
	// desc is the provider's memory descriptor: an opaque handle that need
	// not be a pointer (sockets returns small integers), so it is kept as an
	// integer: a Go pointer-typed slot holding 0x1 crashes the stack copier.
	desc C.uintptr_t
	key  uint64
}

func (d *domain) register(size int) (*region, error) {
	size = (size + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	if int64(size) > d.t.cfg.MemBudget {
		// Never satisfiable: a wire error of kind too-large, so the
		// session ends with ErrMessageTooLarge instead of redialing.
		return nil, &wire.Error{Kind: wire.ErrKindTooLarge, Msg: fmt.Sprintf(
			"rdma: %d bytes of registered memory asked, the budget is %d", size, d.t.cfg.MemBudget)}
	}
	if cur := d.registered.Load(); cur+int64(size) > d.t.cfg.MemBudget {
		d.trimLarge(int64(size))
		if cur := d.registered.Load(); cur+int64(size) > d.t.cfg.MemBudget {
			return nil, fmt.Errorf("rdma: registered memory budget of %d bytes exhausted (%d in use, %d more asked)",
				d.t.cfg.MemBudget, cur, size)
		}
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
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
		return nil, fmt.Errorf("%w (check `ulimit -l`: registered memory must be lockable)", err)
	}
	r.key = uint64(ckey)
	hw := d.registered.Add(int64(size))
	for {
		old := d.highWater.Load()
		if hw <= old || d.highWater.CompareAndSwap(old, hw) {
			break
		}
	}
	return r, nil
}

func (r *region) free() {
	if r.mr != nil {
		C.osp_close(unsafe.Pointer(r.mr))
		r.mr = nil
		r.d.registered.Add(-int64(len(r.mem)))
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
		r.wb = wire.NewExternalBuffer(r.mem, func(*wire.Buffer) { r.d.putLarge(r) })
		r.wb.Owner = r
	}
	r.wb.Reset(n)
	return r.wb
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
		d.retire(r)
		return
	}
	r.free()
}

// retire frees a region after retireDelay: a buffer of a transfer that
// failed while its endpoint was still open may yet be written to until
// the endpoint closes, and some providers' progress threads (sockets) are
// said to touch an endpoint's buffers shortly after fi_close returns.
func (d *domain) retire(r *region) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		r.free()
		return
	}
	d.retired = append(d.retired, retiredRegion{r: r, at: time.Now()})
	d.mu.Unlock()
}

// reapRetired frees retired regions whose delay has passed; all of them
// when all is set (domain close).
func (d *domain) reapRetired(all bool) {
	d.mu.Lock()
	var drop []*region
	keep := d.retired[:0]
	for _, rr := range d.retired {
		if all || time.Since(rr.at) > retireDelay {
			drop = append(drop, rr.r)
		} else {
			keep = append(keep, rr)
		}
	}
	d.retired = keep
	d.mu.Unlock()
	for _, r := range drop {
		r.free()
	}
}

type retiredRegion struct {
	r  *region
	at time.Time
}

const retireDelay = 2 * time.Second

// Large (rendezvous) buffers are cached per power-of-two class.
func largeClass(n int) int {
	c := 0
	for 1<<c < n {
		c++
	}
	return c
}

func (d *domain) getLarge(n int) (*region, error) {
	c := largeClass(n)
	d.mu.Lock()
	if rs := d.large[c]; len(rs) > 0 {
		r := rs[len(rs)-1]
		d.large[c] = rs[:len(rs)-1]
		d.mu.Unlock()
		d.inUse.Add(1)
		return r, nil
	}
	d.mu.Unlock()
	r, err := d.register(1 << c)
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
	c := largeClass(len(r.mem))
	d.large[c] = append(d.large[c], r)
	d.mu.Unlock()
}

// trimLarge frees cached rendezvous buffers to make room for need bytes.
func (d *domain) trimLarge(need int64) {
	d.mu.Lock()
	var drop []*region
	var freed int64
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
