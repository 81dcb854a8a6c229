package s3gw

import "time"

// IdleConnections is how many connections the gateway keeps alive between
// requests, as its connection cap sees them (Options.MaxConnections; 0
// without a cap).
func IdleConnections(g *Gateway) int {
	if c := g.capped.Load(); c != nil {
		return c.idleConns()
	}
	return 0
}

// SlotWanted says whether the gateway's Accept waits, at its connection
// cap, for the next connection to go idle.
func SlotWanted(g *Gateway) bool {
	c := g.capped.Load()
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wanted
}

// TakeWant has an answer take the want of a connection waiting for a slot
// (connCap.giveWay) without freeing any, as an answer on a connection
// already closed under its client did.
func TakeWant(g *Gateway) bool { return g.capped.Load().giveWay() }

// SetCopyKeepAlive sets when a copy's 200 goes out and how often a space
// follows (answerLong) until the test ends.
func SetCopyKeepAlive(t interface{ Cleanup(func()) }, after, every time.Duration) {
	a, e := copyKeepAliveAfter, copyKeepAliveEvery
	copyKeepAliveAfter, copyKeepAliveEvery = after, every
	t.Cleanup(func() { copyKeepAliveAfter, copyKeepAliveEvery = a, e })
}
