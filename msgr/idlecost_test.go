package msgr_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
)

// memUse is what a process spends on live objects and goroutine stacks,
// read after two collections (the second empties sync.Pool victims).
type memUse struct {
	heap, stacks uint64
	goroutines   int
}

func (u memUse) bytes() uint64 { return u.heap + u.stacks }

func measureMem() memUse {
	runtime.GC()
	runtime.GC()
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
	}
	metrics.Read(s)
	return memUse{heap: s[0].Value.Uint64(), stacks: s[1].Value.Uint64(), goroutines: runtime.NumGoroutine()}
}

// readRawFrame reads one frame off c into a throw-away buffer, so that a
// raw peer holds no buffer of its own between frames.
func readRawFrame(c net.Conn) (wire.Preamble, []byte, error) {
	var p wire.Preamble
	b := make([]byte, wire.PreambleSize)
	if _, err := io.ReadFull(c, b); err != nil {
		return p, nil, err
	}
	if err := p.Parse(b, wire.Limits{MaxFront: 1 << 20, MaxData: 1 << 20}); err != nil {
		return p, nil, err
	}
	rest := make([]byte, p.WireSize()-wire.PreambleSize)
	_, err := io.ReadFull(c, rest)
	return p, rest, err
}

// idleHandshake makes c a session of peer name with the server, spending
// nothing on this side but the socket, and leaves it idle.
func idleHandshake(t testing.TB, c net.Conn, name string, id uint64) {
	bn := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}
	if _, err := wire.ExchangeBanner(c, bn); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(handshakeFrames(t, name, id)); err != nil {
		t.Fatal(err)
	}
	for {
		p, _, err := readRawFrame(c)
		if err != nil {
			t.Fatalf("handshake of %s: %v", name, err)
		}
		if p.Tag == wire.TagSessionReady {
			return
		}
	}
}

// idleConns is how many connections TestIdleConnectionCost opens:
// MSGR_IDLE_CONNS, default 500.
func idleConns() int {
	if n, err := strconv.Atoi(os.Getenv("MSGR_IDLE_CONNS")); err == nil && n > 0 {
		return n
	}
	return 500
}

// TestIdleConnectionCost measures what an idle connection costs a server
// (heap in use plus goroutine stacks, per connection, the raw peers' own
// sockets included) for a peer that sent only its banner and for one
// whose session is established and idle, asserts it stays within a few
// KiB, and that memory and goroutines come back once the peers leave.
// The figures are in docs/messenger.md.
func TestIdleConnectionCost(t *testing.T) {
	n := idleConns()
	cases := []struct {
		name     string
		session  bool
		maxBytes uint64 // per connection
		maxGor   float64
	}{
		{"banner only", false, 8 << 10, 1},
		{"idle session", true, 16 << 10, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// (A Recorder would keep every Conn alive through its events.)
			release := msgr.DispatchFunc(func(m *msgr.Message) { m.Release() })
			srv, addr, _ := newLoggedServer(t, release, func(o *msgr.Options) {
				o.Keepalive, o.IdleTimeout, o.MaxConns, o.MaxUnauthPerHost = time.Minute, 10*time.Minute, -1, -1
			})
			a, _ := msgr.ParseAddr(addr)
			// One connection first, so that what every server pays once
			// (pools, the listener) is in the baseline.
			warm, err := net.Dial("tcp", a.Host)
			if err != nil {
				t.Fatal(err)
			}
			idleHandshake(t, warm, "osd.9999", 1)
			warm.Close()
			msgrtest.Eventually(t, 10*time.Second, "the warm-up connection closed", func() bool {
				return srv.InboundStats().Open == 0
			})
			for c := range srv.Conns() {
				c.Close()
			}
			base := measureMem()

			conns := make([]net.Conn, 0, n)
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			bn := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}
			for i := range n {
				c, err := net.Dial("tcp", a.Host)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
				if tc.session {
					idleHandshake(t, c, fmt.Sprintf("osd.%d", i+1), uint64(i+2))
				} else if _, err := wire.ExchangeBanner(c, bn); err != nil {
					t.Fatal(err)
				}
			}
			msgrtest.Eventually(t, 20*time.Second, "every connection accepted", func() bool {
				return srv.InboundStats().Open == int64(n)
			})
			if tc.session {
				msgrtest.Eventually(t, 20*time.Second, "every session established", func() bool {
					k := 0
					for range srv.Conns() {
						k++
					}
					return k == n
				})
			}
			// The last connections' handshake goroutines may not have
			// ended yet (CI once saw more than 1,000 for 500 sessions,
			// "2.00 each"): wait a while for the count to come down to
			// the limit, which one goroutine too many per connection
			// still exceeds. A few besides the connections' are allowed:
			// CI saw 1,001 for 500 sessions after the wait (a runtime or
			// timer goroutine of the moment, not one per connection).
			const slack = 4
			limit := base.goroutines + int(tc.maxGor*float64(n)) + slack
			for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > limit && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond) // polling interval, not synchronization
			}
			during := measureMem()
			per := (float64(during.bytes()) - float64(base.bytes())) / float64(n)
			gor := float64(during.goroutines-base.goroutines) / float64(n)
			t.Logf("%d connections, %s: %.0f bytes each (heap %.0f, stacks %.0f), %.2f goroutines each (%d in all)",
				n, tc.name, per, (float64(during.heap)-float64(base.heap))/float64(n),
				(float64(during.stacks)-float64(base.stacks))/float64(n), gor, during.goroutines-base.goroutines)
			if raceEnabled {
				tc.maxBytes *= 2 // the race detector's stacks are larger
			}
			if per > float64(tc.maxBytes) || during.goroutines > limit {
				t.Errorf("an idle connection (%s) costs %.0f bytes and %.2f goroutines (%d in all), want at most %d and %.0f",
					tc.name, per, gor, during.goroutines-base.goroutines, tc.maxBytes, tc.maxGor)
			}

			for _, c := range conns {
				c.Close()
			}
			conns = conns[:0]
			if tc.session {
				// Peers that went away leave lossless sessions waiting
				// for them; closing them is the owner's (or the
				// reaper's) business.
				msgrtest.Eventually(t, 20*time.Second, "every link down", func() bool {
					return srv.InboundStats().Open == 0
				})
				// A link's reader and writer end on their own after its
				// close counts it down: wait a while for them.
				for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > base.goroutines+2 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond) // polling interval, not synchronization
				}
				// What a session waiting for its peer (standby) costs: heap
				// only, since it has no goroutine (the runtime may keep the
				// stacks of those that ended for reuse).
				standby := measureMem()
				per := (float64(standby.heap) - float64(base.heap)) / float64(n)
				t.Logf("%d sessions in standby: %.0f bytes of heap each, %d goroutines more in all",
					n, per, standby.goroutines-base.goroutines)
				if per > 6<<10 || standby.goroutines > base.goroutines+2 {
					t.Errorf("a standby session costs %.0f bytes (want at most 6 KiB), goroutines %d, baseline %d",
						per, standby.goroutines, base.goroutines)
				}
				for c := range srv.Conns() {
					c.Close()
				}
			}
			var after memUse
			// The goroutines are gone, and with them what their stacks held
			// (the runtime may keep the stack memory itself for reuse).
			msgrtest.EventuallyDescribed(t, 20*time.Second, func() string {
				return fmt.Sprintf("memory and goroutines back near the baseline: before %+v, after %+v", base, after)
			}, func() bool {
				after = measureMem()
				return after.goroutines <= base.goroutines+2 && after.heap <= base.heap+uint64(n)*512+1<<20
			})
		})
	}
}
