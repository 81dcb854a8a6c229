package msgr_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
)

// sourceCRCSizes: inline, and on RDMA by rendezvous.
var sourceCRCSizes = []int{100, 256 << 10}

// TestSourceCRCDelivered: testSourceCRC over TCP and the in-memory
// transport, in crc mode and (no data CRC at all) in secure mode.
func TestSourceCRCDelivered(t *testing.T) {
	for _, env := range []msgrtest.Env{tcpEnv, {Scheme: "mem", Transports: memTransports()}} {
		t.Run(env.Scheme, func(t *testing.T) { testSourceCRC(t, env, false) })
	}
	t.Run("tcp-secure", func(t *testing.T) {
		testSourceCRC(t, msgrtest.WithSecure(t, tcpEnv, msgrtest.NewTestCA(t)), true)
	})
}

// testSourceCRC: a message sent with a wrong source CRC (SetSourceCRC),
// then one with the right one, for each of sourceCRCSizes, are each
// delivered once, in order, with the bytes sent: a wrong claim is the
// receiver's to judge, not a corrupt frame. In crc mode the receiver's
// DataCRC is the CRC32C of the bytes and SourceCRCMismatches counts the
// wrong claims; in secure mode, whose sealed frames carry no data CRC,
// DataCRC is unknown. No link faults on either side.
func testSourceCRC(t *testing.T, env msgrtest.Env, secure bool) {
	type got struct {
		typ   uint16
		data  []byte
		crc   uint32
		crcOK bool
		conn  *msgr.Conn
	}
	var mu sync.Mutex
	var gots []got
	c := dialTo(t, env, msgr.DispatchFunc(func(m *msgr.Message) {
		crc, ok := m.DataCRC()
		mu.Lock()
		gots = append(gots, got{m.Type, bytes.Clone(m.Data), crc, ok, m.Conn()})
		mu.Unlock()
		m.Release()
	}), nil)
	var sent [][]byte
	for i, size := range sourceCRCSizes {
		for _, wrong := range []bool{true, false} {
			d := dataOf(size, len(sent))
			claim := wire.CRC(d)
			if wrong {
				claim ^= 0x5a
			}
			m := msgr.NewMessage(uint16(len(sent)+1), []byte("front"), d)
			m.SetSourceCRC(claim)
			if err := c.Send(context.Background(), m); err != nil {
				t.Fatalf("size %d (%d), wrong %v: %v", size, i, wrong, err)
			}
			sent = append(sent, d)
		}
	}
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(gots)
	}
	msgrtest.EventuallyDescribed(t, 20*time.Second, c.String, func() bool { return delivered() == len(sent) })
	mu.Lock()
	defer mu.Unlock()
	for i, g := range gots {
		want := wire.CRC(sent[i])
		switch {
		case g.typ != uint16(i+1) || !bytes.Equal(g.data, sent[i]):
			t.Fatalf("message %d: type %d, %d bytes; want type %d and the %d bytes sent", i, g.typ, len(g.data), i+1, len(sent[i]))
		case secure && g.crcOK:
			t.Fatalf("message %d: secure mode, but the receiver knows a data CRC %08x", i, g.crc)
		case !secure && (!g.crcOK || g.crc != want):
			t.Fatalf("message %d: received data CRC %08x %v, want that of the data, %08x", i, g.crc, g.crcOK, want)
		}
	}
	wantMismatches := uint64(len(sourceCRCSizes))
	if secure {
		wantMismatches = 0
	}
	st, rst := c.Stats(), gots[0].conn.Stats()
	if rst.SourceCRCMismatches != wantMismatches || st.SourceCRCMismatches != 0 {
		t.Fatalf("source CRC mismatches: %d on the receiver (want %d), %d on the sender", rst.SourceCRCMismatches, wantMismatches, st.SourceCRCMismatches)
	}
	if st.Faults+st.Reconnects+rst.Faults+rst.Reconnects != 0 || rst.MsgsReceived != uint64(len(sent)) {
		t.Fatalf("sender %d faults, %d reconnects; receiver %d faults, %d reconnects, %d messages received (want %d)",
			st.Faults, st.Reconnects, rst.Faults, rst.Reconnects, rst.MsgsReceived, len(sent))
	}
}

// TestSourceCRCUnknownToSender: a source's CRC is a claim, not known to
// be the data's: the message does not report it as its DataCRC, and
// SetDataCRC after it makes it a promise again.
func TestSourceCRCUnknownToSender(t *testing.T) {
	d := dataOf(100, 1)
	m := msgr.NewMessage(1, nil, d)
	defer m.Release()
	m.SetSourceCRC(wire.CRC(d))
	if crc, ok := m.DataCRC(); ok {
		t.Fatalf("a message with a source CRC reports DataCRC %08x", crc)
	}
	m.SetDataCRC(wire.CRC(d))
	if crc, ok := m.DataCRC(); !ok || crc != wire.CRC(d) {
		t.Fatalf("after SetDataCRC: DataCRC %08x %v", crc, ok)
	}
}
