//go:build linux

package tcp

import (
	"net"
	"syscall"
	"unsafe"
)

// writeSpace returns a function that estimates how many bytes a write to c
// can take without blocking: the socket send buffer less what is queued in
// it (SIOCOUTQ). The messenger writes from a sender's goroutine only when
// this says the batch fits, so Send never waits on the network.
func writeSpace(c *net.TCPConn) func() int {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil || fd < 0 {
		return nil
	}
	// NB: the fd is used without Control afterwards; the messenger only
	// asks while the link is open, and a wrong answer after a close only
	// costs a failed write on a dead link. The send buffer size is read
	// once: Linux only grows it by autotuning, so the first value is a
	// safe lower bound, and the hot path pays one ioctl, not two syscalls.
	sndbuf, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	if err != nil {
		return nil
	}
	return func() int {
		var outq int32
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&outq))); e != 0 {
			return 0
		}
		return sndbuf - int(outq)
	}
}
