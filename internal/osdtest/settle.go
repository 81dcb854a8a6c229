package osdtest

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// WaitSettled waits until the cluster runs as it will in steady state:
// every PG active+clean, and every OSD exchanging heartbeats with every
// other on a side session each way (those come at the first beats, after
// Start returns). A count of goroutines taken after it moves only with
// what the test does, not with the cluster's startup (peering's queries,
// side sessions being made).
func (c *Cluster) WaitSettled(t testing.TB, timeout time.Duration) {
	t.Helper()
	msgrtest.EventuallyDescribed(t, timeout, func() string { return "the cluster to settle: " + c.settledState() }, func() bool {
		return c.settledState() == ""
	})
}

// settledState is what keeps the cluster from being settled, or "".
func (c *Cluster) settledState() string {
	var clean int
	for _, o := range c.OSDs {
		if o == nil {
			continue
		}
		clean += o.Stats().PGs["active+clean"]
		var dialed, accepted int
		_, clu := o.Messengers()
		for cn := range clu.Conns() {
			switch {
			case cn.Policy() == msgr.LossyClient && cn.Stats().MsgsReceived > 0:
				dialed++ // heartbeat replies arrive on it
			case cn.Policy() == msgr.StatelessServer && cn.Stats().MsgsReceived > 0:
				accepted++
			}
		}
		if peers := c.up() - 1; dialed != peers || accepted != peers {
			return fmt.Sprintf("osd.%d has %d heartbeat sessions answered and %d accepted, want %d of each", o.ID(), dialed, accepted, peers)
		}
	}
	total := 0
	for p := range c.Map.Pools() {
		total += int(p.PgCount)
	}
	if clean != total {
		return fmt.Sprintf("%d of %d PGs active+clean", clean, total)
	}
	return ""
}

// up is how many OSDs run.
func (c *Cluster) up() int {
	n := 0
	for _, o := range c.OSDs {
		if o != nil {
			n++
		}
	}
	return n
}

// idleWaiter begins the stack of a goroutine that an OSD keeps idle for
// its next wait (osd's waiters: up to 256 per OSD, by design, until it
// closes).
var idleWaiter = []byte("\ngithub.com/ospreystore/osprey/osd.(*waiters).loop(")

// Goroutines is runtime.NumGoroutine less the goroutines the OSDs keep
// idle in their pools: a client's work grows those pools and they stay,
// which is no leak of the client's. A pooled goroutine still running its
// function is counted.
func Goroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		// The first frame is the function the goroutine is in.
		if i := bytes.IndexByte(g, '\n'); i < 0 || !bytes.HasPrefix(g[i:], idleWaiter) {
			n++
		}
	}
	return n
}
