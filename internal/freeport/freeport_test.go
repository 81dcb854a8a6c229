package freeport

import (
	"fmt"
	"net"
	"testing"
)

// TestOutsideEphemeralRange: Port's ports, and Range's runs of
// them, lie below the kernel's ephemeral range, so
// that no outgoing connection can hold one while its daemon restarts, and
// nobody listens on them.
func TestOutsideEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	if lo == 0 {
		t.Skip("no ip_local_port_range here")
	}
	for _, n := range []int{1, 6} {
		for range 20 {
			p, err := Range("127.0.0.1", n)
			if n == 1 {
				p, err = Port("127.0.0.1")
			}
			if err != nil {
				t.Fatal(err)
			}
			if p < floor || p+n > lo {
				t.Fatalf("%d ports from %d, want within [%d, %d)", n, p, floor, lo)
			}
			for q := p; q < p+n; q++ {
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", q))
				if err != nil {
					t.Fatalf("port %d of %d from %d is not free: %v", q, n, p, err)
				}
				l.Close()
			}
		}
	}
}
