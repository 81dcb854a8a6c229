//go:build rdma

package rdma

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"testing"
)

// sockaddr is ip:port as Linux lays out a sockaddr_in (an IPv4 ip) or a
// sockaddr_in6.
func sockaddr(ip string, port uint16) []byte {
	a := netip.MustParseAddr(ip)
	family, size, at := syscall.AF_INET, 16, 4
	if !a.Is4() {
		family, size, at = syscall.AF_INET6, 28, 8
	}
	b := make([]byte, size)
	binary.NativeEndian.PutUint16(b, uint16(family))
	binary.BigEndian.PutUint16(b[2:], port)
	copy(b[at:], a.AsSlice())
	return b
}

func TestSockaddrString(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		want string
	}{
		{sockaddr("10.0.0.7", 6800), "10.0.0.7:6800"},
		{sockaddr("fe80::1", 443), "[fe80::1]:443"},
		{sockaddr("::ffff:10.1.2.3", 1), "10.1.2.3:1"},
		{sockaddr("10.0.0.7", 6800)[:7], ""},
		{sockaddr("::1", 1)[:23], ""},
		{[]byte{0xff, 0xff, 0, 0, 0, 0, 0, 0}, ""}, // another family (an IB address)
		{nil, ""},
	} {
		if got := sockaddrString(tc.b); got != tc.want {
			t.Errorf("%x: %q, want %q", tc.b, got, tc.want)
		}
	}
}

// FuzzSockaddrString: whatever a provider hands back, formatting it never
// panics, and what it formats is a host:port.
func FuzzSockaddrString(f *testing.F) {
	f.Add(sockaddr("127.0.0.1", 1))
	f.Add(sockaddr("::1", 2))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if s := sockaddrString(b); s != "" {
			if _, err := netip.ParseAddrPort(s); err != nil {
				t.Fatalf("%x formats as %q: %v", b, s, err)
			}
		}
	})
}
