//go:build rdma

package rdma_test

// The large-object data path over RDMA, at parity with TCP and the mem
// transport (msgr/datasegment_test.go): a received rendezvous payload lies
// on a wire.DataAlign boundary, every received data segment carries the
// CRC its link verified (Message.DataCRC), and a CRC the sender handed in
// (Message.SetDataCRC) is what goes on the wire, so a wrong one is refused
// by the receiver.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

// rdvBufSize is the transports' BufSize here: a frame above it goes by
// rendezvous.
const rdvBufSize = 16 << 10

// goesByRendezvous reports whether a message of front and data bytes
// leaves a link with rdvBufSize buffers by rendezvous.
func goesByRendezvous(front, data int) bool {
	return wire.PreambleSize+front+data+wire.EpilogueSize > rdvBufSize
}

// dialData starts a server messenger on its own transport with cfg that
// dispatches to d, and returns a client session to it on another.
// srvOpt and cliOpt, when not nil, set more options on each side.
func dialData(t *testing.T, cfg rdma.Config, d msgr.Dispatcher, srvOpt, cliOpt func(*msgr.Options)) (c *msgr.Conn, trS, trC *rdma.Transport) {
	t.Helper()
	trS, trC = ownTransport(t, cfg), ownTransport(t, cfg)
	srv := tcpEnv.NewMessenger(t, "osd.0", d, withTransport(trS, srvOpt))
	addr := tcpEnv.Listen(t, srv)
	cli := tcpEnv.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), withTransport(trC, cliOpt))
	return connect(t, cli, addr, "osd.0"), trS, trC
}

// TestRDMAReceivedDataAlignedAndChecked sends payloads from 1 byte to
// 8 MiB, with fronts of 0, 16 and 4097 bytes, each once with the CRC
// handed in and once without: every one arrives intact with
// Message.DataCRC known and equal to the CRC32C of its data, and every
// rendezvous payload starts on a 4096-byte boundary, read or written, so
// the OSD's store can write it with O_DIRECT without a bounce copy.
// Inline payloads (at most 16 KiB, in a posted receive buffer) need not be
// aligned (link.frameFrom says why) and are not checked for it.
func TestRDMAReceivedDataAlignedAndChecked(t *testing.T) {
	eachRendezvous(t, testReceivedDataAlignedAndChecked)
}

func testReceivedDataAlignedAndChecked(t *testing.T, mode rdma.RendezvousMode) {
	dc := &msgrtest.DataCheck{Aligned: goesByRendezvous, CRC: true, Wait: 60 * time.Second}
	sizes := []int{1, 100, 4096, rdvBufSize - 100, rdvBufSize + 1, 64 << 10, 1 << 20, 4 << 20, 4<<20 + 1, 8 << 20}
	fronts := []int{0, 16, 4097}
	rdv := 0
	for i, size := range sizes {
		d := fill(size, uint64(i))
		for j := range 2 {
			f := bytes.Repeat([]byte{byte('a' + i)}, fronts[(i+j)%len(fronts)])
			dc.Sent = append(dc.Sent, msgrtest.Sent{Front: f, Data: d})
			if goesByRendezvous(len(f), len(d)) {
				rdv++
			}
		}
	}
	c, trS, trC := dialData(t, rdma.Config{BufSize: rdvBufSize, Rendezvous: mode}, dc.Dispatcher(), nil, nil)
	dc.Run(t, c)
	// The big ones did go by rendezvous, the way mode says.
	checkMoved(t, mode, trC, trS, uint64(rdv))
}

// TestRDMANoDataCRCReceivedUnknown: a sender with DisableDataCRC (agreed
// by the peer) sends no data CRC, even one handed in, so its receiver
// does not claim one, inline or by rendezvous.
func TestRDMANoDataCRCReceivedUnknown(t *testing.T) {
	got := make(chan bool, 2)
	c, _, _ := dialData(t, rdma.Config{BufSize: rdvBufSize}, msgr.DispatchFunc(func(m *msgr.Message) {
		_, ok := m.DataCRC()
		m.Release()
		got <- ok
	}), nil, func(o *msgr.Options) { o.DisableDataCRC = true })
	for i, size := range []int{5000, 100 << 10} {
		d := fill(size, uint64(i))
		m := msgr.NewMessage(1, nil, d)
		m.SetDataCRC(wire.CRC(d))
		if err := c.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		select {
		case ok := <-got:
			if ok {
				t.Fatalf("a message of %d bytes sent without a data CRC arrived claiming one", size)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("not delivered; %s", c)
		}
	}
}

// crcRefusals is a slog handler that counts the messenger's "bad input"
// lines whose error is a CRC mismatch: the receiver's reason for ending a
// link.
type crcRefusals struct{ n *atomic.Int64 }

func (h crcRefusals) Enabled(context.Context, slog.Level) bool { return true }
func (h crcRefusals) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h crcRefusals) WithGroup(string) slog.Handler            { return h }
func (h crcRefusals) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && errors.Is(err, wire.ErrCRC) {
			h.n.Add(1)
		}
		return true
	})
	return nil
}

// TestRDMAWrongDataCRCRefused: a wrong CRC handed in with SetDataCRC goes
// on the wire as given, so the receiver refuses the frame as corrupt (a
// CRC error ends the link; no panic, nothing delivered). The lossless
// session replays it with the same wrong CRC and is refused again, so
// neither it nor what was sent after it is ever delivered; what went
// before arrives once. Inline, and by rendezvous in both modes (the CRC
// is checked in different places for the two), and with the receiver
// computing chunk CRCs (Options.DataChunkCRC), which the CRC is then
// checked from.
func TestRDMAWrongDataCRCRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int
		mode  rdma.RendezvousMode
		chunk int
	}{
		{"inline", 10 << 10, rdma.RendezvousRead, 0},
		{"read", 100 << 10, rdma.RendezvousRead, 0},
		{"write", 100 << 10, rdma.RendezvousWrite, 0},
		{"read-chunks", 100 << 10, rdma.RendezvousRead, 32 << 10},
		{"write-chunks", 100 << 10, rdma.RendezvousWrite, 32 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var delivered, refusals atomic.Int64
			var bad atomic.Bool
			logTo := func(o *msgr.Options) { o.Logger, o.DataChunkCRC = slog.New(crcRefusals{&refusals}), tc.chunk }
			c, _, _ := dialData(t, rdma.Config{BufSize: rdvBufSize, Rendezvous: tc.mode}, msgr.DispatchFunc(func(m *msgr.Message) {
				if m.Type != 1 {
					bad.Store(true)
				}
				delivered.Add(1)
				m.Release()
			}), logTo, nil)
			send := func(typ uint16, size int, crc func([]byte) uint32) {
				t.Helper()
				d := fill(size, uint64(typ))
				m := msgr.NewMessage(typ, nil, d)
				m.SetDataCRC(crc(d))
				if err := c.Send(context.Background(), m); err != nil {
					t.Fatal(err)
				}
			}
			send(1, tc.size, wire.CRC)
			msgrtest.Eventually(t, 10*time.Second, "the good message delivered", func() bool { return delivered.Load() == 1 })
			send(2, tc.size, func(d []byte) uint32 { return wire.CRC(d) ^ 0x80 })
			send(3, 10, wire.CRC)
			msgrtest.EventuallyDescribed(t, 20*time.Second, func() string {
				return fmt.Sprintf("%d CRC refusals logged by the receiver; %s", refusals.Load(), c)
			}, func() bool {
				st := c.Stats()
				return st.Faults >= 3 && st.Replayed >= 2 && refusals.Load() >= 1
			})
			if n := delivered.Load(); n != 1 || bad.Load() {
				t.Fatalf("%d messages delivered (one refused delivered: %v); want only the first", n, bad.Load())
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRDMAKeepData: data kept past its message's release (KeepData) never
// holds a posted receive: an inline payload, which lies in a receive
// buffer, is copied out, so the receiver's receives are all posted again
// while more inline payloads than its window are kept; a rendezvous
// payload is kept where it was received, in its registered buffer, which
// goes back to the transport when the kept data is released.
func TestRDMAKeepData(t *testing.T) {
	const window, n = 8, 24
	type kept struct {
		buf     *wire.Buffer
		data    []byte
		inPlace bool
	}
	got := make(chan kept, 2*n)
	c, trS, _ := dialData(t, rdma.Config{BufSize: rdvBufSize}, msgr.DispatchFunc(func(m *msgr.Message) {
		buf, data := m.KeepData()
		k := kept{buf: buf, data: data, inPlace: unsafe.SliceData(data) == unsafe.SliceData(m.Data)}
		m.Release()
		got <- k
	}), func(o *msgr.Options) { o.RecvWindowMsgs = window }, nil)
	posted := trS.Stats().RecvsPosted
	sizes := []int{100, rdvBufSize - 200, 64 << 10, 1<<20 + 3}
	var keep []kept
	for i := range 2 * n {
		size := sizes[i%len(sizes)]
		if err := c.Send(context.Background(), msgr.NewMessage(1, nil, fill(size, uint64(i)))); err != nil {
			t.Fatal(err)
		}
		select {
		case k := <-got:
			keep = append(keep, k)
		case <-time.After(30 * time.Second):
			t.Fatalf("message %d not delivered with %d kept (window %d); %s", i, len(keep), window, c)
		}
	}
	// At least as many as before: one may have been out for the handshake
	// then (a repost can be lazy), none may be held by kept data now.
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string {
		return fmt.Sprintf("%d receives posted with the data kept, %d before", trS.Stats().RecvsPosted, posted)
	}, func() bool { return trS.Stats().RecvsPosted >= posted })
	rdv := 0
	for i, k := range keep {
		size := sizes[i%len(sizes)]
		if !bytes.Equal(k.data, fill(size, uint64(i))) {
			t.Errorf("message %d, %d bytes: kept data differs", i, size)
		}
		if byRdv := goesByRendezvous(0, size); byRdv != k.inPlace {
			t.Errorf("message %d, %d bytes (rendezvous %v): kept in place %v", i, size, byRdv, k.inPlace)
		} else if byRdv {
			rdv++
		}
	}
	if in := trS.Stats().BuffersInUse; in != int64(rdv) {
		t.Errorf("%d rendezvous buffers in use with %d rendezvous payloads kept", in, rdv)
	}
	for _, k := range keep {
		k.buf.Release()
	}
	if in := trS.Stats().BuffersInUse; in != 0 {
		t.Errorf("%d rendezvous buffers in use after the kept data was released", in)
	}
}
