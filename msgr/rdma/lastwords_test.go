//go:build rdma

package rdma_test

import (
	"context"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// TestLateReaderGetsPeersLastFrame: a frame the peer wrote just before it
// closed reaches a reader that comes back to ReadFrame well after the
// link failed (the peer's shutdown and the grace behind it), then the
// error, as a TCP reader gets the data before EOF. The link used to close
// at its failure and drop what its reader had not yet taken: a peer's
// SESSION_RESET or WAIT, written just before it closed, was lost to a
// reader busy elsewhere for longer than the grace.
func TestLateReaderGetsPeersLastFrame(t *testing.T) {
	tr := ownTransport(t, rdma.Config{})
	opts := wire.LinkOptions{RecvWindow: 8, Limits: wire.Limits{MaxFront: 4 << 10, MaxData: 1 << 20},
		Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}}
	ln, err := tr.Listen(context.Background(), "127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for i := range 3 {
		dialed, accepted := rdma.LinkPair(t, tr, ln, opts)
		if err := accepted.WriteFrames([]wire.Frame{{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 1}, Front: []byte("last words")}}); err != nil {
			t.Fatal(err)
		}
		accepted.Close()
		// Busy elsewhere for longer than the shutdown's grace (100 ms):
		// the link has failed meanwhile. Not a synchronization: the
		// frame must be there however late the reader comes.
		time.Sleep(300 * time.Millisecond)
		var f wire.Frame
		if err := dialed.ReadFrame(&f); err != nil {
			t.Fatalf("round %d: the reader, back after the peer's shutdown, lost its last frame: %v", i, err)
		}
		if string(f.Front) != "last words" {
			t.Fatalf("round %d: read %q, want the peer's last frame", i, f.Front)
		}
		f.Release()
		if err := dialed.ReadFrame(&f); err == nil {
			t.Fatalf("round %d: a frame after the peer's last one: %q", i, f.Front)
		}
		dialed.Close()
	}
}
