//go:build rdma

package rawfabric

/*
#cgo LDFLAGS: -lfabric
#include "rawfabric.h"
*/
import "C"

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Built reports whether this binary has the raw libfabric baseline.
const Built = true

// node is where a Pair listens and connects.
const node = "127.0.0.1"

// Error is a libfabric failure.
type Error struct {
	Op   string
	Code int // positive fi_errno
}

func (e *Error) Error() string {
	return fmt.Sprintf("rawfabric: %s: %s (%d)", e.Op, C.GoString(C.fi_strerror(C.int(e.Code))), e.Code)
}

func fiErr(op *C.char, fallback string, rc C.ssize_t) error {
	if rc >= 0 {
		return nil
	}
	name := fallback
	if op != nil {
		name = C.GoString(op)
	}
	return &Error{Op: name, Code: int(-rc)}
}

// Probe asks libfabric what provider offers for MSG endpoints on
// 127.0.0.1.
func Probe(provider string) (Limits, error) {
	cprov, cnode := C.CString(provider), C.CString(node)
	defer C.free(unsafe.Pointer(cprov))
	defer C.free(unsafe.Pointer(cnode))
	var (
		maxMsg, tx, rx, mrMode C.uint64_t
		name                   [64]C.char
	)
	rc := C.rf_limits(cprov, cnode, &maxMsg, &tx, &rx, &mrMode, &name[0], C.size_t(len(name)))
	if err := fiErr(nil, "fi_getinfo", C.ssize_t(rc)); err != nil {
		return Limits{}, fmt.Errorf("%w: provider %q, MSG endpoints at %s (see `fi_info -p %s -t FI_EP_MSG`)", err, provider, node, provider)
	}
	return Limits{
		Provider: C.GoString(&name[0]), MaxMsgSize: uint64(maxMsg),
		TxSize: int(tx), RxSize: int(rx), MRMode: uint64(mrMode),
	}, nil
}

// Pair is a connected client and server; see the package documentation.
// Run may be called more than once, but not concurrently.
type Pair struct {
	p   *C.struct_rf_pair
	cfg Config
	lim Limits
}

// Open connects a pair for cfg.
func Open(ctx context.Context, cfg Config) (*Pair, error) {
	cfg.setDefaults()
	lim, err := Probe(cfg.Provider)
	if err != nil {
		return nil, err
	}
	if err := lim.Check(cfg); err != nil {
		return nil, err
	}
	msgLen := uint64(cfg.Size) + HeaderSize
	d := uint32(cfg.Depth)
	srvSend, srvRecv, cliSend, cliRecv := uint32(0), d, d, uint32(0)
	if cfg.Pattern == PingPong {
		srvSend, cliRecv = d, d
	}
	timeout := cfg.ConnectTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cprov, cnode := C.CString(cfg.Provider), C.CString(node)
	defer C.free(unsafe.Pointer(cprov))
	defer C.free(unsafe.Pointer(cnode))
	var (
		p     *C.struct_rf_pair
		errop *C.char
	)
	rc := C.rf_pair_open(&p, cprov, cnode, C.size_t(msgLen), C.uint32_t(srvSend), C.uint32_t(srvRecv),
		C.uint32_t(cliSend), C.uint32_t(cliRecv), C.size_t(cfg.Batch), C.int(max(timeout.Milliseconds(), 1)), &errop)
	if err := fiErr(errop, "connect", C.ssize_t(rc)); err != nil {
		var fe *Error
		if errors.As(err, &fe) && fe.Op == "fi_mr_reg" {
			return nil, fmt.Errorf("%w (check `ulimit -l`: registered memory must be lockable)", err)
		}
		return nil, fmt.Errorf("%w (provider %s)", err, lim.Provider)
	}
	return &Pair{p: p, cfg: cfg, lim: lim}, nil
}

// Limits are the provider's, as probed when the pair was opened.
func (p *Pair) Limits() Limits { return p.lim }

// Kick makes the loop calls running now return at once, so that a change
// of Hooks.Stopping or Hooks.Measuring takes effect. Any goroutine may
// call it while the pair is open.
func (p *Pair) Kick() { C.rf_kick(p.p) }

// Close disconnects the pair and frees its memory.
func (p *Pair) Close() error {
	if p.p != nil {
		C.rf_pair_free(p.p)
		p.p = nil
	}
	return nil
}

// Run runs the pair's pattern until h.Stopping, then waits for what is in
// flight. Cancelling ctx ends it, within a Config.Slice, with ctx's error.
func (p *Pair) Run(ctx context.Context, h Hooks) error {
	if p.p == nil {
		return errors.New("rawfabric: pair closed")
	}
	h.setDefaults()
	if h.Stopping == nil {
		return errors.New("rawfabric: Hooks.Stopping is required")
	}
	p.p.sh = C.struct_rf_shared{}
	var err error
	if p.cfg.Pattern == PingPong {
		err = p.pingpong(ctx, h)
	} else {
		err = p.stream(ctx, h)
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

func (p *Pair) sideErr(s *C.struct_rf_side, rc C.ssize_t) error {
	return fiErr(s.errop, "loop", rc)
}

func (p *Pair) aborted() bool { return C.rf_aborted(p.p) != 0 }

func (p *Pair) latencies(buf *C.int64_t) []int64 {
	return unsafe.Slice((*int64)(unsafe.Pointer(buf)), int(p.p.lat_cap))
}

// stream runs the receiver on a goroutine of its own and the sender on
// the caller's, each locked to its thread.
func (p *Pair) stream(ctx context.Context, h Hooks) error {
	slice := C.int64_t(p.cfg.Slice)
	depth := C.uint64_t(p.cfg.Depth)
	var rerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		lat := p.latencies(p.p.lat_srv)
		for {
			measuring := h.Measuring()
			n := C.rf_stream_recv(p.p, slice)
			if n < 0 {
				rerr = p.sideErr(&p.p.srv, n)
				C.rf_abort(p.p)
				return
			}
			if n > 0 && measuring {
				h.Record(lat[:n])
			}
			if p.aborted() || C.rf_sender_done(p.p) != 0 && C.rf_received(p.p) == C.rf_sent(p.p) {
				return
			}
		}
	}()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var serr error
	for !h.Stopping() && !p.aborted() {
		if err := ctx.Err(); err != nil {
			serr = err
			break
		}
		if rc := C.rf_stream_send(p.p, depth, 0, slice); rc < 0 {
			serr = p.sideErr(&p.p.cli, rc)
			break
		}
	}
	deadline := time.Now().Add(h.DrainTimeout)
	for serr == nil && !p.aborted() {
		// Sends complete only as the sender polls (manual progress).
		rc := C.rf_stream_send(p.p, depth, 1, slice)
		if rc < 0 {
			serr = p.sideErr(&p.p.cli, rc)
		} else if rc == 0 {
			break
		} else if time.Now().After(deadline) {
			serr = fmt.Errorf("rawfabric: %d messages not sent or not received %v after the end", rc, h.DrainTimeout)
		} else if err := ctx.Err(); err != nil {
			serr = err
		}
	}
	if serr != nil {
		C.rf_abort(p.p)
		<-done
		return serr
	}
	C.rf_set_sender_done(p.p)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-ctx.Done():
		C.rf_abort(p.p)
		<-done
		return ctx.Err()
	case <-t.C:
		C.rf_abort(p.p)
		<-done
		return fmt.Errorf("rawfabric: %d messages not received %v after the end",
			C.rf_sent(p.p)-C.rf_received(p.p), h.DrainTimeout)
	}
	return rerr
}

// pingpong runs the server on a goroutine of its own and the client on
// the caller's, each locked to its thread.
func (p *Pair) pingpong(ctx context.Context, h Hooks) error {
	slice := C.int64_t(p.cfg.Slice)
	depth := C.uint64_t(p.cfg.Depth)
	var (
		serr    error
		stopSrv atomic.Bool
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for !stopSrv.Load() && !p.aborted() {
			if rc := C.rf_pp_server(p.p, slice); rc < 0 {
				serr = p.sideErr(&p.p.srv, C.ssize_t(rc))
				C.rf_abort(p.p)
				return
			}
		}
	}()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lat := p.latencies(p.p.lat_cli)
	var (
		cerr     error
		stop     C.int
		deadline time.Time
	)
	for !p.aborted() {
		if err := ctx.Err(); err != nil {
			cerr = err
			break
		}
		if stop == 0 && h.Stopping() {
			stop, deadline = 1, time.Now().Add(h.DrainTimeout)
		}
		measuring := h.Measuring()
		n := C.rf_pp_client(p.p, depth, stop, slice)
		if n < 0 {
			cerr = p.sideErr(&p.p.cli, n)
			break
		}
		if n > 0 && measuring {
			h.Record(lat[:n])
		}
		if stop != 0 {
			if out := C.rf_requests(&p.p.cli); out == 0 {
				break
			} else if time.Now().After(deadline) {
				cerr = fmt.Errorf("rawfabric: %d requests without a reply %v after the end", out, h.DrainTimeout)
				break
			}
		}
	}
	if cerr != nil {
		C.rf_abort(p.p)
	}
	stopSrv.Store(true)
	<-done
	if cerr == nil || serr == nil {
		return cmp.Or(cerr, serr)
	}
	return errors.Join(cerr, serr)
}
