// Package freeport picks TCP ports to listen on that nobody listens on now
// (another process may still take one before it is bound), drawn from below
// the kernel's ephemeral range (ip_local_port_range) where it can read it:
// a daemon restarted on its old address fails with "address already in
// use" if, while it was down, the port became the local end of some
// outgoing connection, which any port of the ephemeral range can, and so
// does a test that picks a port and starts a process that binds it while
// tests beside it connect out. Ceph binds its daemons to 6800-7300 for the
// same reason.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// floor keeps the ports drawn above those well-known services use.
const floor = 10000

// Port returns a free TCP port on host.
func Port(host string) (int, error) { return Range(host, 1) }

// Range returns the first of n consecutive free TCP ports on host.
func Range(host string, n int) (int, error) {
	free := func(base int) bool {
		for p := base; p < base+n; p++ {
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
			if err != nil {
				return false
			}
			l.Close()
		}
		return true
	}
	if lo := ephemeralLow(); lo-n > floor {
		for range 64 {
			if p := floor + rand.IntN(lo-n-floor); free(p) {
				return p, nil
			}
		}
	}
	for range 64 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p+n <= 65536 && free(p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("freeport: no %d consecutive free ports on %s", n, host)
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// where that is unknown (not Linux).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}
