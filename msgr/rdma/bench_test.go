//go:build rdma

package rdma_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// streamSink releases each message and frees one in-flight slot.
type streamSink struct{ sem chan struct{} }

func (s streamSink) Dispatch(m *msgr.Message) {
	m.Release()
	<-s.sem
}
func (streamSink) HandleEvent(msgr.Event)      {}
func (streamSink) CanFastDispatch(uint16) bool { return true }

// BenchmarkRDMAThreshold streams payloads around the inline/rendezvous
// threshold over rdma+tcp for several buffer sizes (Config.BufSize is the
// threshold: a frame larger than the smaller side's buffers goes by
// rendezvous), with the payload copied into registered memory or sent from
// a Conn.AllocPayload buffer. docs/benchmarks.md has the figures and the
// choice of the 16 KiB default they support.
//
//	go test -tags rdma -run '^$' -bench RDMAThreshold -benchtime 2000x ./msgr/rdma/
func BenchmarkRDMAThreshold(b *testing.B) {
	const depth = 16
	for _, bufSize := range []int{4 << 10, 16 << 10, 64 << 10} {
		for _, size := range []int{2 << 10, 8 << 10, 14 << 10, 32 << 10, 60 << 10, 256 << 10, 1 << 20} {
			for _, zc := range []bool{false, true} {
				if zc && size+128 <= bufSize {
					continue // inline either way
				}
				name := fmt.Sprintf("buf=%dKiB/size=%dKiB/zerocopy=%v", bufSize>>10, size>>10, zc)
				b.Run(name, func(b *testing.B) { benchThreshold(b, bufSize, size, depth, zc, false) })
			}
		}
	}
}

// BenchmarkRDMAKnownDataCRC streams rendezvous payloads whose sender
// hands their CRC in (Message.SetDataCRC, as the OSD does from its store's
// chunk CRCs) against ones whose link computes it: the known CRC saves the
// sender a pass over the payload, the receiver still checks it, and
// neither costs an allocation.
//
//	go test -tags rdma -run '^$' -bench RDMAKnownDataCRC -benchtime 2000x -benchmem ./msgr/rdma/
func BenchmarkRDMAKnownDataCRC(b *testing.B) {
	for _, size := range []int{256 << 10, 1 << 20} {
		for _, known := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%dKiB/known=%v", size>>10, known), func(b *testing.B) {
				benchThreshold(b, 16<<10, size, 16, true, known)
			})
		}
	}
}

// benchThreshold streams size-byte payloads over links with bufSize
// buffers, depth in flight: sent from a Conn.AllocPayload buffer with
// zeroCopy, else copied; with knownCRC the sender hands their CRC in.
func benchThreshold(b *testing.B, bufSize, size, depth int, zeroCopy, knownCRC bool) {
	cfg := rdma.Config{BufSize: bufSize}
	trS, trC := ownTransport(b, cfg), ownTransport(b, cfg)
	sink := streamSink{sem: make(chan struct{}, depth)}
	srv := tcpEnv.NewMessenger(b, "osd.0", sink, withTransport(trS, nil))
	addr := tcpEnv.Listen(b, srv)
	cli := tcpEnv.NewMessenger(b, "osd.1", msgrtest.NewRecorder(b), withTransport(trC, nil))
	c := connect(b, cli, addr, "osd.0")
	payload, err := c.AllocPayload(size)
	if err != nil {
		b.Fatal(err)
	}
	defer payload.Release()
	// A message comes back when acked, which can be well after the
	// server handled it (acks batch), so the pool holds more than depth.
	front := make([]byte, 16)
	pool := make(chan *msgr.Message, 64*depth)
	for range cap(pool) {
		m := &msgr.Message{Type: 1, Front: front, Data: payload.B}
		m.OnRelease = func(m *msgr.Message) { pool <- m }
		pool <- m
	}
	crc := wire.CRC(payload.B)
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		sink.sem <- struct{}{}
		m := <-pool
		if zeroCopy {
			payload.Ref()
			m.SetPayload(payload)
		}
		if knownCRC {
			m.SetDataCRC(crc) // after SetPayload, which forgets a CRC
		}
		if err := c.Send(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	for range depth {
		sink.sem <- struct{}{}
	}
	b.StopTimer()
}
