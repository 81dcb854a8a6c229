// Package rawfabric is the raw libfabric baseline of `osprey bench msgr`:
// the benchmark's stream and pingpong patterns over plain fi_send/fi_recv
// on one provider, with no messenger, so that the messenger's rdma+PROVIDER
// rows can be quoted as ratios to what libfabric itself does on the same
// machine in the same run.
//
// A Pair is two connected FI_EP_MSG endpoints on 127.0.0.1 in this
// process, each with its own fabric, domain and completion queue, as two
// processes running fi_pingpong would have. Each side is driven by one
// goroutine locked to its thread that runs a loop in C busy-polling
// fi_cq_read, as fi_pingpong and fi_msg_bw do; Go calls the loop for up to
// Config.Slice at a time (or until Kick) and collects the latencies it
// measured, so there is no cgo call per message. Long calls matter on a
// small machine: on two cores, returning to Go every 250µs made 64-byte
// pingpong about 25% slower than 20ms calls, and a call per message 17%
// (the Go scheduler competes with the two polling threads for CPU).
// Buffers are registered once;
// receives are posted ahead; messages that fit the provider's inject size
// are sent with fi_inject, as fi_pingpong does.
//
// Every message is Size payload bytes plus a 16-byte header (id and send
// time), as the raw TCP baseline frames its messages:
//
//   - Stream: the receiver keeps Depth receives posted and reposts each
//     as it completes; the sender keeps at most Depth messages sent but
//     not yet received (a counter the two sides share in memory, as the
//     raw TCP baseline shares its window) and reuses a send buffer only
//     after its send completion. Latency is one way.
//   - PingPong: the client keeps Depth requests outstanding; the server
//     answers each with a message of the same length that carries the
//     request's header back. Latency is the round trip.
//
// The package needs cgo and libfabric (build tag rdma, Debian's
// libfabric-dev); without the tag, Open and Probe return ErrNotBuilt.
package rawfabric

import (
	"errors"
	"fmt"
	"time"
)

// Transport names baseline rows in the benchmark's output.
const Transport = "raw-fabric"

// HeaderSize is the bytes every message carries beyond its payload.
const HeaderSize = 16

// MaxRegistered bounds the registered memory of one side of a Pair.
const MaxRegistered = 1 << 30

// ErrNotBuilt is returned by a binary built without the rdma tag.
var ErrNotBuilt = errors.New("rawfabric: built without RDMA support; rebuild with `go build -tags rdma` (needs cgo and Debian's libfabric-dev)")

// Pattern is a traffic pattern of the benchmark.
type Pattern int

const (
	// Stream sends one way, Depth messages in flight.
	Stream Pattern = iota
	// PingPong sends requests the other side answers, Depth outstanding.
	PingPong
)

func (p Pattern) String() string {
	if p == PingPong {
		return "pingpong"
	}
	return "stream"
}

// Config describes a Pair.
type Config struct {
	Pattern Pattern
	// Provider is the libfabric provider, e.g. "tcp" or "verbs", as the
	// messenger's rdma+PROVIDER transport runs on it: FI_PROVIDER does not
	// replace it (libfabric fails a provider the variable leaves out).
	Provider string
	// Size is payload bytes per message, Depth the messages in flight.
	Size, Depth int
	// Batch is the most latencies one cgo call returns. Default 16384;
	// 1 makes a call per message, to see what the calls cost.
	Batch int
	// Slice is how long one cgo call runs the loop at most. Default
	// 20ms. Without Kick it bounds how late a change of Stopping or
	// Measuring is noticed.
	Slice time.Duration
	// ConnectTimeout bounds connecting the pair. Default 10s.
	ConnectTimeout time.Duration
}

// Limits are what a provider offers for MSG endpoints.
type Limits struct {
	Provider   string // as libfabric names it
	MaxMsgSize uint64
	TxSize     int // send queue depth
	RxSize     int // receive queue depth
	MRMode     uint64
}

// Check reports why a Pair for cfg could not run on this provider: a
// message above its max_msg_size, a depth beyond its queues, or buffers
// beyond MaxRegistered.
func (lim Limits) Check(cfg Config) error {
	if cfg.Size < 0 || cfg.Depth < 1 {
		return fmt.Errorf("rawfabric: size %d and depth %d: want size >= 0 and depth >= 1", cfg.Size, cfg.Depth)
	}
	msgLen := uint64(cfg.Size) + HeaderSize
	if lim.MaxMsgSize > 0 && msgLen > lim.MaxMsgSize {
		return fmt.Errorf("rawfabric: a message of %d bytes (%d payload, %d header) exceeds provider %s's max_msg_size of %d",
			msgLen, cfg.Size, HeaderSize, lim.Provider, lim.MaxMsgSize)
	}
	if (lim.TxSize > 0 && cfg.Depth > lim.TxSize) || (lim.RxSize > 0 && cfg.Depth > lim.RxSize) {
		return fmt.Errorf("rawfabric: depth %d exceeds provider %s's queues (send %d, receive %d)",
			cfg.Depth, lim.Provider, lim.TxSize, lim.RxSize)
	}
	// A side has at most Depth send and Depth receive buffers.
	slot := (msgLen + 63) &^ 63
	if mem := slot * uint64(cfg.Depth) * 2; mem > MaxRegistered {
		return fmt.Errorf("rawfabric: size %d at depth %d needs %d MiB of registered buffers per side, more than the %d MiB allowed",
			cfg.Size, cfg.Depth, mem>>20, MaxRegistered>>20)
	}
	return nil
}

// Hooks connect a run to the caller's clock.
type Hooks struct {
	// Stopping reports that the run is over: no new message is sent and
	// those in flight are waited for. It is called from the sending
	// goroutine before each loop call.
	Stopping func() bool
	// Measuring, if set, reports whether messages completed now count. It
	// is called before each loop call on the recording goroutine, and
	// the latencies of the call are recorded only if it said true. Call
	// Kick when it changes, so that no call spans the change.
	Measuring func() bool
	// Record gets the latencies in nanoseconds of completed messages: one
	// way for a stream, round trips for pingpong. It is called from one
	// goroutine at a time and must not keep lat.
	Record func(lat []int64)
	// DrainTimeout bounds the wait for messages in flight once Stopping.
	// Default 10s.
	DrainTimeout time.Duration
}

func (c *Config) setDefaults() {
	if c.Batch <= 0 {
		c.Batch = 16384
	}
	if c.Slice <= 0 {
		c.Slice = 20 * time.Millisecond
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 10 * time.Second
	}
}

func (h *Hooks) setDefaults() {
	if h.DrainTimeout <= 0 {
		h.DrainTimeout = 10 * time.Second
	}
	if h.Record == nil {
		h.Record = func([]int64) {}
	}
	if h.Measuring == nil {
		h.Measuring = func() bool { return true }
	}
}
