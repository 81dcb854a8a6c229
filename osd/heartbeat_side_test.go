package osd_test

import (
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// acceptedSide is what OSD o accepted as heartbeat side sessions from OSD
// from (StatelessServer conns: its lossless ones are LosslessPeer).
func acceptedSide(o *osd.OSD, from uint32) []*msgr.Conn {
	_, clu := o.Messengers()
	var out []*msgr.Conn
	for cn := range clu.Conns() {
		if cn.Policy() == msgr.StatelessServer && cn.Peer() == msgr.EntityName(ops.OSDName(from)) {
			out = append(out, cn)
		}
	}
	return out
}

// TestSideSessionAcceptStartsNoSync: a heartbeat side session that a peer
// opens is no lossless session of its: accepting one starts no sync of the
// PGs shared with that peer, as its lossless session's accept does. osd.1's
// side sessions are closed, so it makes new ones at its next beats; osd.0
// and osd.2 accept them and take heartbeats on them, and start no sync.
func TestSideSessionAcceptStartsNoSync(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4})
	c.WaitSettled(t, 30*time.Second)
	var syncs atomic.Int64
	osd.PeeringStarted.Set(func(_, peer uint32, why string) {
		if peer == 1 {
			syncs.Add(1)
		}
	})
	var beats [3]atomic.Int64 // heartbeats from osd.1, by receiver
	osd.ClusterReceived.Set(func(id, from uint32, mt osdpb.MsgType) bool {
		if from == 1 && mt == osdpb.MsgType_MSG_HEARTBEAT {
			beats[id].Add(1)
		}
		return false
	})
	t.Cleanup(func() { osd.PeeringStarted.Set(nil); osd.ClusterReceived.Set(nil) })

	old := append(acceptedSide(c.OSDs[0], 1), acceptedSide(c.OSDs[2], 1)...)
	if len(old) != 2 {
		t.Fatalf("osd.0 and osd.2 hold %d side sessions from osd.1, want 2", len(old))
	}
	_, clu1 := c.OSDs[1].Messengers()
	for cn := range clu1.Conns() {
		if cn.Policy() == msgr.LossyClient {
			cn.Close()
		}
	}
	osdtest.Eventually(t, 10*time.Second, "osd.0 and osd.2 to accept new side sessions from osd.1", func() bool {
		for _, id := range []uint32{0, 2} {
			now := acceptedSide(c.OSDs[id], 1)
			if len(now) != 1 || slices.Contains(old, now[0]) {
				return false
			}
		}
		return true
	})
	// A session's events and messages are dispatched in order: heartbeats
	// taken from here on came after the new sessions' accept was handled.
	b0, b2 := beats[0].Load(), beats[2].Load()
	osdtest.Eventually(t, 10*time.Second, "heartbeats on the new side sessions", func() bool {
		return beats[0].Load() >= b0+2 && beats[2].Load() >= b2+2
	})
	if n := syncs.Load(); n != 0 {
		t.Fatalf("accepting osd.1's side sessions started %d syncs of the PGs shared with it", n)
	}
}

// TestSideSessionsRefusedHeartbeatsOnLossless: osd.2 is a build without
// side sessions, which refuses them. osd.0 and osd.1 then send it their
// heartbeats on the lossless session, after one refusal each and a
// warning logged once, not a refused dial at every beat; nobody is seen
// down, and a stopped osd.2 still is.
func TestSideSessionsRefusedHeartbeatsOnLossless(t *testing.T) {
	osd.WithoutSideSessions.Set(func(id uint32) bool { return id == 2 })
	t.Cleanup(func() { osd.WithoutSideSessions.Set(nil) })
	var logs [2]osdtest.LogBuffer
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4, Tweak: func(cfg *osd.Config) {
		if cfg.ID < 2 {
			cfg.Logger = slog.New(slog.NewTextHandler(&logs[cfg.ID], &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	}})
	var beats [2]atomic.Int64 // heartbeats osd.2 took from osd.0 and osd.1
	osd.ClusterReceived.Set(func(id, from uint32, mt osdpb.MsgType) bool {
		if id == 2 && from < 2 && mt == osdpb.MsgType_MSG_HEARTBEAT {
			beats[from].Add(1)
		}
		return false
	})
	t.Cleanup(func() { osd.ClusterReceived.Set(nil) })
	noneDown := func() {
		t.Helper()
		for i, o := range c.OSDs {
			for j := range c.OSDs {
				if i != j && o.PeerDown(uint32(j)) {
					t.Fatalf("osd.%d sees osd.%d down", i, j)
				}
			}
		}
	}
	_, clu2 := c.OSDs[2].Messengers()
	refusals := func() uint64 { return clu2.Stats().HandshakeFailures[msgr.HandshakeOther] }
	beatsFrom := func(n int64) func() bool {
		return func() bool {
			noneDown()
			return beats[0].Load() >= n && beats[1].Load() >= n
		}
	}
	osdtest.Eventually(t, 10*time.Second, "osd.2 to take heartbeats from osd.0 and osd.1", beatsFrom(10))
	refused := refusals()
	if refused == 0 {
		t.Fatal("osd.2 refused no side session")
	}
	// Ten more beats each, past the grace: no more side sessions are tried.
	osdtest.Eventually(t, 10*time.Second, "osd.2 to take more heartbeats", beatsFrom(beats[0].Load()+10))
	noneDown()
	if now := refusals(); now != refused {
		t.Fatalf("osd.2 refused %d side sessions, then %d more over ten beats: its peers keep trying", refused, now-refused)
	}
	for cn := range clu2.Conns() {
		if cn.Policy().Lossy {
			t.Fatalf("osd.2, a build without side sessions, holds a lossy session %v", cn)
		}
	}
	for i := range logs {
		if n := strings.Count(logs[i].String(), "refuses heartbeat side sessions"); n != 1 {
			t.Errorf("osd.%d logged the refusal %d times, want once:\n%s", i, n, logs[i].String())
		}
	}
	c.StopOSD(2)
	osdtest.Eventually(t, 5*time.Second, "osd.2 seen down", func() bool { return c.OSDs[0].PeerDown(2) && c.OSDs[1].PeerDown(2) })
}

// TestOwnStallBlamesNoPeer: an OSD whose own process stalled (SIGSTOP, a
// paused VM) for longer than the grace wakes to find every peer silent
// that long; it logs the stall and gives its peers a new grace rather
// than calling them all down and reporting them to the mon. The stall is
// its heartbeat loop and its peers' last signs of life moved back 5 s,
// the peers' heartbeats kept from it meanwhile as a stopped process reads
// none.
func TestOwnStallBlamesNoPeer(t *testing.T) {
	var log osdtest.LogBuffer
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4, Tweak: func(cfg *osd.Config) {
		if cfg.ID == 0 {
			cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	}})
	c.WaitSettled(t, 30*time.Second)
	var deaf atomic.Bool
	osd.ClusterReceived.Set(func(id, from uint32, mt osdpb.MsgType) bool {
		return id == 0 && mt == osdpb.MsgType_MSG_HEARTBEAT && deaf.Load()
	})
	t.Cleanup(func() { osd.ClusterReceived.Set(nil) })
	o := c.OSDs[0]
	before := len(log.String()) // its start may have found a peer not up yet
	deaf.Store(true)
	o.StallForTest(5 * time.Second)
	osdtest.Eventually(t, 5*time.Second, "osd.0 to see its stall", func() bool { return o.StallsForTest() == 1 })
	// Two beats more, well within the 1 s grace of the peers' new one.
	beat := o.LastBeatForTest()
	osdtest.Eventually(t, 5*time.Second, "two more beats", func() bool { return o.LastBeatForTest() > beat+int64(150*time.Millisecond) })
	deaf.Store(false)
	for _, id := range []uint32{1, 2} {
		if o.PeerDown(id) {
			t.Errorf("osd.0 woke from its own stall and called osd.%d down", id)
		}
	}
	if s := log.String()[before:]; strings.Contains(s, "peer is down") || !strings.Contains(s, "this OSD was stalled") {
		t.Fatalf("osd.0's log after its stall:\n%s", s)
	}
}
