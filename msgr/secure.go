package msgr

import (
	"context"
	"crypto/subtle"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/internal/invariants"
	"github.com/ospreystore/osprey/msgr/wire"
)

// Connection modes, as Ceph's msgr2 ms_*_mode (docs/protocol.md §6.3,
// docs/auth.md). The auth step negotiates one per link: the dialer offers
// the modes it accepts (AuthOptions.Modes, in order of preference), the
// acceptor picks the first of its own it was offered, and from AUTH_DONE
// on a secure link carries every frame sealed (sealedLink).

// Mode is how a link protects its frames once the peer is authenticated.
type Mode string

const (
	// ModeCRC: frames in clear, their integrity checked by CRC32C;
	// the default.
	ModeCRC Mode = "crc"
	// ModeSecure: every frame after AUTH_DONE, its preamble included,
	// sealed with AES-256-GCM under keys from the link's TLS handshake.
	ModeSecure Mode = "secure"
)

// ErrMode: a session was refused because the two sides accept no mode in
// common (one requires secure, the other does crc only). Final, as ErrAuth:
// a redial would be refused again.
var ErrMode = errors.New("msgr: no connection mode in common")

// ParseModes reads a mode setting as Ceph spells ms_*_mode: "crc",
// "secure", "prefer-crc" (crc, else secure), "prefer-secure" (secure, else
// crc), or modes separated by commas or spaces in order of preference.
func ParseModes(s string) ([]Mode, error) {
	switch strings.TrimSpace(s) {
	case "prefer-crc":
		return []Mode{ModeCRC, ModeSecure}, nil
	case "prefer-secure":
		return []Mode{ModeSecure, ModeCRC}, nil
	}
	var modes []Mode
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		m := Mode(f)
		if m != ModeCRC && m != ModeSecure {
			return nil, fmt.Errorf("msgr: unknown connection mode %q (want crc, secure, prefer-crc or prefer-secure)", f)
		}
		if slices.Contains(modes, m) {
			return nil, fmt.Errorf("msgr: connection mode %q given twice in %q", f, s)
		}
		modes = append(modes, m)
	}
	if len(modes) == 0 {
		return nil, fmt.Errorf("msgr: no connection mode in %q", s)
	}
	return modes, nil
}

// modes is what this messenger accepts, in order of preference: crc alone
// without a keyring (secure needs the keys of an authenticated handshake).
func (m *Messenger) modes() []Mode {
	if m.opts.Auth == nil || len(m.opts.Auth.Modes) == 0 {
		return []Mode{ModeCRC}
	}
	return m.opts.Auth.Modes
}

func modeStrings(ms []Mode) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m)
	}
	return out
}

// chooseMode is the acceptor's pick: the first of its modes the dialer
// offered. An empty offer is a peer that predates modes: crc. Modes it
// does not know are skipped, so a later version may offer more.
func chooseMode(offered []string, ours []Mode) (Mode, bool) {
	if len(offered) == 0 {
		offered = []string{string(ModeCRC)}
	}
	for _, m := range ours {
		if slices.Contains(offered, string(m)) {
			return m, true
		}
	}
	return "", false
}

// modeChosen checks the acceptor's AUTH_DONE.mode on the dialer: one of the
// modes it offered.
func modeChosen(chosen string, offered []Mode) (Mode, error) {
	m := Mode(chosen)
	if m == "" {
		m = ModeCRC
	}
	if !slices.Contains(offered, m) {
		return "", wire.Protocolf("handshake: the peer chose mode %q, which was not offered (%v)", chosen, offered)
	}
	return m, nil
}

// modeTranscript binds what the modes negotiation said into exporter
// values: the offer as sent and the choice.
func modeTranscript(purpose string, offered []string, chosen Mode) []byte {
	return fmt.Appendf(nil, "%s\x00%s\x00%s", purpose, strings.Join(offered, ","), chosen)
}

// modeProof is AUTH_DONE.mode_proof: the acceptor proves, with a value only
// the two ends of the TLS handshake can compute, which offer it saw. A
// dialer whose offer was cut down on the way finds a proof that differs
// from its own and refuses the link.
func modeProof(res *auth.Result, offered []string, chosen Mode) ([]byte, error) {
	return res.SessionKeys(modeTranscript("mode", offered, chosen), 32)
}

func checkModeProof(res *auth.Result, offered []string, chosen Mode, proof []byte) error {
	want, err := modeProof(res, offered, chosen)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(want, proof) != 1 {
		return fmt.Errorf("%w: the peer's proof of the modes negotiation does not match: the offer was altered on the way", ErrAuth)
	}
	return nil
}

// linkKeys are a secure link's two directions' secrets.
type linkKeys struct{ tx, rx []byte }

// secureKeys derives a secure link's keys from its handshake, bound to the
// negotiation; the dialer's sending direction is the first.
func secureKeys(res *auth.Result, offered []string, dialer bool) (*linkKeys, error) {
	km, err := res.SessionKeys(modeTranscript("keys", offered, ModeSecure), 2*auth.DirectionKeyLen)
	if err != nil {
		return nil, err
	}
	k := &linkKeys{tx: km[:auth.DirectionKeyLen], rx: km[auth.DirectionKeyLen:]}
	if !dialer {
		k.tx, k.rx = k.rx, k.tx
	}
	return k, nil
}

// sealedHandshakeLimits bound a sealed handshake frame's plaintext, so
// that sealed it still fits the link's handshake limits.
var sealedHandshakeLimits = wire.Limits{MaxFront: wire.MaxHandshakeFront - wire.SealedOverhead, HandshakeOnly: true}

// sealedLink is a link in secure mode: it seals each frame the session
// writes into one SEALED (or SEALED_HANDSHAKE) frame of the link below,
// and opens what it reads. Wrapping the post-handshake wire.Link gives
// every transport secure mode alike; on RDMA a large sealed frame is the
// payload the rendezvous moves, so its buffer comes from the link's
// registered memory.
//
// A sealed frame takes one of two forms (docs/protocol.md §6.7). In one
// part, what is sealed is the frame as the session wrote it, laid out
// data, front, preamble, as one AEAD message: the data first so that,
// received, it starts where the link placed the sealed segment (on a
// DataAlign boundary for a large one, as O_DIRECT wants it). A frame
// with a large data segment goes in two parts instead: its front and
// preamble sealed as one message, the outer frame's front, and its data
// sealed as the next, the outer frame's data. The data is then sealed
// straight from the caller's memory into the outgoing buffer (GCM
// encrypts out of place) rather than first copied beside its front, and
// opened in place where the link put it. No
// epilogue: the GCM tags authenticate every byte, and the outer frame
// goes without a data CRC. What stays in clear: the banner, the
// handshake up to AUTH_DONE (HELLO, the auth method's rounds, the modes
// negotiation, which the mode proof guards), and each sealed frame's
// outer preamble, which says only SEALED and the sealed lengths.
type sealedLink struct {
	wire.Link
	seal, open  *auth.Sealer
	alloc       wire.PayloadAllocator // the link's registered memory; nil if none
	ledger      wire.SealedLedger     // invariants build: the link's ledger, if it keeps one
	lim, steady wire.Limits           // the plaintext's: handshake, then the session's
	in          wire.Frame            // reader scratch
	out         []wire.Frame          // writer scratch
	bufs        []*wire.Buffer        // sealed buffers of the batch in hand
	// tamper, if set (tests), sees each sealed segment before it is
	// written, so a test can alter what goes on the wire.
	tamper func(sealed []byte)

	// sealRun and openRun describe the frame whose records the writer
	// seals or the reader opens: one of each, as one goroutine writes
	// and one reads.
	sealRun, openRun recordRun
	helpersMu        sync.Mutex
	helpers          chan<- *recordRun // from recordHelpers, taken at the first record frame
	closed           bool
}

func newSealedLink(l wire.Link, k *linkKeys, steady wire.Limits) (*sealedLink, error) {
	seal, err := auth.NewSealer(k.tx)
	if err != nil {
		return nil, err
	}
	open, err := auth.NewSealer(k.rx)
	if err != nil {
		return nil, err
	}
	s := &sealedLink{Link: l, seal: seal, open: open, lim: sealedHandshakeLimits, steady: steady}
	s.openRun.open = true
	if h := testHookTamper.Load(); h != nil {
		s.tamper = *h
	}
	s.alloc, _ = l.(wire.PayloadAllocator)
	if invariants.Enabled {
		s.ledger, _ = l.(wire.SealedLedger)
	}
	return s, nil
}

// testHookTamper, when set (tests), is copied into each new sealed link.
var testHookTamper atomic.Pointer[func(sealed []byte)]

// sealFlushBytes is how much sealed data a batch holds before it goes to
// the link: sealing is the costly part of a secure write, so a batch of
// large frames is handed over as it is sealed rather than all at once,
// and the peer reads and opens one frame while the next is sealed. Small
// frames still go together, in one write.
const sealFlushBytes = 256 << 10

// Which frames go in two parts. The second AEAD message costs a fixed
// hundred nanoseconds or so (its nonce, its tag, the GHASH of its
// additional data) and 16 bytes, which the copy it saves outweighs from
// about 4 KiB of data (BenchmarkSealedForms); below that the one-part form
// keeps small messages (a 64-byte ping-pong) at one AEAD call. The outer
// front of a two-part frame (the sealed front and preamble) goes inline
// on RDMA beside the rendezvous descriptor, so a frame with a larger
// front goes in one part: sealSplitMaxFront and its 72 bytes of
// overhead fit the smallest send buffer an RDMA link takes (1 KiB) with
// the descriptor, and the fronts of data messages are far smaller.
const (
	sealSplitMinData  = 4 << 10
	sealSplitMaxFront = 512
)

// The additional data of the two parts of a two-part sealed frame: they
// keep a part from opening as the other, or as a one-part frame (sealed
// with none), whatever nonce it is tried under.
var (
	sealedHeadAD = []byte("osprey sealed head")
	sealedDataAD = []byte("osprey sealed data")
)

// A two-part frame with at least sealRecordMinData of data seals that
// data as records of sealRecordSize bytes (the last shorter), each its
// own AEAD message under the nonces after the header's, so that several
// cores seal and open one frame: a GCM pass over a MiB costs about 200 µs
// of one core, which bounds a secure stream of large messages, and a
// 100 Gb/s NIC needs several cores of it anyway. On one core, 16 to 64
// KiB records go as fast as any (BenchmarkSealRecords: 5.1-5.4 GB/s,
// against 4.8 at 128 KiB and 3.5 for a whole MiB, whose pass outgrows
// the caches); 64 KiB keeps the tags to 1/4096 of the data and a 1 MiB
// frame in 16 records, enough to share between the cores of a node.
// Below 256 KiB a frame goes in two parts: four records at most, not
// worth waking helpers for.
const (
	sealRecordSize    = wire.SealRecordSize
	sealRecordMinData = 256 << 10
)

// recordADPrefix starts each record's additional data, followed by its
// index and the frame's record count (big-endian uint32s): a record opens
// only at its own place in its own frame, and never as a part of a frame
// in one or two parts. Its nonce ties it to the frame: the nonces after
// the frame's header.
const recordADPrefix = "osprey sealed record"

// sealedRecords reports whether a frame with n bytes of data that goes in
// two parts seals them as records, and how many.
func sealedRecords(n int) (int, bool) {
	if n < sealRecordMinData {
		return 0, false
	}
	return (n + sealRecordSize - 1) / sealRecordSize, true
}

// recordScratch is one goroutine's scratch for sealing or opening a
// record: heap memory of its own, so that handing it to the AEAD costs no
// allocation.
type recordScratch struct {
	nb [12]byte
	ad [len(recordADPrefix) + 8]byte
}

func (sc *recordScratch) additional(i, k int) []byte {
	copy(sc.ad[:], recordADPrefix)
	binary.BigEndian.PutUint32(sc.ad[len(recordADPrefix):], uint32(i))
	binary.BigEndian.PutUint32(sc.ad[len(recordADPrefix)+4:], uint32(k))
	return sc.ad[:]
}

// recordRun is the work of sealing or opening one frame's records: the
// goroutine that owns the frame and any helpers it finds idle take
// records by number until none is left.
type recordRun struct {
	recs auth.Records
	open bool
	// plain is the data, sealed its records with their tags, record i
	// at i*(sealRecordSize+auth.Overhead).
	plain, sealed []byte
	k             int
	next          atomic.Int64
	failed        atomic.Bool
	wg            sync.WaitGroup
	sc            recordScratch // the owner's
}

// work seals or opens records until none is left.
func (r *recordRun) work(sc *recordScratch) {
	for {
		i := int(r.next.Add(1)) - 1
		if i >= r.k {
			return
		}
		lo := i * sealRecordSize
		hi := min(lo+sealRecordSize, len(r.plain))
		at := lo + i*auth.Overhead
		ad := sc.additional(i, r.k)
		if !r.open {
			r.recs.Seal(&sc.nb, r.sealed[at:at], i, r.plain[lo:hi], ad)
		} else if _, err := r.recs.Open(&sc.nb, r.plain[lo:lo], i, r.sealed[at:at+hi-lo+auth.Overhead], ad); err != nil {
			r.failed.Store(true)
		}
	}
}

// run does the run's k records, from records reserved: it offers the run
// to helpers that are idle (never waiting for one), works on it itself,
// and returns once every record is done. It reports whether every record
// opened.
func (s *sealedLink) run(r *recordRun, recs auth.Records, k int, plain, sealed []byte) bool {
	r.recs, r.k, r.plain, r.sealed = recs, k, plain, sealed
	r.next.Store(0)
	r.failed.Store(false)
	if helpers := s.recordHelpers(); helpers != nil {
		for range k - 1 {
			r.wg.Add(1)
			sent := false
			select {
			case helpers <- r:
				sent = true
			default:
			}
			if !sent {
				r.wg.Done()
				break
			}
		}
	}
	r.work(&r.sc)
	r.wg.Wait()
	ok := !r.failed.Load()
	r.recs, r.plain, r.sealed = auth.Records{}, nil, nil
	return ok
}

// recordHelpers is the channel to the process's record helpers, which the
// link takes from the pool at its first frame in records (a reference
// that Close gives back) and keeps. A link closed before then gets nil
// and does its records alone: a reference taken after Close would never
// be given back, and would keep the helpers running for good. A link
// closed after keeps returning the channel, as its reader or writer may
// still be in a frame: the pool never closes the channel (it closes
// stop), so an offer on it cannot panic, and once the pool has stopped no
// helper takes the offer and the link does the records itself (run never
// waits for a helper).
func (s *sealedLink) recordHelpers() chan<- *recordRun {
	s.helpersMu.Lock()
	defer s.helpersMu.Unlock()
	if s.helpers == nil && !s.closed {
		s.helpers = helperPool.acquire()
	}
	return s.helpers
}

// Close lets go of the record helpers and closes the link below.
func (s *sealedLink) Close() error {
	s.helpersMu.Lock()
	if !s.closed {
		s.closed = true
		if s.helpers != nil {
			helperPool.release()
		}
	}
	s.helpersMu.Unlock()
	return s.Link.Close()
}

// recordHelperPool is the process's goroutines that seal and open
// records for the goroutines that own the frames: GOMAXPROCS of them,
// started when a sealed link first needs them and stopped when the last
// such link closes, so that nothing runs for links that never carry a
// large frame, and nothing outlives the messengers.
type recordHelperPool struct {
	mu   sync.Mutex
	refs int
	work chan *recordRun // unbuffered: a send succeeds only to a helper that waits
	stop chan struct{}
}

var helperPool recordHelperPool

func (p *recordHelperPool) acquire() chan<- *recordRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refs++; p.refs == 1 {
		p.work, p.stop = make(chan *recordRun), make(chan struct{})
		for range runtime.GOMAXPROCS(0) {
			go recordHelper(p.work, p.stop)
		}
	}
	return p.work
}

func (p *recordHelperPool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refs--; p.refs == 0 {
		close(p.stop)
		p.work, p.stop = nil, nil
	}
}

// recordHelper works on the runs it is handed until the pool stops. A
// link still holding the channel after that finds no helper waiting and
// does its records itself.
func recordHelper(work <-chan *recordRun, stop <-chan struct{}) {
	sc := new(recordScratch)
	for {
		select {
		case r := <-work:
			r.work(sc)
			r.wg.Done()
		case <-stop:
			return
		}
	}
}

// splitSealed reports whether f goes in two parts.
func splitSealed(f *wire.Frame) bool {
	return len(f.Data) >= sealSplitMinData && len(f.Front) <= sealSplitMaxFront && !f.Tag.Handshake()
}

// WriteFrames seals each frame into a pooled buffer and writes them,
// in batches of about sealFlushBytes.
func (s *sealedLink) WriteFrames(frames []wire.Frame) error { return s.writeAfter(nil, frames) }

// writeAfter writes the frames clear as they are (a dialer's last auth
// flight), then frames sealed.
func (s *sealedLink) writeAfter(clear, frames []wire.Frame) error {
	s.out = append(s.out[:0], clear...)
	defer s.releaseBatch()
	pending := 0
	for i := range frames {
		s.out = append(s.out, wire.Frame{})
		of := &s.out[len(s.out)-1]
		if err := s.sealFrame(of, &frames[i], splitSealed(&frames[i])); err != nil {
			return err
		}
		if pending += len(of.Front) + len(of.Data); pending >= sealFlushBytes && i < len(frames)-1 {
			if err := s.Link.WriteFrames(s.out); err != nil {
				return err
			}
			s.releaseBatch()
			pending = 0
		}
	}
	return s.Link.WriteFrames(s.out)
}

// sealFrame seals f, in two parts if split, into a buffer of the batch,
// and makes of the frame of the link below that carries it.
func (s *sealedLink) sealFrame(of, f *wire.Frame, split bool) error {
	if invariants.Enabled && s.ledger != nil {
		s.ledger.SealedGrant(f.Preamble)
	}
	p := f.Preamble
	p.LinkWord = 0
	// A sealed frame carries no data CRC inside: its tag protects the
	// data, and the receiver computes a CRC if it wants one. Links set
	// FLAG_SOURCE_CRC in their own copy of a preamble, so it is not
	// expected here; it goes all the same, as the peer refuses it inside
	// a sealed frame (innerPreamble).
	p.Flags &^= wire.FlagNoDataCRC | wire.FlagSourceCRC
	p.FrontLen, p.DataLen = uint32(len(f.Front)), uint32(len(f.Data))
	hs := p.Tag.Handshake()
	// The buffer holds what goes sealed in the outer frame's data first
	// (in two parts, the data alone), so that on RDMA it starts the
	// registered buffer the rendezvous reads from.
	at := 0 // where the front and preamble are sealed
	k, records := sealedRecords(len(f.Data))
	records = records && split
	switch {
	case records:
		at = len(f.Data) + k*auth.Overhead
	case split:
		at = len(f.Data) + auth.Overhead
	}
	n := len(f.Front) + wire.PreambleSize // what is sealed at at
	if !split {
		n += len(f.Data)
	}
	buf, err := s.buffer(at+n+auth.Overhead, hs)
	if err != nil {
		return err
	}
	s.bufs = append(s.bufs, buf)
	b := buf.B[at : at+n]
	if !split {
		copy(b, f.Data)
	}
	copy(b[n-wire.PreambleSize-len(f.Front):], f.Front)
	p.Put(b[n-wire.PreambleSize:])
	of.Buf = buf
	switch {
	case hs:
		of.Tag = wire.TagSealedHandshake
		of.Front, err = s.sealPart(b, b, nil)
	case !split:
		of.Tag, of.Flags = wire.TagSealed, wire.FlagNoDataCRC
		of.Data, err = s.sealPart(b, b, nil)
	default:
		// The header first, then the data: two consecutive nonces in a
		// fixed order, so that neither part can be dropped, swapped or
		// paired with another frame's without the open failing.
		of.Tag, of.Flags = wire.TagSealed, wire.FlagNoDataCRC
		if of.Front, err = s.sealPart(b, b, sealedHeadAD); err != nil {
			break
		}
		if !records {
			of.Data, err = s.sealPart(buf.B, f.Data, sealedDataAD)
			break
		}
		var recs auth.Records
		if recs, err = s.seal.Reserve(k, len(f.Data)); err != nil {
			break
		}
		of.Data = buf.B[:at]
		s.run(&s.sealRun, recs, k, f.Data, of.Data)
		if s.tamper != nil {
			s.tamper(of.Data)
		}
	}
	return err
}

// sealPart seals plaintext into dst's bytes (in place when they are the
// same) and shows the result to the tamper hook, if any.
func (s *sealedLink) sealPart(dst, plaintext, additional []byte) ([]byte, error) {
	sealed, err := s.seal.Seal(dst[:0], plaintext, additional)
	if err == nil && s.tamper != nil {
		s.tamper(sealed)
	}
	return sealed, err
}

// releaseBatch lets go of the sealed buffers of the frames written.
func (s *sealedLink) releaseBatch() {
	for i, b := range s.bufs {
		b.Release()
		s.bufs[i] = nil
	}
	s.bufs = s.bufs[:0]
	clear(s.out)
	s.out = s.out[:0]
}

// buffer is where a frame is sealed: registered memory for a session
// frame when the link has it, so RDMA moves it without another copy.
func (s *sealedLink) buffer(n int, handshake bool) (*wire.Buffer, error) {
	if s.alloc != nil && !handshake {
		return s.alloc.AllocPayload(n)
	}
	return wire.GetBuffer(n), nil
}

// ReadFrame reads a sealed frame and opens it into f, in place. A frame
// that does not open (altered, replayed, reordered, sealed under other
// keys) is auth.ErrOpen: nothing of it is delivered, and the link is done.
func (s *sealedLink) ReadFrame(f *wire.Frame) error {
	in := &s.in
	*in = wire.Frame{}
	if err := s.Link.ReadFrame(in); err != nil {
		return err
	}
	err := s.openFrame(in, f)
	if err != nil {
		in.Release()
	} else if invariants.Enabled && s.ledger != nil && !f.HasSegments() {
		s.ledger.OpenedControl(f.Tag)
	}
	*in = wire.Frame{}
	return err
}

func (s *sealedLink) openFrame(in, f *wire.Frame) error {
	var sealed []byte
	switch {
	case in.Tag == wire.TagSealed && len(in.Front) != 0:
		return s.openSplit(in, f)
	case in.Tag == wire.TagSealed:
		sealed = in.Data
	case in.Tag == wire.TagSealedHandshake:
		sealed = in.Front
	default:
		return wire.Protocolf("%v frame in clear on a secure link", in.Tag)
	}
	pt, err := s.openPart(in, sealed, nil)
	if err != nil {
		return err
	}
	return parseSealed(pt, in, f, s.lim)
}

// openSplit opens a sealed frame in two parts: the front and preamble
// from in's front, then, once its lengths are checked, the data in place
// in in's data, so that it starts where the link placed the segment.
func (s *sealedLink) openSplit(in, f *wire.Frame) error {
	head, err := s.openPart(in, in.Front, sealedHeadAD)
	if err != nil {
		return err
	}
	var p wire.Preamble
	if err := innerPreamble(&p, head, in, s.lim); err != nil {
		return err
	}
	k, records := sealedRecords(int(p.DataLen))
	if !records {
		k = 1
	}
	if uint64(p.FrontLen)+wire.PreambleSize != uint64(len(head)) || uint64(p.DataLen)+uint64(k)*auth.Overhead != uint64(len(in.Data)) {
		return &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("sealed %v frame of %d and %d bytes in %d records says front %d, data %d",
			p.Tag, len(head), len(in.Data)-k*auth.Overhead, k, p.FrontLen, p.DataLen)}
	}
	if records {
		return s.openRecords(in, f, &p, head[:p.FrontLen], k)
	}
	data, err := s.openPart(in, in.Data, sealedDataAD)
	if err != nil {
		return err
	}
	deliverSealed(f, in, &p, head[:p.FrontLen], data)
	return nil
}

// openRecords opens the k records of in's data, out of place and on
// several cores, into a buffer that holds the data on a DataAlign
// boundary and the front after it; f takes that buffer, and in's, the
// sealed one, goes back.
func (s *sealedLink) openRecords(in, f *wire.Frame, p *wire.Preamble, front []byte, k int) error {
	n := int(p.DataLen)
	buf, b := wire.GetAligned(n+len(front), 0)
	recs, err := s.open.Reserve(k, n)
	if err == nil && !s.run(&s.openRun, recs, k, b[:n], in.Data) {
		s.open.Break()
		err = auth.ErrOpen
	}
	if err != nil {
		buf.Release()
		return fmt.Errorf("msgr: %s: %d-byte %v frame in %d records: %w", s.RemoteAddr(), len(in.Front)+len(in.Data), in.Tag, k, err)
	}
	copy(b[n:], front)
	if in.Buf != nil {
		in.Buf.Release()
	}
	in.Buf = buf
	deliverSealed(f, in, p, b[n:], b[:n])
	return nil
}

// openPart opens one sealed message of in, in place.
func (s *sealedLink) openPart(in *wire.Frame, sealed, additional []byte) ([]byte, error) {
	pt, err := s.open.Open(sealed[:0], sealed, additional)
	if err != nil {
		return nil, fmt.Errorf("msgr: %s: %d-byte %v frame: %w", s.RemoteAddr(), len(in.Front)+len(in.Data), in.Tag, err)
	}
	return pt, nil
}

// parseSealed decodes an opened frame, pt (data, front, preamble), that
// came in the sealed frame in, into f, which takes in's buffer and charge.
func parseSealed(pt []byte, in, f *wire.Frame, lim wire.Limits) error {
	var p wire.Preamble
	if err := innerPreamble(&p, pt, in, lim); err != nil {
		return err
	}
	if uint64(p.FrontLen)+uint64(p.DataLen)+wire.PreambleSize != uint64(len(pt)) {
		return &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("sealed %v frame of %d bytes says front %d, data %d", p.Tag, len(pt), p.FrontLen, p.DataLen)}
	}
	deliverSealed(f, in, &p, pt[p.DataLen:p.DataLen+p.FrontLen], pt[:p.DataLen])
	return nil
}

// innerPreamble decodes into p and checks the preamble that ends pt,
// opened from the sealed frame in: a session frame in SEALED, a handshake
// frame in SEALED_HANDSHAKE, never a sealed or link frame.
func innerPreamble(p *wire.Preamble, pt []byte, in *wire.Frame, lim wire.Limits) error {
	if len(pt) < wire.PreambleSize {
		return &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("sealed frame of %d bytes is shorter than a preamble", len(pt))}
	}
	if err := p.Parse(pt[len(pt)-wire.PreambleSize:], lim); err != nil {
		return err
	}
	switch {
	case p.Tag.Sealed() || p.Tag.LinkOnly() || p.Flags&(wire.FlagRendezvous|wire.FlagSourceCRC) != 0 || p.LinkWord != 0:
		return &wire.Error{Kind: wire.ErrKindMalformed, Msg: fmt.Sprintf("%v frame (flags %#x, link word %d) inside a sealed frame", p.Tag, p.Flags, p.LinkWord)}
	case p.Tag.Handshake() != (in.Tag == wire.TagSealedHandshake):
		return wire.Protocolf("%v frame sealed in a %v frame", p.Tag, in.Tag)
	}
	return nil
}

// deliverSealed makes f the opened frame p, its segments front and data
// in in's buffer, which f takes. A MESSAGE also takes in's charge of the
// receive budget (the link charged the sealed frame before reading it,
// as it charges a MESSAGE in clear); any other frame lets it go.
func deliverSealed(f, in *wire.Frame, p *wire.Preamble, front, data []byte) {
	*f = wire.Frame{Preamble: *p}
	if p.Tag == wire.TagMessage && p.HasSegments() {
		f.Charge, in.Charge = in.Charge, wire.Charge{}
	} else {
		in.Charge.Release()
	}
	if !p.HasSegments() {
		if in.Buf != nil {
			in.Buf.Release()
		}
		return
	}
	f.Front, f.Data, f.Buf = front, data, in.Buf
}

// EndHandshake lets the session's frames through, under its limits, here
// and in the link below.
func (s *sealedLink) EndHandshake() {
	s.lim = s.steady
	if h, ok := s.Link.(wire.HandshakeEnder); ok {
		h.EndHandshake()
	}
}

// Buffered passes through the stream link's hint.
func (s *sealedLink) Buffered() bool {
	b, ok := s.Link.(interface{ Buffered() bool })
	return ok && b.Buffered()
}

// WriteSpace passes through the stream link's send-buffer estimate.
func (s *sealedLink) WriteSpace() int {
	w, ok := s.Link.(interface{ WriteSpace() int })
	if !ok {
		return 0
	}
	return w.WriteSpace()
}

// ErrSecureNeedsAuth: secure mode was asked of a messenger that does not
// authenticate; its keys come from the authentication's handshake.
var ErrSecureNeedsAuth = errors.New("msgr: secure mode needs authentication (a keyring)")

// NewAuthOptions are the AuthOptions of a messenger with keyring k (nil:
// no authentication, and nil options) that accepts modes, checking that
// secure mode is not asked without a keyring, as daemons and clients
// build them from their configuration.
func NewAuthOptions(k *auth.Keyring, authorize func(context.Context, EntityName, *x509.Certificate) error, modes []Mode) (*AuthOptions, error) {
	if k == nil {
		if slices.Contains(modes, ModeSecure) {
			return nil, ErrSecureNeedsAuth
		}
		return nil, nil
	}
	return &AuthOptions{Keyring: k, Authorize: authorize, Modes: modes}, nil
}
