//go:build rdma

package rdma_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// mappedRanges reads the address ranges of /proc/self/maps.
func mappedRanges(t testing.TB) [][2]uintptr {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	var rs [][2]uintptr
	for _, line := range strings.Split(string(b), "\n") {
		lo, hi, ok := strings.Cut(strings.Fields(line + " x")[0], "-")
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		z, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil {
			rs = append(rs, [2]uintptr{uintptr(a), uintptr(z)})
		}
	}
	return rs
}

func isMapped(rs [][2]uintptr, p uintptr) bool {
	for _, r := range rs {
		if p >= r[0] && p < r[1] {
			return true
		}
	}
	return false
}

// TestRDMANoRegisteredMemoryLeak runs inline and rendezvous traffic both
// ways, shuts both messengers down and checks that nothing registered is
// left: no rendezvous buffer handed out, no receive posted, and after the
// transports close, the memory the received payloads lived in (receive
// buffers and rendezvous destinations, mmap'd outside the Go heap) is
// unmapped. Stats alone cannot show the last part: a closed transport has
// no domains left to count. Goroutines return to where they were.
func TestRDMANoRegisteredMemoryLeak(t *testing.T) { eachRendezvous(t, testNoRegisteredMemoryLeak) }

func testNoRegisteredMemoryLeak(t *testing.T, mode rdma.RendezvousMode) {
	before := runtime.NumGoroutine()
	trS := rdma.NewTransport("tcp", rdma.Config{Rendezvous: mode})
	trC := rdma.NewTransport("tcp", rdma.Config{Rendezvous: mode})
	closed := false
	defer func() {
		if !closed {
			trS.Close()
			trC.Close()
		}
	}()

	// Where received payloads live: one address per buffer is enough.
	var mu sync.Mutex
	seen := map[uintptr]bool{}
	sample := func(m *msgr.Message) bool {
		if len(m.Data) > 0 {
			mu.Lock()
			seen[uintptr(unsafe.Pointer(unsafe.SliceData(m.Data)))] = true
			mu.Unlock()
		}
		return false // the recorder checks and releases it
	}
	srvRec, cliRec := msgrtest.NewRecorder(t), msgrtest.NewRecorder(t)
	srvRec.OnMsg, cliRec.OnMsg = sample, sample
	opts := func(name msgr.EntityName, d msgr.Dispatcher, tr *rdma.Transport) msgr.Options {
		return msgr.Options{
			Name: name, Dispatcher: d, RecvWindowMsgs: 16,
			Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
			Transports: []wire.Transport{tr},
		}
	}
	srv, err := msgr.New(opts("osd.0", srvRec, trS))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen(context.Background(), "rdma+tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := msgr.New(opts("osd.1", cliRec, trC))
	if err != nil {
		t.Fatal(err)
	}
	shutdown := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cli.Shutdown(ctx); err != nil {
			t.Errorf("client shutdown: %v", err)
		}
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
	}
	defer shutdown() // a no-op after the explicit one
	c := connect(t, cli, addr, "osd.0")
	sc := onlyConn(t, srv)

	const n = 2000
	small := fill(8000, 1)
	big := fill(3<<20, 2)
	data := func(i int) []byte {
		if i%100 == 0 {
			return big[:256<<10+i*97] // rendezvous
		}
		return small[:i%len(small)] // inline
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); sendAll(t, c, 1, 0, n, data) }()
	go func() { defer wg.Done(); sendAll(t, sc, 2, 0, n, data) }()
	wg.Wait()
	waitDelivered(t, srvRec, []uint32{1}, n, 60*time.Second, c)
	waitDelivered(t, cliRec, []uint32{2}, n, 60*time.Second, sc)

	live := mappedRanges(t)
	mu.Lock()
	addrs := make([]uintptr, 0, len(seen))
	for p := range seen {
		if isMapped(live, p) {
			addrs = append(addrs, p)
		}
	}
	mu.Unlock()
	if len(addrs) == 0 {
		t.Fatal("no received payload address is mapped: the sampling is broken")
	}
	for _, tr := range []*rdma.Transport{trS, trC} {
		if st := tr.Stats(); st.RegisteredBytes == 0 || st.RecvsPosted == 0 {
			t.Fatalf("transport counters idle while a session is up: %+v", st)
		}
	}

	shutdown()
	waitIdle(t, "server transport", trS)
	waitIdle(t, "client transport", trC)
	trS.Close()
	trC.Close()
	closed = true
	for i, tr := range []*rdma.Transport{trS, trC} {
		if st := tr.Stats(); st.RegisteredBytes != 0 {
			t.Fatalf("transport %d: %d bytes registered after Close", i, st.RegisteredBytes)
		}
	}
	after := mappedRanges(t)
	var still []string
	for _, p := range addrs {
		if isMapped(after, p) {
			still = append(still, fmt.Sprintf("%#x", p))
		}
	}
	if len(still) > 0 {
		t.Fatalf("%d of %d sampled registered buffers still mapped after Close: %v", len(still), len(addrs), still)
	}
	msgrtest.Eventually(t, 10*time.Second, fmt.Sprintf("goroutines back to %d", before), func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// holder keeps every message it gets on ch, unreleased.
type holder chan *msgr.Message

func (h holder) Dispatch(m *msgr.Message) { h <- m }
func (holder) HandleEvent(msgr.Event)     {}

// TestRendezvousBufferFitsPayloadAndFront: a 4 MiB payload and its front
// take a rendezvous buffer of 4.5 MiB at each end, not the next power of
// two: every real message has a front, so the power-of-two classes
// registered twice what a 4 MiB put moves, and a budget ran out at half
// the load it was sized for.
func TestRendezvousBufferFitsPayloadAndFront(t *testing.T) {
	eachRendezvous(t, func(t *testing.T, mode rdma.RendezvousMode) {
		trS, trC := ownTransport(t, rdma.Config{Rendezvous: mode}), ownTransport(t, rdma.Config{Rendezvous: mode})
		held := make(holder, 4)
		srv := tcpEnv.NewMessenger(t, "osd.0", held, withTransport(trS, nil))
		addr := tcpEnv.Listen(t, srv)
		cli := tcpEnv.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), withTransport(trC, nil))
		c := connect(t, cli, addr, "osd.0")
		send := func(size int) *msgr.Message {
			t.Helper()
			if err := c.Send(context.Background(), msgr.NewMessage(1, make([]byte, 100), make([]byte, size))); err != nil {
				t.Fatal(err)
			}
			select {
			case m := <-held:
				return m
			case <-time.After(20 * time.Second):
				t.Fatal("the message never arrived")
				return nil
			}
		}
		// A first rendezvous sets up what every later one uses.
		send(256 << 10).Release()
		beforeS, beforeC := trS.Stats().RegisteredBytes, trC.Stats().RegisteredBytes
		const size = 4 << 20
		defer send(size).Release()
		const most = size + size/8
		if grew := trS.Stats().RegisteredBytes - beforeS; grew > most {
			t.Errorf("the receiver registered %d bytes more for a %d-byte payload and a 100-byte front, want at most %d", grew, size, most)
		}
		if grew := trC.Stats().RegisteredBytes - beforeC; grew > most {
			t.Errorf("the sender registered %d bytes more, want at most %d", grew, most)
		}
	})
}
