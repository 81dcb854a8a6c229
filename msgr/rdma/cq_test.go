//go:build rdma

package rdma_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
)

// TestRDMATinyCQCarriesManyLinks gives a server's transport and its
// clients' one shared transport completion queues with room for two links
// each, then runs six sessions at once through them, inline and rendezvous
// frames mixed: the transports must open more CQs rather than promise one
// more completions than it holds, every message must arrive once and in
// order, and once the sessions are closed no entry may stay reserved.
func TestRDMATinyCQCarriesManyLinks(t *testing.T) { forEachRecvMode(t, testTinyCQ) }

func testTinyCQ(t *testing.T, cfg rdma.Config) {
	const (
		window    = 16
		clients   = 6
		perClient = 300
	)
	setWindow := func(o *msgr.Options) { o.RecvWindowMsgs = window }

	// What one link reserves, from a link of a default transport.
	probeS, probeC := ownTransport(t, cfg), ownTransport(t, cfg)
	probe := connectPair(t, probeS, probeC, setWindow, setWindow)
	need := probeC.Stats().CQReserved
	if need <= window {
		t.Fatalf("a link reserves %d CQ entries, not even its %d receives", need, window)
	}
	shutdown(t, probe.cli, probe.srv)

	cfg.CQEntries = int(need*2 + need/2) // two links, not three
	trS, trC := ownTransport(t, cfg), ownTransport(t, cfg)
	srvRec := msgrtest.NewRecorder(t)
	srv := tcpEnv.NewMessenger(t, "osd.0", srvRec, withTransport(trS, setWindow))
	addr := tcpEnv.Listen(t, srv)

	ms := make([]*msgr.Messenger, clients)
	conns := make([]*msgr.Conn, clients)
	ids := make([]uint32, clients)
	for i := range clients {
		ms[i] = tcpEnv.NewMessenger(t, msgr.EntityName(fmt.Sprintf("osd.%d", i+1)), msgrtest.NewRecorder(t), withTransport(trC, setWindow))
		conns[i] = connect(t, ms[i], addr, "osd.0")
		ids[i] = uint32(i + 1)
	}
	for name, tr := range map[string]*rdma.Transport{"server": trS, "client": trC} {
		st := tr.Stats()
		if wantCQs := int64((clients + 1) / 2); st.CQs < wantCQs || st.CQReserved != clients*need {
			t.Fatalf("%s: %d CQs of %d entries, %d reserved, after %d links of %d: want at least %d CQs and all reserved",
				name, st.CQs, cfg.CQEntries, st.CQReserved, clients, need, wantCQs)
		}
	}

	// Sizes across the inline/rendezvous boundary (16 KiB buffers).
	sizes := [][]byte{fill(10, 1), fill(3000, 2), fill(40<<10, 3), fill(200<<10, 4)}
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			sendAll(t, c, ids[i], 0, perClient, func(k int) []byte { return sizes[(k+i)%len(sizes)] })
		})
	}
	wg.Wait()
	waitDelivered(t, srvRec, ids, perClient, 60*time.Second, conns[0])
	for i, c := range conns {
		if st := c.Stats(); st.Faults != 0 || st.Reconnects != 0 {
			t.Fatalf("client %d: %d link faults, %d reconnects", i+1, st.Faults, st.Reconnects)
		}
	}

	shutdown(t, append(ms, srv)...)
	for name, tr := range map[string]*rdma.Transport{"server": trS, "client": trC} {
		msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
			return fmt.Sprintf("%s: %d CQ entries still reserved after every link closed", name, tr.Stats().CQReserved)
		}, func() bool { return tr.Stats().CQReserved == 0 })
	}
}

// shutdown shuts the messengers down (their cleanups find them done).
func shutdown(t *testing.T, ms ...*msgr.Messenger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range ms {
		if err := m.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
