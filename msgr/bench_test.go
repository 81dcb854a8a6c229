package msgr_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// Messenger benchmarks over loopback TCP, both ends in this process. They
// report allocations: the steady state must show 0 allocs/op.

type benchSink struct {
	sem   chan struct{} // stream: frees one in-flight slot per message
	reply func(*msgr.Message)
}

func (s *benchSink) Dispatch(m *msgr.Message) {
	if s.reply != nil {
		s.reply(m)
	}
	m.Release()
	if s.sem != nil {
		<-s.sem
	}
}
func (*benchSink) HandleEvent(msgr.Event)      {}
func (*benchSink) CanFastDispatch(uint16) bool { return true }

// msgPool is a free list of reusable outgoing messages.
type msgPool chan *msgr.Message

func newMsgPool(n, size int) msgPool {
	p := make(msgPool, n)
	front := make([]byte, 16)
	for range n {
		m := &msgr.Message{Type: 1, Front: front, Data: make([]byte, size)}
		m.OnRelease = func(m *msgr.Message) { p <- m }
		p <- m
	}
	return p
}

// newFrontPool is newMsgPool for messages that carry size bytes of front
// and no data: on TCP those are sliced out of the link's read chunk.
func newFrontPool(n, size int) msgPool {
	p := make(msgPool, n)
	front := make([]byte, size)
	for range n {
		m := &msgr.Message{Type: 1, Front: front}
		m.OnRelease = func(m *msgr.Message) { p <- m }
		p <- m
	}
	return p
}

// reportCPU reports the CPU time, both ends together, per message since
// cpu0: on a loaded machine a steadier figure than ns/op.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// benchPair connects two messengers on loopback, each given tweaks.
func benchPair(b *testing.B, srvD, cliD msgr.Dispatcher, tweaks ...func(*msgr.Options)) (*msgr.Messenger, *msgr.Messenger, *msgr.Conn) {
	b.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts := func(name msgr.EntityName, d msgr.Dispatcher) msgr.Options {
		o := msgr.Options{Name: name, Dispatcher: d, Logger: log, Transports: msgr.TCPOnly}
		for _, t := range tweaks {
			t(&o)
		}
		return o
	}
	srv, err := msgr.New(opts("osd.0", srvD))
	if err != nil {
		b.Fatal(err)
	}
	addr, err := srv.Listen(context.Background(), "tcp://127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	cli, err := msgr.New(opts("osd.1", cliD))
	if err != nil {
		b.Fatal(err)
	}
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		b.Fatal(err)
	}
	if err := c.WaitReady(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cli.Shutdown(ctx)
		srv.Shutdown(ctx)
	})
	return srv, cli, c
}

func BenchmarkStream(b *testing.B) { benchStream(b) }

// BenchmarkStreamSecure is BenchmarkStream in secure mode: every frame
// sealed and opened, still with no allocation per message.
func BenchmarkStreamSecure(b *testing.B) {
	ca := msgrtest.NewTestCA(b)
	benchStream(b, func(o *msgr.Options) {
		o.Auth = &msgr.AuthOptions{Keyring: ca.Keyring(b, o.Name), Modes: []msgr.Mode{msgr.ModeSecure}}
	})
}

// BenchmarkStreamChunkCRCs is BenchmarkStream with the receiver computing
// each data segment's 1 MiB chunk CRCs as it arrives, as an OSD's links
// do (Options.DataChunkCRC): still no allocation per message.
func BenchmarkStreamChunkCRCs(b *testing.B) {
	benchStream(b, func(o *msgr.Options) { o.DataChunkCRC = 1 << 20 })
}

func benchStream(b *testing.B, tweaks ...func(*msgr.Options)) {
	for _, tc := range []struct{ size, depth int }{{64, 128}, {4096, 128}, {1 << 20, 1}, {1 << 20, 16}} {
		b.Run(fmt.Sprintf("size=%d/depth=%d", tc.size, tc.depth), func(b *testing.B) {
			runStream(b, tc.depth, newMsgPool(4*tc.depth+64, tc.size), tc.size, tweaks...)
		})
	}
}

// BenchmarkStreamFront is BenchmarkStream with messages of a front and no
// data, which a TCP link hands out as slices of its read chunk.
// With its dispatch queued, the reader may run ahead of the dispatcher,
// and the frames in flight pin more of its chunks: copied/op is the share
// of fronts it copied out of them instead (docs/messenger.md §6).
func BenchmarkStreamFront(b *testing.B) {
	for _, tc := range []struct {
		size, depth int
		fast        bool
	}{{64, 128, true}, {4096, 128, true}, {4096, 128, false}} {
		name := fmt.Sprintf("size=%d/depth=%d", tc.size, tc.depth)
		if !tc.fast {
			name += "/queued"
		}
		b.Run(name, func(b *testing.B) {
			srv := runStreamTo(b, tc.fast, tc.depth, newFrontPool(4*tc.depth+64, tc.size), tc.size)
			var copied int64
			for c := range srv.Conns() {
				_, n := c.PinnedForTest()
				copied += n
			}
			b.ReportMetric(float64(copied)/float64(b.N), "copied/op")
		})
	}
}

// runStream sends pool's messages of size bytes with depth of them in
// flight at most, to a fast dispatcher.
func runStream(b *testing.B, depth int, pool msgPool, size int, tweaks ...func(*msgr.Options)) {
	runStreamTo(b, true, depth, pool, size, tweaks...)
}

// runStreamTo is runStream to a fast dispatcher or a queued one; it
// returns the receiving messenger.
func runStreamTo(b *testing.B, fast bool, depth int, pool msgPool, size int, tweaks ...func(*msgr.Options)) *msgr.Messenger {
	sink := &benchSink{sem: make(chan struct{}, depth)}
	srv, _, c := benchPair(b, wrapSink(sink, fast), &benchSink{}, tweaks...)
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		sink.sem <- struct{}{}
		if err := c.Send(ctx, <-pool); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu0)
	return srv
}

// queued hides a sink's CanFastDispatch: its messages go through the
// Conn's dispatch queue and goroutine.
type queued struct{ s *benchSink }

func (q queued) Dispatch(m *msgr.Message)  { q.s.Dispatch(m) }
func (q queued) HandleEvent(ev msgr.Event) { q.s.HandleEvent(ev) }
func wrapSink(s *benchSink, fast bool) msgr.Dispatcher {
	if fast {
		return s
	}
	return queued{s}
}

// BenchmarkPingPong: request and reply, fast-dispatched inline by the
// reader, or queued (the dispatch goroutine starts and ends with each).
func BenchmarkPingPong(b *testing.B) {
	for _, tc := range []struct {
		size int
		fast bool
	}{{64, true}, {4096, true}, {64, false}} {
		size := tc.size
		name := fmt.Sprintf("size=%d", size)
		if !tc.fast {
			name += "/queued"
		}
		b.Run(name, func(b *testing.B) {
			pongs := newMsgPool(64, size)
			srvSink := &benchSink{}
			srvSink.reply = func(m *msgr.Message) {
				if err := m.Conn().TrySend(<-pongs); err != nil {
					panic(err)
				}
			}
			got := make(chan struct{}, 1)
			cliSink := &benchSink{reply: func(*msgr.Message) { got <- struct{}{} }}
			_, _, c := benchPair(b, wrapSink(srvSink, tc.fast), wrapSink(cliSink, tc.fast))
			pings := newMsgPool(64, size)
			ctx := context.Background()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				if err := c.Send(ctx, <-pings); err != nil {
					b.Fatal(err)
				}
				<-got
			}
			reportCPU(b, cpu0)
		})
	}
}
