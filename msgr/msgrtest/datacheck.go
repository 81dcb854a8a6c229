package msgrtest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/wire"
)

// DataCheck sends messages over a fresh session and checks each one the
// receiver got: the front and data sent, data on a wire.DataAlign
// boundary where the link promises it, and the CRC32C its link verified.
// The transports' data-path tests (stream, RDMA, secure mode) share it, so
// each holds its link to the same account.
type DataCheck struct {
	// Sent are the messages in order; message i arrives as Seq i+1.
	Sent []Sent
	// Aligned reports whether a message of front and data bytes must
	// arrive aligned; nil: none must.
	Aligned func(front, data int) bool
	// CRC: every odd message carries its CRC from the sender
	// (SetDataCRC), the rest leave it to the link, and every one must
	// arrive with Message.DataCRC known and right.
	CRC bool
	// Wait bounds the wait for each delivery.
	Wait time.Duration

	got chan delivered
}

// Sent is a message DataCheck sends.
type Sent struct{ Front, Data []byte }

type delivered struct {
	seq   uint64
	addr  uintptr
	same  bool // the front and data sent
	crc   uint32
	crcOK bool
}

// Dispatcher is the receiver's: it records each message and releases it.
func (dc *DataCheck) Dispatcher() msgr.Dispatcher {
	dc.got = make(chan delivered, len(dc.Sent))
	return msgr.DispatchFunc(func(m *msgr.Message) {
		defer m.Release()
		d := delivered{seq: m.Seq(), addr: uintptr(unsafe.Pointer(unsafe.SliceData(m.Data)))}
		if i := m.Seq() - 1; i < uint64(len(dc.Sent)) {
			d.same = bytes.Equal(m.Front, dc.Sent[i].Front) && bytes.Equal(m.Data, dc.Sent[i].Data)
		}
		d.crc, d.crcOK = m.DataCRC()
		dc.got <- d
	})
}

// Run sends every message on c, whose peer dispatches to Dispatcher, and
// checks each delivery.
func (dc *DataCheck) Run(t testing.TB, c *msgr.Conn) {
	t.Helper()
	for i, s := range dc.Sent {
		m := msgr.NewMessage(1, s.Front, s.Data)
		if dc.CRC && i%2 == 1 {
			m.SetDataCRC(wire.CRC(s.Data))
		}
		if err := c.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	for range dc.Sent {
		var r delivered
		select {
		case r = <-dc.got:
		case <-time.After(dc.Wait):
			t.Fatalf("not all delivered; %s", c)
		}
		if r.seq == 0 || r.seq > uint64(len(dc.Sent)) {
			t.Fatalf("delivered seq %d of %d sent", r.seq, len(dc.Sent))
		}
		s := dc.Sent[r.seq-1]
		what := fmt.Sprintf("message %d (front %d, data %d)", r.seq, len(s.Front), len(s.Data))
		if !r.same {
			t.Errorf("%s: front or data differs", what)
		}
		if dc.Aligned != nil && dc.Aligned(len(s.Front), len(s.Data)) && r.addr%wire.DataAlign != 0 {
			t.Errorf("%s: data at %#x, not on a %d-byte boundary", what, r.addr, wire.DataAlign)
		}
		if want := wire.CRC(s.Data); dc.CRC && (!r.crcOK || r.crc != want) {
			t.Errorf("%s: DataCRC %08x, %v; want %08x, true", what, r.crc, r.crcOK, want)
		}
	}
}
