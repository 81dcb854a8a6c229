package msgr_test

import (
	"fmt"
	"testing"

	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestLinkWindows: a session moves between "mem" (no cap on the window,
// as tcp) and "memrdma" (a PostedTransport of at most 8 credits, each a
// posted receive, as rdma+*), restarted or not, with a configured window
// of 32 (msgr/rdma runs the same over tcp and rdma+tcp).
func TestLinkWindows(t *testing.T) {
	msgrtest.RunLinkWindows(t, msgrtest.LinkWindows{
		Network: func(t *testing.T) (func() []wire.Transport, func() error) {
			mem, posted := msgrtest.NewMemTransport(), msgrtest.NewPostedTransport("memrdma", 8)
			check := func() error {
				if posted.MostTaken() == 0 {
					return fmt.Errorf("no frame went over memrdma")
				}
				return posted.Err()
			}
			return func() []wire.Transport { return []wire.Transport{mem, posted} }, check
		},
		WideListen: "mem://wide", NarrowListen: "memrdma://narrow",
		Window: 32, NarrowWindow: 8,
	})
}
