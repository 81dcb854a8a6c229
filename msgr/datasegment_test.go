package msgr_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
)

// dataSizes span 1 B to 8 MiB: the stream link's small frames (copied out
// of its read chunk) and large ones (read into a buffer of their own, which
// grows above 8 MiB), each side of the thresholds.
var dataSizes = []int{1, 100, 4095, 4096, 4097, 60 << 10, 64 << 10, 100 << 10, 1 << 20, 4 << 20, 4<<20 + 1, 8 << 20}

func dataOf(size, seed int) []byte {
	b := make([]byte, size)
	rng := rand.New(rand.NewPCG(uint64(size), uint64(seed)))
	for i := range b {
		// Not periodic: bytes put in the wrong place show.
		b[i] = byte(rng.Uint32())
	}
	return b
}

// dialTo starts a messenger osd.0 on env that dispatches to d, and
// returns osd.1's Conn to it (osd.1's options adjusted by tweak).
func dialTo(t *testing.T, env msgrtest.Env, d msgr.Dispatcher, tweak func(*msgr.Options)) *msgr.Conn {
	t.Helper()
	addr := env.Listen(t, env.NewMessenger(t, "osd.0", d, nil))
	cli := env.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), tweak)
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReceivedDataAlignedAndChecked: over TCP and the in-memory transport,
// a received message's data starts on a 4096-byte boundary (so the OSD's
// store writes it with O_DIRECT and no bounce copy) for every size, holds
// the bytes sent, and carries the CRC32C its link verified, whether the
// sender handed the CRC in (SetDataCRC) or its link computed it.
func TestReceivedDataAlignedAndChecked(t *testing.T) {
	for _, env := range []msgrtest.Env{tcpEnv, {Scheme: "mem", Transports: memTransports()}} {
		t.Run(env.Scheme, func(t *testing.T) {
			dc := &msgrtest.DataCheck{CRC: true, Wait: 30 * time.Second, Aligned: func(int, int) bool { return true }}
			for i, size := range dataSizes {
				d := dataOf(size, i)
				for range 2 {
					dc.Sent = append(dc.Sent, msgrtest.Sent{Front: fmt.Appendf(nil, "front %d", len(dc.Sent)), Data: d})
				}
			}
			dc.Run(t, dialTo(t, env, dc.Dispatcher(), nil))
		})
	}
}

// TestNoDataCRCReceivedUnknown: a sender with DisableDataCRC sends no data
// CRC (even one handed in), so its receiver does not claim one.
func TestNoDataCRCReceivedUnknown(t *testing.T) {
	got := make(chan bool, 1)
	c := dialTo(t, tcpEnv, msgr.DispatchFunc(func(m *msgr.Message) {
		_, ok := m.DataCRC()
		m.Release()
		got <- ok
	}), func(o *msgr.Options) { o.DisableDataCRC = true })
	d := dataOf(5000, 1)
	m := msgr.NewMessage(1, nil, d)
	m.SetDataCRC(wire.CRC(d))
	if err := c.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if <-got {
		t.Fatal("a message sent without a data CRC arrived claiming one")
	}
}

// TestWrongDataCRCRefused: a wrong CRC handed in with SetDataCRC makes the
// receiver refuse the frame as corrupt: the link faults (no panic, nothing
// delivered), the lossless session replays the message, with the same
// wrong CRC, and is refused again, so neither it nor what was sent after
// it is ever delivered, exactly as for a frame corrupted on the wire.
// What went before it arrives once; Close ends the session cleanly.
func TestWrongDataCRCRefused(t *testing.T) {
	for _, env := range []msgrtest.Env{tcpEnv, {Scheme: "mem", Transports: memTransports()}} {
		t.Run(env.Scheme, func(t *testing.T) {
			var delivered atomic.Int64
			var bad atomic.Bool
			c := dialTo(t, env, msgr.DispatchFunc(func(m *msgr.Message) {
				if m.Type != 1 {
					bad.Store(true)
				}
				delivered.Add(1)
				m.Release()
			}), nil)
			send := func(typ uint16, size int, crc func([]byte) uint32) {
				t.Helper()
				d := dataOf(size, int(typ))
				m := msgr.NewMessage(typ, nil, d)
				m.SetDataCRC(crc(d))
				if err := c.Send(context.Background(), m); err != nil {
					t.Fatal(err)
				}
			}
			send(1, 100<<10, wire.CRC)
			msgrtest.Eventually(t, 10*time.Second, "the good message delivered", func() bool { return delivered.Load() == 1 })
			send(2, 100<<10, func(d []byte) uint32 { return wire.CRC(d) ^ 0x80 })
			send(3, 10, wire.CRC)
			msgrtest.EventuallyDescribed(t, 20*time.Second, c.String, func() bool {
				st := c.Stats()
				return st.Faults >= 3 && st.Replayed >= 2
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

// TestDataCRCBoundToData: the CRC a message knows holds for the slice it
// was given for: a message whose Data is replaced does not send it.
func TestDataCRCBoundToData(t *testing.T) {
	d := dataOf(100, 1)
	m := msgr.NewMessage(1, nil, d)
	defer m.Release()
	if _, ok := m.DataCRC(); ok {
		t.Fatal("a new message claims a data CRC")
	}
	m.SetDataCRC(0x1234)
	if crc, ok := m.DataCRC(); !ok || crc != 0x1234 {
		t.Fatalf("DataCRC %08x, %v after SetDataCRC(0x1234)", crc, ok)
	}
	m.Data = d[1:]
	if _, ok := m.DataCRC(); ok {
		t.Fatal("the CRC outlived the Data it was set for (shorter slice)")
	}
	m.Data = bytes.Clone(d)
	if _, ok := m.DataCRC(); ok {
		t.Fatal("the CRC outlived the Data it was set for (other bytes)")
	}
	m.Data = d
	if _, ok := m.DataCRC(); !ok {
		t.Fatal("the CRC was lost with its Data back")
	}
	m.SetPayload(wire.GetBuffer(100))
	if _, ok := m.DataCRC(); ok {
		t.Fatal("the CRC outlived SetPayload")
	}
}

// TestDataCRCForOneSend: the CRC handed in holds for one Send; a message
// its owner gets back through OnRelease (to reuse with other bytes in the
// same slice) no longer claims it.
func TestDataCRCForOneSend(t *testing.T) {
	env := msgrtest.Env{Scheme: "mem", Transports: memTransports()}
	c := dialTo(t, env, msgr.DispatchFunc(func(m *msgr.Message) { m.Release() }), nil)
	back := make(chan *msgr.Message, 1)
	d := dataOf(1000, 2)
	m := &msgr.Message{Type: 1, Data: d, OnRelease: func(m *msgr.Message) { back <- m }}
	m.SetDataCRC(wire.CRC(d))
	if err := c.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if _, ok := (<-back).DataCRC(); ok {
		t.Fatal("a message back from the messenger still claims the CRC of its last Send")
	}
}

// TestDataChunkCRCs: a messenger with DataChunkCRC hands over, with each
// large message, its data's CRC32Cs in chunks of that size, computed as
// the bytes arrived, whether the sender sent a data CRC or not; for
// another chunk size, or once Data is another slice, it has none.
func TestDataChunkCRCs(t *testing.T) { testDataChunkCRCs(t, tcpEnv) }

func testDataChunkCRCs(t *testing.T, env msgrtest.Env) {
	const chunk = 1 << 20
	type got struct {
		size  int
		crcs  []uint32
		ok    bool
		other bool // chunks claimed for another size or slice
	}
	out := make(chan got, 8)
	srv := env.NewMessenger(t, "osd.0", msgr.DispatchFunc(func(m *msgr.Message) {
		defer m.Release()
		crcs, ok := m.DataChunkCRCs(chunk)
		_, other := m.DataChunkCRCs(chunk / 2)
		data := m.Data
		m.Data = m.Data[:len(m.Data)-1]
		_, cut := m.DataChunkCRCs(chunk)
		m.Data = data
		out <- got{len(m.Data), slices.Clone(crcs), ok, other || cut}
	}), func(o *msgr.Options) { o.DataChunkCRC = chunk })
	addr := env.Listen(t, srv)
	for j, noCRC := range []bool{false, true} {
		name := msgr.EntityName(fmt.Sprintf("osd.%d", j+1))
		cli := env.NewMessenger(t, name, msgrtest.NewRecorder(t), func(o *msgr.Options) { o.DisableDataCRC = noCRC })
		c, err := cli.Connect(context.Background(), addr, "osd.0")
		if err != nil {
			t.Fatal(err)
		}
		for i, size := range []int{100 << 10, chunk, 4<<20 + 1} {
			d := dataOf(size, i)
			if err := c.Send(context.Background(), msgr.NewMessage(1, nil, d)); err != nil {
				t.Fatal(err)
			}
			var g got
			select {
			case g = <-out:
			case <-time.After(30 * time.Second):
				t.Fatalf("not delivered; %s", c)
			}
			var want []uint32
			for o := 0; o < size; o += chunk {
				want = append(want, wire.CRC(d[o:min(o+chunk, size)]))
			}
			if !g.ok || !slices.Equal(g.crcs, want) || g.other {
				t.Fatalf("no data crc %v, %d bytes: chunk crcs %x, %v (want %x); claimed for another size or slice: %v", noCRC, size, g.crcs, g.ok, want, g.other)
			}
		}
	}
}
