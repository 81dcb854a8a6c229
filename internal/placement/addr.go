package placement

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// checkAddr validates an OSD address without resolving or dialing it, and
// returns why it is invalid, or "" when it is fine. The forms are those the
// messenger dials:
//
//	tcp://HOST:PORT
//	rdma+PROVIDER://HOST:PORT   (PROVIDER: a libfabric provider, e.g. verbs, efa, tcp)
//	mem://NAME                  (the in-memory test transport; no port)
//
// HOST is an IP address (IPv6 in brackets) or a host name; PORT is 1..65535,
// since a map names where an OSD is listening, never "any port". Schemes are
// lower case so that two spellings of one address compare equal.
func checkAddr(s string) string {
	if s == "" {
		return "missing; want SCHEME://HOST:PORT, e.g. tcp://10.0.0.1:6800"
	}
	if len(s) > 512 {
		return fmt.Sprintf("%d bytes long; at most 512", len(s))
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return fmt.Sprintf("%q: want SCHEME://HOST:PORT, e.g. tcp://10.0.0.1:6800", s)
	}
	if bad := badChar(rest); bad != "" {
		return fmt.Sprintf("%q: %s", s, bad)
	}
	switch {
	case scheme == "mem":
		if rest == "" {
			return fmt.Sprintf("%q: want mem://NAME", s)
		}
		return ""
	case scheme == "tcp":
	case strings.HasPrefix(scheme, "rdma+"):
		if !validProvider(scheme[len("rdma+"):]) {
			return fmt.Sprintf("%q: want rdma+PROVIDER with a lower-case libfabric provider name, e.g. rdma+verbs", s)
		}
	default:
		return fmt.Sprintf("%q: unknown scheme %q; want tcp, mem or rdma+PROVIDER", s, scheme)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return fmt.Sprintf("%q: want %s://HOST:PORT: %v", s, scheme, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Sprintf("%q: port %q: want 1..65535", s, port)
	}
	if host == "" {
		return fmt.Sprintf("%q: missing host", s)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	if strings.Contains(host, ":") || !validHostName(host) {
		return fmt.Sprintf("%q: host %q is neither an IP address nor a host name", s, host)
	}
	return ""
}

// badChar rejects what would make an address ambiguous in a URL (path,
// query, fragment, user info) or unprintable in a log line.
func badChar(s string) string {
	for _, r := range s {
		switch {
		case r <= ' ' || r == 0x7f:
			return fmt.Sprintf("has control or space character %q", r)
		case strings.ContainsRune("/?#@\\", r):
			return fmt.Sprintf("has %q; want no path, query or user", r)
		}
	}
	return ""
}

// validProvider matches RFC 3986 scheme characters in lower case, so that
// rdma+PROVIDER is a valid URL scheme.
func validProvider(p string) bool {
	if p == "" || len(p) > 64 {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '-' || c == '+')) {
			return false
		}
	}
	return true
}

func validHostName(h string) bool {
	if len(h) > 253 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}
