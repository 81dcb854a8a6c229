//go:build rdma

package rdma

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// TestWriteFramesPostsOnce: a batch of small frames goes to the provider
// in one call, not a call per frame, and arrives whole and in order. The
// poller is parked (a reader that never stops polling holds the duty) and
// no reader polls, so the writer's own post calls are all there are.
func TestWriteFramesPostsOnce(t *testing.T) {
	const n = 16 // within the window and the send slots: nothing waits
	opts := wire.LinkOptions{RecvWindow: n, Limits: wire.Limits{MaxFront: 4 << 10, MaxData: 4 << 10},
		Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}}
	tr := NewTransport("tcp", Config{})
	defer tr.Close()
	ln, err := tr.Listen(context.Background(), "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := ln.(*listener).d
	dialed, peer := LinkPair(t, tr, ln, opts)
	defer peer.Close()
	defer dialed.Close()
	l := dialed.(*link)

	frames := make([]wire.Frame, n)
	for i := range frames {
		frames[i] = wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: uint64(i + 1)}, Data: fmt.Appendf(nil, "frame %d", i)}
	}
	// Polled far in the future: the poller stays parked until released.
	d.pollDuty.Store(&link{})
	d.dutyPolled.Store(int64(time.Since(monoEpoch) + time.Hour))
	// Wakes a poller asleep in fi_cq_sread, which holds the token there;
	// with the duty taken it parks instead of sleeping again.
	d.passToken()
	calls := d.pollStats.posts.Load()
	err = l.WriteFrames(frames)
	calls = d.pollStats.posts.Load() - calls
	left := d.pq.n.Load() // for the parked poller
	d.dutyPolled.Store(int64(time.Since(monoEpoch)))
	d.dropDuty(d.pollDuty.Load())
	if err != nil {
		t.Fatal(err)
	}
	// 0 calls if a poll begun before the duty was taken posted them all.
	if calls > 1 || left != 0 {
		t.Fatalf("WriteFrames of %d frames made %d post calls and left %d operations queued, want 1 call and none left", n, calls, left)
	}
	var f wire.Frame
	for i := range n {
		if err := peer.ReadFrame(&f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if want := fmt.Sprintf("frame %d", i); f.Preamble.Seq != uint64(i+1) || string(f.Data) != want {
			t.Fatalf("frame %d arrived as seq %d %q, want seq %d %q", i, f.Preamble.Seq, f.Data, i+1, want)
		}
		f.Release()
	}
}
