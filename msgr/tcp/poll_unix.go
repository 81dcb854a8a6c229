//go:build unix

package tcp

import (
	"io"
	"net"
	"os"
	"syscall"
)

// pollConn reads a TCP connection through its raw descriptor, under the
// runtime's poller, so that the link asks for a buffer only when bytes are
// there and lets it go before it waits (wire.PollReader): an idle
// connection holds no read buffer. Waiting for readability without a
// buffer is what golang/go#15735 asks for; syscall.RawConn.Read is how it
// is done today. One reader at a time, as wire.Link requires.
type pollConn struct {
	rc   syscall.RawConn
	fn   func(fd uintptr) bool // p.read, bound once so a read allocates nothing
	buf  func() []byte
	idle func()
	n    int
	err  error
}

func newPollConn(c *net.TCPConn) *pollConn {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	p := &pollConn{rc: rc}
	p.fn = p.read
	return p
}

// ReadPoll implements wire.PollReader.
func (p *pollConn) ReadPoll(buf func() []byte, idle func()) (int, error) {
	p.buf, p.idle, p.n, p.err = buf, idle, 0, nil
	// RawConn.Read calls p.read, and while it returns false waits until the
	// descriptor is readable (or closed, or past its deadline) and calls it
	// again. The poller is armed before the first call, so bytes that come
	// after an EAGAIN always wake it.
	err := p.rc.Read(p.fn)
	p.buf, p.idle = nil, nil
	if err != nil {
		return 0, err
	}
	return p.n, p.err
}

func (p *pollConn) read(fd uintptr) bool {
	for {
		n, err := syscall.Read(int(fd), p.buf())
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			p.idle()
			return false
		case err != nil:
			p.err = os.NewSyscallError("read", err)
		case n == 0:
			p.err = io.EOF
		default:
			p.n = n
		}
		return true
	}
}
