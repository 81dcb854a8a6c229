package tcp

import (
	"context"
	"net"
	"syscall"
	"testing"
)

// TestSocketOptions: both ends of a link have TCP_NODELAY (a handshake
// flight or a small message must not wait for Nagle), which the transport
// leaves to Go's net package, and TCP keepalive (see dial).
func TestSocketOptions(t *testing.T) {
	ctx := context.Background()
	ln, err := listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed, err := dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	for name, c := range map[string]*net.TCPConn{"dialed": dialed, "accepted": accepted.(*net.TCPConn)} {
		if v := sockopt(t, c, syscall.IPPROTO_TCP, syscall.TCP_NODELAY); v == 0 {
			t.Errorf("%s socket: TCP_NODELAY is off", name)
		}
		if v := sockopt(t, c, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE); v == 0 {
			t.Errorf("%s socket: SO_KEEPALIVE is off", name)
		}
	}
}

func sockopt(t *testing.T, c *net.TCPConn, level, opt int) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := rc.Control(func(fd uintptr) { v, serr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return v
}
