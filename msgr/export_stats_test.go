package msgr

// HandshakeReasonOf classifies a handshake error, as the counters do.
var HandshakeReasonOf = handshakeReason

// LockForTest takes c's lock, as a link closing under it does, until
// the returned func.
func (c *Conn) LockForTest() (unlock func()) {
	c.mu.Lock()
	return c.mu.Unlock
}

// RegistryFreeForTest reports whether the registry's lock, which
// Connect, accepts and closes take, is free now.
func (m *Messenger) RegistryFreeForTest() bool {
	if !m.mu.TryLock() {
		return false
	}
	m.mu.Unlock()
	return true
}
