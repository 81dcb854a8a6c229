//go:build rdma

package rdma_test

import (
	"testing"

	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestRDMALinkWindows: a lossless session that came up over tcp (a window
// of 64) comes back over rdma+tcp (16 receives a link), restarted or not,
// with more messages held than the RDMA link can post, and goes back to
// tcp. In the invariants build each RDMA link checks every grant it sends
// against the receives it posted (on a per-endpoint queue; the shared
// pool has no receives of a link's own to count).
func TestRDMALinkWindows(t *testing.T) {
	forEachRecvMode(t, func(t *testing.T, cfg rdma.Config) {
		cfg.MaxRecvWindow = 16
		msgrtest.RunLinkWindows(t, msgrtest.LinkWindows{
			Network: func(t *testing.T) (func() []wire.Transport, func() error) {
				// A transport (a domain) of its own for each messenger, as
				// two processes would have.
				return func() []wire.Transport { return []wire.Transport{tcp.Transport{}, ownTransport(t, cfg)} }, nil
			},
			WideListen: "tcp://127.0.0.1:0", NarrowListen: "rdma+tcp://127.0.0.1:0",
			Window: 64, NarrowWindow: 16,
		})
	})
}
