//go:build !unix

package tcp

import "net"

type pollConn struct{}

// newPollConn: no raw reads here; links hold their read buffer.
func newPollConn(*net.TCPConn) *pollConn { return nil }

func (*pollConn) ReadPoll(func() []byte, func()) (int, error) {
	panic("tcp: no poll reads on this platform")
}
