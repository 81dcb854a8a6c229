package msgr

import (
	"unsafe"

	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// tcpOnly is the transports of tests that build messengers by hand on
// loopback: package msgr links no transport of its own.
var tcpOnly = []wire.Transport{tcp.Transport{}}

// TCPOnly is tcpOnly for the external tests (package msgr_test).
var TCPOnly = tcpOnly

// SetTamperHook has every sealed link made from now on pass each sealed
// segment to fn before writing it, so a test can alter what goes on the
// wire; the returned func removes it.
func SetTamperHook(fn func(sealed []byte)) func() {
	testHookTamper.Store(&fn)
	return func() { testHookTamper.Store(nil) }
}

// SenderWaitsForTest reports whether a Send waits for room in c's queue.
func (c *Conn) SenderWaitsForTest() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spaceWait != nil
}

// PinnedForTest is what c's current link, when it is a stream link,
// reports: the bytes of read chunks it moved past that held messages keep
// alive (Pinned), and the frames it copied out of its chunk (Copied).
func (c *Conn) PinnedForTest() (pinned, copied int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.link == nil {
		return 0, 0
	}
	l, _ := c.link.link.(interface {
		Pinned() int64
		Copied() int64
	})
	if l == nil {
		return 0, 0
	}
	return l.Pinned(), l.Copied()
}

// HeldMemoryForTest is the memory the received messages ms keep alive,
// counted by buffer: buffers a front was copied into (own), and the read
// chunks or other buffers they point into (shared).
func HeldMemoryForTest(ms []*Message) (own, shared int) {
	seen := map[*wire.Buffer]bool{}
	for _, m := range ms {
		b := m.buf
		if b == nil || seen[b] {
			continue
		}
		seen[b] = true
		if unsafe.SliceData(m.Front) == unsafe.SliceData(b.B) {
			own += cap(b.B)
		} else {
			shared += cap(b.B)
		}
	}
	return own, shared
}
