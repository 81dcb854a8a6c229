package msgr

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/ospreystore/osprey/msgr/auth"
)

// EntityName names a messenger endpoint as Ceph does: "TYPE.ID", e.g.
// "osd.3", "client.admin". The type selects the policy peers apply.
type EntityName string

// Type is the part before the first dot.
func (n EntityName) Type() string {
	t, _, _ := strings.Cut(string(n), ".")
	return t
}

// Validate checks the TYPE.ID form (auth.ValidateEntity): a lower-case
// type, then an id of letters, digits, '-', '_' or '.', 128 bytes at most.
func (n EntityName) Validate() error { return auth.ValidateEntity(string(n)) }

// Addr is a messenger address: "SCHEME://HOSTPORT", where the scheme names
// the transport: tcp://127.0.0.1:6800, rdma+tcp://10.0.0.1:6800,
// mem://osd0.
type Addr struct {
	Scheme string
	Host   string // the transport-specific part
}

// ParseAddr parses an address.
func ParseAddr(s string) (Addr, error) {
	scheme, host, ok := strings.Cut(s, "://")
	if !ok || scheme == "" || host == "" {
		return Addr{}, fmt.Errorf("msgr: address %q: want SCHEME://HOST:PORT, e.g. tcp://127.0.0.1:6800", s)
	}
	if strings.ContainsAny(host, "/?#") {
		return Addr{}, fmt.Errorf("msgr: address %q: unexpected path or query", s)
	}
	if _, err := url.Parse(s); err != nil {
		return Addr{}, fmt.Errorf("msgr: address %q: %w", s, err)
	}
	return Addr{Scheme: strings.ToLower(scheme), Host: host}, nil
}

func (a Addr) String() string { return a.Scheme + "://" + a.Host }
