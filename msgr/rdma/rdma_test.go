//go:build rdma

package rdma_test

// RDMA-specific tests over libfabric's tcp provider (rdma+tcp): what the
// transport conformance suite does not reach. Credits at the smallest
// window, rendezvous sizes end to end, registered memory and goroutines
// after shutdown, injected faults with rendezvous frames in the stream, a
// peer process killed with SIGKILL in the middle of large transfers, and
// connection churn. Tests that start with t.Skip("BUG: ...") reproduce
// defects described in docs/rdma.md, "Known limitations"; delete the Skip
// to run one. FI_PROVIDER must be unset or name tcp and sockets (a provider
// it leaves out fails Listen and Dial).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// tcpEnv is rdma+tcp with the suite's test defaults (quiet logger, fast
// reconnects). Tests that need to look at the transport pass their own
// through withTransport.
var tcpEnv = msgrtest.Env{Scheme: "rdma+tcp", Host: "127.0.0.1:0"}

// ownTransport returns an rdma+tcp transport the test owns: messengers it
// is given to do not close it. Registered first, its Close runs after the
// messengers' shutdowns (cleanups run last-in first-out).
func ownTransport(t testing.TB, cfg rdma.Config) *rdma.Transport {
	t.Helper()
	tr := rdma.NewTransport("tcp", cfg)
	t.Cleanup(func() { tr.Close() })
	return tr
}

// withTransport makes a messenger use tr for rdma+tcp (it overrides the
// built-in one), then applies more.
func withTransport(tr *rdma.Transport, more func(*msgr.Options)) func(*msgr.Options) {
	return func(o *msgr.Options) {
		o.Transports = []wire.Transport{tr}
		if more != nil {
			more(o)
		}
	}
}

// pair is a server messenger "osd.0" on one transport and a client "osd.1"
// on another, connected to it, each with a recorder.
type pair struct {
	srv, cli       *msgr.Messenger
	srvRec, cliRec *msgrtest.Recorder
	c              *msgr.Conn // the client's session with the server
}

// connectPair starts a pair; srvOpt and cliOpt, when not nil, set more
// options on each side.
func connectPair(t testing.TB, trS, trC *rdma.Transport, srvOpt, cliOpt func(*msgr.Options)) pair {
	t.Helper()
	p := pair{srvRec: msgrtest.NewRecorder(t), cliRec: msgrtest.NewRecorder(t)}
	p.srv = tcpEnv.NewMessenger(t, "osd.0", p.srvRec, withTransport(trS, srvOpt))
	addr := tcpEnv.Listen(t, p.srv)
	p.cli = tcpEnv.NewMessenger(t, "osd.1", p.cliRec, withTransport(trC, cliOpt))
	p.c = connect(t, p.cli, addr, "osd.0")
	return p
}

func connect(t testing.TB, m *msgr.Messenger, addr string, peer msgr.EntityName) *msgr.Conn {
	t.Helper()
	c, err := m.Connect(context.Background(), addr, peer)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// onlyConn returns the one session of m.
func onlyConn(t testing.TB, m *msgr.Messenger) *msgr.Conn {
	t.Helper()
	var c *msgr.Conn
	msgrtest.Eventually(t, 10*time.Second, "the server's session", func() bool {
		n := 0
		for x := range m.Conns() {
			c = x
			n++
		}
		return n == 1
	})
	return c
}

// fill returns n bytes of seeded pseudo-random data.
func fill(n int, seed uint64) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 7}).Read(b)
	return b
}

// sendAll sends n checked messages of sender id; data(i) may share slices
// between messages (the messenger only reads them).
func sendAll(t testing.TB, c *msgr.Conn, id uint32, start, n int, data func(i int) []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := start; i < start+n; i++ {
		d := data(i)
		if err := c.Send(ctx, msgr.NewMessage(uint16(1+i%7), msgrtest.Payload(id, uint64(i), d), d)); err != nil {
			t.Errorf("sender %d: send %d: %v (conn %v)", id, i, err, c)
			return
		}
	}
}

// waitDelivered waits until rec has every message of each sender in ids,
// in order and exactly once, failing early on a check error.
func waitDelivered(t testing.TB, rec *msgrtest.Recorder, ids []uint32, per uint64, timeout time.Duration, c *msgr.Conn) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if err := rec.Err(); err != nil {
			t.Fatal(err)
		}
		all := true
		for _, id := range ids {
			all = all && rec.Next(id) >= per
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			got := make([]uint64, len(ids))
			for i, id := range ids {
				got[i] = rec.Next(id)
			}
			t.Fatalf("after %v: delivered %v of %d per sender; sender's conn %v", timeout, got, per, c)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if got := rec.Next(id); got != per {
			t.Fatalf("sender %d: %d messages delivered, want %d", id, got, per)
		}
	}
}

// TestRDMACreditExhaustionTinyWindow runs both sides at the smallest
// window (4 messages, so 4 posted receives per link) and floods the
// session from many goroutines, so the senders stall on credit all the
// time. Everything must arrive exactly once and in order with no link
// fault (a completion error, a truncated receive or a protocol error
// faults the link); neither side may ever have more receives posted than
// its window (a buffer posted twice would show), and once the flood is
// over all of them must be posted again (a buffer lost would show).
// rdma+tcp does not report receiver-not-ready: it holds a send until a
// receive is posted (docs/rdma.md, Known limitations), so these counts,
// not the absence of faults, are what tie credits to posted receives.
func TestRDMACreditExhaustionTinyWindow(t *testing.T) {
	forEachRecvMode(t, testCreditExhaustion)
}

// forEachRecvMode runs a test with receives from the domain's shared pool
// (the default where the provider has one) and from each link's own queue.
func forEachRecvMode(t *testing.T, test func(*testing.T, rdma.Config)) {
	t.Run("SharedPool", func(t *testing.T) { test(t, rdma.Config{}) })
	t.Run("PerEndpoint", func(t *testing.T) { test(t, rdma.Config{NoSharedRecv: true}) })
	// Without the write rendezvous's control receives: the receives
	// posted are then the credits alone.
	t.Run("ReadRendezvous", func(t *testing.T) { test(t, rdma.Config{Rendezvous: rdma.RendezvousRead}) })
}

// creditRecvs is the receives of tr posted for the sessions' credits: all
// but those for control frames (the session's and the write rendezvous's).
func creditRecvs(tr *rdma.Transport) int64 {
	st := tr.Stats()
	return st.RecvsPosted - st.ControlRecvs
}

func testCreditExhaustion(t *testing.T, cfg rdma.Config) {
	const (
		window    = 4
		senders   = 8
		perSender = 1000 // 8,000 messages: 2,000 times out of credit
	)
	trS, trC := ownTransport(t, cfg), ownTransport(t, cfg)
	tiny := func(o *msgr.Options) { o.RecvWindowMsgs = window }
	p := connectPair(t, trS, trC, tiny, tiny)
	srvRec, c := p.srvRec, p.c
	sc := onlyConn(t, p.srv)

	// Sample the receives posted for credits while the flood runs: never
	// more than the window on either side.
	var maxPosted atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			for _, tr := range []*rdma.Transport{trS, trC} {
				if p := creditRecvs(tr); p > maxPosted.Load() {
					maxPosted.Store(p)
				}
			}
			select {
			case <-stopSampling:
				return
			default:
				runtime.Gosched()
			}
		}
	}()

	var wg sync.WaitGroup
	ids := make([]uint32, senders)
	for s := range senders {
		ids[s] = uint32(s + 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			bufs := [][]byte{nil, fill(1, 1), fill(100, 2), fill(511, 3)}
			sendAll(t, c, uint32(s+1), 0, perSender, func(i int) []byte { return bufs[(i+s)%len(bufs)] })
		}()
	}
	wg.Wait()
	waitDelivered(t, srvRec, ids, perSender, 60*time.Second, c)
	close(stopSampling)
	<-sampled

	st, sst := c.Stats(), sc.Stats()
	t.Logf("client %+v", st)
	t.Logf("server %+v", sst)
	if st.Faults != 0 || sst.Faults != 0 || st.Reconnects != 0 {
		t.Fatalf("link faults with credits in force: client %d faults %d reconnects, server %d faults", st.Faults, st.Reconnects, sst.Faults)
	}
	if st.CreditStalls == 0 {
		t.Fatal("no credit stall with a window of 4 under a flood")
	}
	if sst.RecvWindowMsgs != window || st.RecvWindowMsgs != window {
		t.Fatalf("windows %d/%d, want %d", st.RecvWindowMsgs, sst.RecvWindowMsgs, window)
	}
	if st.MsgsSent != senders*perSender || st.Replayed != 0 || sst.DuplicatesDropped != 0 {
		t.Fatalf("sent %d (want %d), replayed %d, duplicates %d", st.MsgsSent, senders*perSender, st.Replayed, sst.DuplicatesDropped)
	}
	if p := maxPosted.Load(); p > window {
		t.Fatalf("%d receives posted on one side, window %d: credits and posted receives disagree", p, window)
	}
	// Quiet again: every receive buffer is posted again, one per credit.
	msgrtest.Eventually(t, 10*time.Second, "all receive buffers posted again", func() bool {
		return creditRecvs(trS) == window && creditRecvs(trC) == window
	})
	// One link: three control receives for the session's control frames,
	// and with the read rendezvous none for the write rendezvous's.
	if cfg.Rendezvous == rdma.RendezvousRead && trS.Stats().ControlRecvs != 3 {
		t.Fatalf("%d control receives with the read rendezvous, want 3", trS.Stats().ControlRecvs)
	}
}

// waitIdle waits until tr has no rendezvous buffer handed out and no
// receive posted, as after every link of it closed.
func waitIdle(t testing.TB, what string, tr *rdma.Transport) {
	t.Helper()
	// A shared receive pool stays posted for the next link: all of its
	// buffers must be back in it, none of a link's own.
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		st := tr.Stats()
		return fmt.Sprintf("%s: still %d rendezvous buffers in use and %d receives posted (shared pool of %d) after its links closed (%+v)",
			what, st.BuffersInUse, st.RecvsPosted, st.SharedRecvBufs, st)
	}, func() bool {
		st := tr.Stats()
		return st.BuffersInUse == 0 && st.RecvsPosted == st.SharedRecvBufs
	})
}

// TestRDMATransportCloseEndsListeners: Transport.Close is documented to
// close every link and listener, so an Accept waiting on a listener of the
// transport must return once it closes.
func TestRDMATransportCloseEndsListeners(t *testing.T) {
	tr := rdma.NewTransport("tcp", rdma.Config{})
	ln, err := tr.Listen(context.Background(), "127.0.0.1:0", wire.LinkOptions{
		RecvWindow: 8, Banner: wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures},
	})
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		_, err := ln.Accept(context.Background())
		accepted <- err
	}()
	tr.Close()
	select {
	case err := <-accepted:
		if err == nil {
			t.Fatal("Accept returned a link after Close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept still waiting 10s after Transport.Close")
	}
}

// TestRDMAExactlyOnceUnderInjectedFaults drops links every ~200 frames on
// both sides while 20,000 messages, some of them rendezvous, stream over
// rdma+tcp: every message arrives once and in order, across reconnects and
// replays, with the rendezvous state of each link reset with it.
func TestRDMAExactlyOnceUnderInjectedFaults(t *testing.T) {
	forEachRecvMode(t, testExactlyOnceUnderFaults)
}

func testExactlyOnceUnderFaults(t *testing.T, cfg rdma.Config) {
	const n = 20000
	faults := func(seed int64) func(*msgr.Options) {
		return func(o *msgr.Options) {
			o.Faults = msgr.FaultInjection{EveryNFrames: 200, Seed: seed}
			o.RecvWindowMsgs = 64
		}
	}
	trS, trC := ownTransport(t, cfg), ownTransport(t, cfg)
	p := connectPair(t, trS, trC, faults(1), faults(2))
	srvRec, c := p.srvRec, p.c

	small := fill(300, 1)
	big := fill(40<<10, 2)
	sendAll(t, c, 1, 0, n, func(i int) []byte {
		if i%250 == 0 {
			return big // rendezvous, replayed like any other frame
		}
		return small[:i%len(small)]
	})
	waitDelivered(t, srvRec, []uint32{1}, n, 120*time.Second, c)
	st := c.Stats()
	t.Logf("%d messages, %d faults, %d reconnects, %d replayed; client %+v", n, st.Faults, st.Reconnects, st.Replayed, st)
	if st.Faults == 0 || st.Reconnects == 0 {
		t.Fatalf("no faults were injected: %+v", st)
	}
	// Every receive buffer comes back: a shared pool that lost one to a
	// link that died under it would back fewer credits than it promised.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range []*msgr.Messenger{p.cli, p.srv} {
		if err := m.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, "server transport", trS)
	waitIdle(t, "client transport", trC)
}

// TestRDMABufSizeMismatch: each side tells the other the size of its
// receive buffers in the connection data, so a sender with larger buffers
// sends by rendezvous what the peer could not take inline. 30 KiB messages
// between 64 KiB and 16 KiB buffers all arrive, both ways, with no fault.
func TestRDMABufSizeMismatch(t *testing.T) {
	win := func(o *msgr.Options) { o.RecvWindowMsgs = 16 }
	p := connectPair(t, ownTransport(t, rdma.Config{BufSize: 16 << 10}), ownTransport(t, rdma.Config{BufSize: 64 << 10}), win, win)
	srvRec, c := p.srvRec, p.c
	const n = 20
	for i := range n {
		d := fill(30<<10, uint64(i))
		if err := c.Send(context.Background(), msgr.NewMessage(1, msgrtest.Payload(1, uint64(i), d), d)); err != nil {
			t.Fatal(err)
		}
	}
	msgrtest.Eventually(t, 20*time.Second, "all delivered", func() bool { return srvRec.Next(1) == n })
	if err := srvRec.Err(); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Faults != 0 {
		t.Fatalf("link faulted: %+v", st)
	}
}

// TestRDMASharedReceivePool connects three clients to one server over
// rdma+tcp, whose provider has a shared receive context: the server's
// receives come from one pool that holds exactly the sum of the sessions'
// windows (one credit, one posted buffer), every message arrives once and in
// order on its own session although all of them land in the same pool, and
// when the clients go and three new ones come, the pool serves them from the
// buffers it has: nothing more is registered.
func TestRDMASharedReceivePool(t *testing.T) {
	const (
		window  = 16
		clients = 3
		n       = 600
	)
	trS := ownTransport(t, rdma.Config{})
	win := func(o *msgr.Options) { o.RecvWindowMsgs = window }
	srvRec := msgrtest.NewRecorder(t)
	srv := tcpEnv.NewMessenger(t, "osd.0", srvRec, withTransport(trS, win))
	addr := tcpEnv.Listen(t, srv)

	round := func(first uint32) {
		var clis []*msgr.Messenger
		var wg sync.WaitGroup
		ids := make([]uint32, clients)
		for i := range clients {
			id := first + uint32(i)
			ids[i] = id
			cli := tcpEnv.NewMessenger(t, msgr.EntityName(fmt.Sprintf("osd.%d", id)), msgrtest.NewRecorder(t),
				withTransport(ownTransport(t, rdma.Config{}), win))
			clis = append(clis, cli)
			c := connect(t, cli, addr, "osd.0")
			wg.Add(1)
			go func() {
				defer wg.Done()
				small, big := fill(700, uint64(id)), fill(40<<10, uint64(id))
				sendAll(t, c, id, 0, n, func(i int) []byte {
					if i%50 == 0 {
						return big // rendezvous
					}
					return small[:i%len(small)]
				})
			}()
		}
		wg.Wait()
		waitDelivered(t, srvRec, ids, n, 60*time.Second, nil)
		if st := trS.Stats(); st.SharedRecvBufs != clients*window+st.ControlRecvs {
			t.Fatalf("shared pool of %d buffers for %d sessions of window %d: %+v", st.SharedRecvBufs, clients, window, st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, cli := range clis {
			if err := cli.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	round(1)
	waitIdle(t, "server transport after the first clients", trS)
	before := trS.Stats()
	round(1 + clients)
	waitIdle(t, "server transport after the second clients", trS)
	after := trS.Stats()
	if after.SharedRecvBufs != before.SharedRecvBufs || after.HighWaterBytes > before.HighWaterBytes+(8<<20) {
		t.Fatalf("the pool grew for the second clients: before %+v, after %+v", before, after)
	}
	if after.RecvsPosted != after.SharedRecvBufs || after.SharedRecvLost != 0 {
		t.Fatalf("%d of the pool's %d buffers posted after the sessions ended, %d lost to refused reposts",
			after.RecvsPosted, after.SharedRecvBufs, after.SharedRecvLost)
	}
}
