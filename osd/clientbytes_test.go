package osd_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/osd"
)

// registered is a transport with a registered-memory budget, as RDMA's.
type registered struct {
	wire.MissingTransport
	budget int64
}

func (r registered) RegisteredBudget() int64 { return r.budget }

// TestClientMessageBytes: an OSD's client messages take an eighth of the
// registered-memory budget of the transports its networks use, at most
// Ceph's 512 MiB; a build's RDMA transports that neither network uses do
// not count (a TCP-only OSD built with RDMA keeps 512 MiB).
func TestClientMessageBytes(t *testing.T) {
	ts := []wire.Transport{tcp.Transport{},
		registered{wire.MissingTransport{Name: "rdma+tcp"}, 1 << 30},
		registered{wire.MissingTransport{Name: "rdma+verbs"}, 256 << 20}}
	for _, tc := range []struct {
		addrs []string
		want  int64
	}{
		{[]string{"tcp://10.0.0.1:6800", "tcp://10.0.0.1:6801"}, 512 << 20},
		{[]string{"tcp://10.0.0.1:6800", "rdma+tcp://10.0.0.1:6801"}, 128 << 20},
		{[]string{"rdma+verbs://10.0.0.1:6800", "rdma+tcp://10.0.0.1:6801"}, 32 << 20},
		{[]string{"RDMA+VERBS://10.0.0.1:6800"}, 32 << 20},
		{[]string{"", "not an address"}, 512 << 20},
	} {
		if got := osd.DefaultClientMessageBytes(osd.RegisteredBudget(ts, tc.addrs...)); got != tc.want {
			t.Errorf("%q: %d bytes, want %d", tc.addrs, got, tc.want)
		}
	}
	if got := osd.DefaultClientMessageBytes(4 << 30); got != 512<<20 {
		t.Errorf("a 4 GiB budget: %d bytes, want 512 MiB", got)
	}
}
