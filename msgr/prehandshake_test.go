package msgr_test

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
)

// totalAlloc is the bytes this process has allocated so far; unlike
// HeapAlloc, a GC does not take it down.
func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// TestPreHandshakeFramesBounded: before its handshake completes a peer can
// send only handshake frames of a few KiB. A MESSAGE frame claiming a
// 16 MiB front and 65 MiB of data, or a HELLO claiming 1 MiB, closes the
// connection without the server allocating for it.
func TestPreHandshakeFramesBounded(t *testing.T) {
	rec := msgrtest.NewRecorder(t)
	_, addr, logs := newLoggedServer(t, rec, func(o *msgr.Options) {
		o.MaxMessageSize = 96 << 20 // the claims below are within the steady-state limits
	})
	big := func(tag wire.Tag, front, data uint32) []byte {
		p := wire.Preamble{Tag: tag, Seq: 1, FrontLen: front, DataLen: data}
		b := make([]byte, wire.PreambleSize)
		p.Put(b)
		return b
	}
	cases := []struct {
		name  string
		hello bool // send a valid HELLO first
		frame []byte
	}{
		{"message instead of hello", false, big(wire.TagMessage, 16<<20, 65<<20)},
		{"message after hello", true, big(wire.TagMessage, 16<<20, 65<<20)},
		{"huge hello", false, big(wire.TagHello, 1<<20, 0)},
		{"huge auth request", true, big(wire.TagAuthRequest, 64<<10, 0)},
		{"ack before the handshake", false, big(wire.TagAck, 0, 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GC()
			before := totalAlloc()
			r := dialRaw(t, addr)
			bn := wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}
			if _, err := wire.ExchangeBanner(r.c, bn); err != nil {
				t.Fatal(err)
			}
			if tc.hello {
				r.write(hsFrame(t, wire.TagHello, &msgrpb.Hello{EntityName: "osd.9", InstanceNonce: 1}))
			}
			r.write(tc.frame)
			// A trickle of what the header promised.
			r.c.Write(make([]byte, 64<<10))
			r.waitClosed(10 * time.Second)
			if grew := totalAlloc() - before; grew > 2<<20 {
				t.Fatalf("the server allocated %d bytes for one hostile connection", grew)
			}
		})
	}
	// Refusals are logged rate-limited by kind: the first of each.
	for _, want := range []string{"MESSAGE frame before the handshake completed", "exceeds the limit of " + strconv.Itoa(wire.MaxHandshakeFront)} {
		msgrtest.Eventually(t, 5*time.Second, "log line "+want, func() bool {
			return strings.Contains(logs.String(), want)
		})
	}
}
