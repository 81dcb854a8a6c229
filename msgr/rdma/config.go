//go:build rdma

package rdma

import (
	"fmt"
	"time"
)

// Config tunes the RDMA transport. Zero fields take the defaults noted.
type Config struct {
	// BufSize is the size of each registered send and receive buffer: a
	// frame up to this size goes inline in one send; larger payloads go
	// by rendezvous (RDMA read). Default 16 KiB.
	BufSize int
	// SendSlots is the number of send buffers per link. Default 64.
	SendSlots int
	// CQEntries is the size of each of a domain's completion queues. Each
	// link reserves in one the most completions it can have outstanding,
	// since verbs does not detect an overrun (fi_verbs(7)); a link that
	// fits none opens another CQ, which the poller polls but does not
	// sleep on (cq.go). Default max(4096, 4 × SendSlots).
	CQEntries int
	// MemBudget bounds all registered memory of the transport. Default
	// 1 GiB.
	MemBudget int64
	// MaxRecvWindow caps the receive window of this transport's links
	// (one credit is one posted BufSize receive). Default 256, and never
	// above the provider's receive queue.
	MaxRecvWindow int
	// BusyPoll is how long a link's reader polling for the domain spins
	// after the last completion, and the most the completion poller does
	// before it sleeps: its budget adapts below it (spinBudget). Default
	// 50µs.
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
	// less than in pieces (docs/benchmarks.md, "Writes in pieces"); one
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
// pieces of four segments made 4 MiB object gets slower than one write
// (measured when this default was chosen; see its commit). Across an Ethernet path, with segments of 1448 or
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

// Config is what t runs with: its Config with the defaults filled in,
// for monitoring (a daemon exports MemBudget) and for tests that check a
// setting reached the transport.
func (t *Transport) Config() Config { return t.cfg }

func (c *Config) setDefaults() {
	if c.BufSize <= 0 {
		c.BufSize = 16 << 10
	}
	c.BufSize = max(c.BufSize, 1024)
	if c.SendSlots <= 0 {
		c.SendSlots = 64
	}
	if c.CQEntries <= 0 {
		c.CQEntries = max(4096, 4*c.SendSlots)
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
