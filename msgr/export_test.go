package msgr

import (
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
