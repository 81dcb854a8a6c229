package msgr

import (
	"sync"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/internal/invariants"
	"github.com/ospreystore/osprey/msgr/wire"
	"google.golang.org/protobuf/proto"
)

// Message is what the messenger carries: a type, a protobuf-encoded front
// (the op) and an optional data payload (bulk bytes).
//
// Ownership moves with the message, as with Ceph's refcounted messages:
//   - Send takes ownership of an outgoing message when it returns nil. The
//     messenger reads Front and Data until it no longer needs them (acked by
//     the peer, or dropped by a reset or close) and then calls OnRelease, or returns a message
//     from NewMessage to the pool. Do not touch the slices until then.
//   - A received message belongs to the Dispatcher, which must call Release
//     exactly once when done with it. Front and Data point into the
//     messenger's receive buffers and are invalid after Release. Release
//     also returns the receive credit: a dispatcher that holds messages
//     makes the sender wait, which is the back-pressure.
type Message struct {
	Type  uint16
	Front []byte
	Data  []byte
	// OnRelease, if set on an outgoing message, is called once the
	// messenger is done with it (see above); it lets callers recycle
	// messages and payload buffers without allocating.
	OnRelease func(*Message)

	// tid travels in the frame's preamble (SetTid, Tid).
	tid uint64

	// Set on received messages.
	seq    uint64
	conn   *Conn
	buf    *wire.Buffer
	pooled bool
	inPool bool        // invariants build: in the pool, so not to be released
	credit bool        // holds a receive credit to return
	charge wire.Charge // holds bytes of the messenger's receive budget
	size   int64

	// The CRC32C of Data, known to the sender (SetDataCRC) or verified by
	// the link that received it; it holds for crcOf, the Data it was
	// known for, and for no other slice.
	dataCRC uint32
	crcOf   []byte
	// sourceCRC: dataCRC is a source's claim (SetSourceCRC), not known
	// to be the CRC of crcOf.
	sourceCRC bool
	// The CRC32Cs of crcOf's chunkSize-byte chunks, which its link
	// computed as the data arrived; they live in buf.
	chunkCRCs []uint32
	chunkSize int

	// send-side session bookkeeping
	out struct {
		seq uint64
		id  uint64 // its Ticket's (session.lastID)
	}
}

var messagePool = sync.Pool{New: func() any { return &Message{pooled: true} }}

// NewMessage returns a message from the messenger's pool. It goes back to
// the pool when the messenger releases it (after Send), so it must not be
// used after a successful Send.
func NewMessage(typ uint16, front, data []byte) *Message {
	m := getMessage()
	m.Type, m.Front, m.Data = typ, front, data
	return m
}

func getMessage() *Message {
	m := messagePool.Get().(*Message)
	if invariants.Enabled {
		m.inPool = false
	}
	return m
}

// NewProtoMessage marshals front and returns a pooled message.
func NewProtoMessage(typ uint16, front proto.Message, data []byte) (*Message, error) {
	b, err := proto.Marshal(front)
	if err != nil {
		return nil, err
	}
	return NewMessage(typ, b, data), nil
}

// SetPayload makes b's bytes the message's data and hands the caller's
// reference on b to the message, which releases it when the messenger is
// done with the message (just before OnRelease is called, if set). With a
// buffer from Conn.AllocPayload the RDMA transport moves the payload
// straight from b, without copying it.
func (m *Message) SetPayload(b *wire.Buffer) {
	if m.buf != nil {
		m.buf.Release()
	}
	m.buf, m.Data = b, b.B
}

// KeepData hands over a received message's data for the caller to keep
// after m is released, for as long as it likes (an SDK reader's window),
// or to send on without a copy (SetPayload(buf), then Data = data: an OSD
// forwards a client's put to its replicas so): buf holds a reference for
// the caller to release, and data is the bytes, in buf. It never keeps
// what the transport needs back to receive more: data in a buffer lent
// for one frame (an RDMA receive buffer, wire.Buffer.Lent) is copied to a
// pooled buffer, a small copy since only inline frames land there. Were
// such a buffer kept, m's release would grant the peer a receive that is
// not posted again until the caller lets go (on verbs, a
// receiver-not-ready error). Otherwise the bytes stay where they were
// received, with no copy. Release m as usual: its receive credit and
// budget bytes go back then, whatever the caller keeps. It returns nil,
// nil when m has no data.
func (m *Message) KeepData() (buf *wire.Buffer, data []byte) {
	if len(m.Data) == 0 {
		return nil, nil
	}
	if m.buf != nil && !m.buf.Lent {
		m.buf.Ref()
		return m.buf, m.Data
	}
	buf = wire.GetBuffer(len(m.Data))
	copy(buf.B, m.Data)
	return buf, buf.B
}

// SetDataCRC tells the messenger that crc is the CRC32C (Castagnoli) of
// m.Data as it is now, because the caller already computed it (the client
// over an object's body, the store from its chunk CRCs). The link then
// puts crc in the frame instead of reading the data once more to compute
// it: a data segment is checksummed once per hop, by its receiver.
//
// REQUIRES: crc is the CRC32C of m.Data, and m.Data is not changed until
// the messenger is done with m. A wrong crc is not caught by the sender:
// the receiver refuses the frame as corrupt (wire.ErrCRC), a link fault,
// after which a lossless session replays m with the same wrong crc, and
// keeps failing, until the Conn is closed; a lossy one resets. The CRC is
// bound to the slice m.Data is now: assigning another slice to m.Data
// (or SetPayload) forgets it, and the link computes the CRC as without.
// With Options.DisableDataCRC (agreed by the peer) no data CRC is sent.
func (m *Message) SetDataCRC(crc uint32) {
	m.dataCRC, m.crcOf, m.chunkCRCs, m.chunkSize = crc, m.Data, nil, 0
	m.sourceCRC = false
}

// SetSourceCRC tells the messenger that crc is the CRC32C (Castagnoli)
// that m.Data's source recorded for it (a store's chunk CRCs, combined),
// without anyone having checked that m.Data still has it: a disk may have
// returned other bytes. The link then sends crc as that claim instead of
// computing a CRC (SetDataCRC's saving), and the receiver's link, which
// checksums the data anyway, reports a mismatch instead of refusing the
// frame. So a read costs one CRC pass, the receiver's, and still catches
// a damaged copy at its source.
//
// A wrong crc is not an error for the messenger: m is delivered, with
// DataCRC() on the receiver the CRC of the bytes as they arrived (and the
// receiver's Conn.Stats().SourceCRCMismatches counting it). The receiver must
// compare DataCRC() with the CRC it was promised, which the sender puts
// in the front for it. A peer that did not agree wire.FeatureSourceCRC
// gets a CRC the link computes over m.Data. Secure links and
// Options.DisableDataCRC send no data CRC at all: there DataCRC() is !ok
// on the receiver, which must compute the CRC itself.
//
// On m, DataCRC() reports ok=false: crc is not known to be m.Data's. As
// for SetDataCRC, m.Data must not change until the messenger is done
// with m, and assigning another slice to m.Data forgets crc.
func (m *Message) SetSourceCRC(crc uint32) {
	m.SetDataCRC(crc)
	m.sourceCRC = true
}

// DataCRC returns the CRC32C of m.Data when the messenger knows it: on a
// received message, the CRC its link verified the data against (or, for
// data sent without one, computed as it arrived: Options.DataChunkCRC;
// for data sent with a source's CRC, SetSourceCRC, computed as it arrived
// whether that matched or not),
// so the receiver can compare it with a CRC it was promised instead of
// computing one; on an outgoing one, what SetDataCRC set (not
// SetSourceCRC's claim). ok is false
// when nobody checksummed the data (the sender's DisableDataCRC, or a
// transport that does not report it), when Data is empty, or when m.Data
// is no longer the slice the CRC was known for. A received message sent
// on unchanged keeps its CRC, so forwarding costs no CRC pass.
func (m *Message) DataCRC() (crc uint32, ok bool) {
	if m.sourceCRC || !m.crcHolds() {
		return 0, false
	}
	return m.dataCRC, true
}

// sendCRC is the data CRC the link is to send m with (wire.Frame): what
// SetDataCRC or, a source's claim, SetSourceCRC set, if it holds.
func (m *Message) sendCRC() (crc uint32, known, source bool) {
	if !m.crcHolds() {
		return 0, false, false
	}
	return m.dataCRC, true, m.sourceCRC
}

// DataChunkCRCs returns the CRC32Cs of a received message's Data in
// chunkSize-byte chunks from its start (the last one the remainder), when
// its link computed them as the bytes arrived (Options.DataChunkCRC) in
// chunks of that size; ok is false otherwise, or when m.Data is no longer
// the slice they were computed for. They are valid until Release.
func (m *Message) DataChunkCRCs(chunkSize int) (crcs []uint32, ok bool) {
	if m.chunkCRCs == nil || chunkSize != m.chunkSize || !m.crcHolds() {
		return nil, false
	}
	return m.chunkCRCs, true
}

// crcHolds reports whether the CRCs m knows are of m.Data as it is now.
func (m *Message) crcHolds() bool {
	return len(m.Data) != 0 && len(m.crcOf) == len(m.Data) && unsafe.SliceData(m.crcOf) == unsafe.SliceData(m.Data)
}

// DecodeFront unmarshals the front into pb; a malformed front is an error,
// never a panic.
func (m *Message) DecodeFront(pb proto.Message) error {
	return proto.Unmarshal(m.Front, pb)
}

// SetTid sets the request id the message carries in its envelope (the
// frame's preamble). A requester picks a tid its pending requests do not
// use; a reply sets its request's Tid, so the requester matches replies to
// requests without decoding their fronts. 0, the default, is no tid.
func (m *Message) SetTid(tid uint64) { m.tid = tid }

// Tid is the request id of the message: on a received message, the one its
// sender set (SetTid), 0 if none.
func (m *Message) Tid() uint64 { return m.tid }

// Seq is the session sequence number of a received message.
func (m *Message) Seq() uint64 { return m.seq }

// Conn is the connection a received message arrived on.
func (m *Message) Conn() *Conn { return m.conn }

// Len is the size the message counts against windows and queues.
func (m *Message) Len() int64 { return int64(len(m.Front) + len(m.Data)) }

// Release ends the dispatcher's ownership of a received message: it returns
// the receive credit, the bytes of the receive budget (Options.MaxRecvBytes)
// and the buffer. For a message that was never sent nor received, it just
// recycles it.
func (m *Message) Release() {
	// The buffer goes first: on RDMA it is a receive buffer that must be
	// posted again before the credit for it is granted.
	if m.buf != nil {
		if invariants.Enabled && m.buf.Lent && m.buf.Refs() != 1 {
			// The credit below would grant the peer a receive that stays
			// out until the other holder lets go (KeepData copies instead).
			panic("msgr: invariant: a received message released while something else holds its transport's receive buffer (KeepData copies out of it)")
		}
		m.buf.Release()
		m.buf = nil
	}
	m.charge.Release()
	if m.credit {
		m.conn.consumed(m.size)
		m.credit = false
	}
	m.recycle()
}

// recycle returns a pooled message to the pool or calls OnRelease.
func (m *Message) recycle() {
	if invariants.Enabled && m.inPool {
		panic("msgr: invariant: a message released twice (Message.Release after Release, or after the messenger was done with it)")
	}
	if m.buf != nil {
		// An outgoing message's payload buffer (SetPayload).
		m.buf.Release()
		m.buf = nil
	}
	m.charge.Release() // a received message sent on without Release
	if m.credit {
		// A received message sent on unchanged: its session's receive
		// credit goes back now, as Release gives it back, after the
		// buffer (posted again, on RDMA) above.
		m.conn.consumed(m.size)
		m.credit = false
	}
	if fn := m.OnRelease; fn != nil {
		// The CRC was a promise for one Send: a message its owner
		// reuses with other bytes in the same slice must not keep it.
		m.dataCRC, m.crcOf, m.chunkCRCs, m.chunkSize = 0, nil, nil, 0
		m.sourceCRC = false
		fn(m)
		return
	}
	if m.pooled {
		*m = Message{pooled: true, inPool: invariants.Enabled}
		messagePool.Put(m)
	}
}
