package msgr

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/wire"
)

// recordsLimits let a session frame carry the largest message (64 MiB).
var recordsLimits = wire.Limits{MaxFront: 16 << 20, MaxData: 64 << 20}

// recordFrame is a MESSAGE with a front and n bytes of data that differ
// from record to record, so that records moved about cannot match.
func recordFrame(seq uint64, n int) wire.Frame {
	d := make([]byte, n)
	for i := range d {
		d[i] = byte(i ^ i>>8 ^ i>>17 ^ int(seq))
	}
	return wire.Frame{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: seq, Tid: 9}, Front: []byte("front"), Data: d}
}

// recordAt is where record i of a frame's sealed data lies, its tag
// included.
func recordAt(sealed []byte, i int) []byte {
	at := i * (sealRecordSize + auth.Overhead)
	return sealed[at:min(at+sealRecordSize+auth.Overhead, len(sealed))]
}

// TestSealedLinkRecords: a frame with sealRecordMinData of data or more
// goes as its sealed front and preamble and k records of sealRecordSize
// (the last shorter), each with its tag after it, and comes out as it
// went in, its data on a DataAlign boundary; around the record size's
// multiples, at 1 MiB and at the largest message (front and data).
func TestSealedLinkRecords(t *testing.T) {
	R := sealRecordSize
	for _, size := range []int{sealRecordMinData - 1, sealRecordMinData, 2*R + 1, 3*R - 1, 3 * R, 3*R + 1, 1 << 20, 64<<20 - len("front")} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			w, r, q := sealedPairLimits(t, recordsLimits)
			in := recordFrame(1, size)
			if err := w.WriteFrames([]wire.Frame{in}); err != nil {
				t.Fatal(err)
			}
			k, records := sealedRecords(size)
			if want := size >= sealRecordMinData; records != want || records && k != (size+R-1)/R {
				t.Fatalf("%d bytes: %d records (%v)", size, k, records)
			}
			if !records {
				k = 1
			}
			if out := q.q[0]; len(out.Front) != len(in.Front)+wire.SealedOverhead || len(out.Data) != size+k*auth.Overhead {
				t.Fatalf("parts of %d and %d bytes, want %d records", len(out.Front), len(out.Data), k)
			}
			var got wire.Frame
			if err := r.ReadFrame(&got); err != nil {
				t.Fatal(err)
			}
			defer got.Release()
			if got.Seq != 1 || got.Tid != 9 || !bytes.Equal(got.Front, in.Front) || !bytes.Equal(got.Data, in.Data) {
				t.Fatalf("came out as %+v with other bytes", got.Preamble)
			}
			if uintptr(unsafe.Pointer(&got.Data[0]))%wire.DataAlign != 0 {
				t.Fatal("the data is not aligned")
			}
			// The nonces after the frame's are the next frame's: a
			// second frame opens too.
			release(roundTrip(t, w, r, recordFrame(2, size)))
		})
	}
}

// TestSealedLinkRecordsRefused: a frame in records with a record or a
// tag altered, two records swapped, a record from another frame, its last
// record cut short, a record too many or too few is refused, nothing of
// it is delivered, and a record that does not open leaves the link
// refusing every frame after it.
func TestSealedLinkRecordsRefused(t *testing.T) {
	const size = sealRecordMinData + 100 // the last record short
	k, _ := sealedRecords(size)
	two := func(mangle func(a, b []byte) []byte) func(t *testing.T, w *sealedLink, q *queueLink) {
		return func(t *testing.T, w *sealedLink, q *queueLink) {
			if err := w.WriteFrames([]wire.Frame{recordFrame(1, size), recordFrame(2, size)}); err != nil {
				t.Fatal(err)
			}
			q.q[0].Data = mangle(q.q[0].Data, q.q[1].Data)
		}
	}
	for _, tc := range []struct {
		name string
		send func(t *testing.T, w *sealedLink, q *queueLink)
		want error
	}{
		{"record altered", two(func(a, _ []byte) []byte { recordAt(a, k/2)[7] ^= 1; return a }), auth.ErrOpen},
		{"tag altered", two(func(a, _ []byte) []byte { r := recordAt(a, 1); r[len(r)-1] ^= 1; return a }), auth.ErrOpen},
		{"last tag altered", two(func(a, _ []byte) []byte { a[len(a)-3] ^= 1; return a }), auth.ErrOpen},
		{"records swapped", two(func(a, _ []byte) []byte {
			r0, r1 := recordAt(a, 0), recordAt(a, 1)
			tmp := bytes.Clone(r0)
			copy(r0, r1)
			copy(r1, tmp)
			return a
		}), auth.ErrOpen},
		{"record from another frame", two(func(a, b []byte) []byte { copy(recordAt(a, 1), recordAt(b, 1)); return a }), auth.ErrOpen},
		{"data from another frame", two(func(_, b []byte) []byte { return b }), auth.ErrOpen},
		{"last record truncated", two(func(a, _ []byte) []byte { return a[:len(a)-1] }), wire.ErrMalformed},
		{"last record dropped", two(func(a, _ []byte) []byte { return a[:(k-1)*(sealRecordSize+auth.Overhead)] }), wire.ErrMalformed},
		{"a record too many", two(func(a, b []byte) []byte { return append(bytes.Clone(a), recordAt(b, k-1)...) }), wire.ErrMalformed},
		{"as one two-part message", func(t *testing.T, w *sealedLink, q *queueLink) {
			// The data sealed as one message, with the two-part form's
			// additional data, where records are due.
			in := recordFrame(1, size)
			p := in.Preamble
			p.FrontLen, p.DataLen = uint32(len(in.Front)), size
			f := sealParts(t, w, in.Front, p, in.Data)
			f.Data = append(f.Data, make([]byte, (k-1)*auth.Overhead)...) // the length records take
			q.WriteFrames([]wire.Frame{f})
		}, auth.ErrOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, r, q := sealedPair(t)
			tc.send(t, w, q)
			readRefused(t, w, r, q, tc.want, recordFrame(3, size))
		})
	}
}

// TestSealedLinkRecordHelpersEnd: the helpers that seal and open records
// start with the first frame in records and end when the last sealed link
// that used them closes; a link closed mid-stream still seals and opens,
// alone.
func TestSealedLinkRecordHelpersEnd(t *testing.T) {
	waitHelpers(t, 0) // those of earlier tests end
	w, r, _ := sealedPair(t)
	w2, r2, _ := sealedPair(t)
	release(roundTrip(t, w, r, recordFrame(1, 100)))
	if n := recordHelpers(); n != 0 {
		t.Fatalf("%d helpers before any frame in records", n)
	}
	in := recordFrame(1, 1<<20)
	release(roundTrip(t, w, r, in))
	release(roundTrip(t, w2, r2, in))
	if n := recordHelpers(); n != runtime.GOMAXPROCS(0) {
		t.Fatalf("%d helpers with records sealed, want GOMAXPROCS (%d)", n, runtime.GOMAXPROCS(0))
	}
	w.Close()
	r.Close()
	release(roundTrip(t, w, r, in)) // closed, so alone
	w2.Close()
	r2.Close()
	release(roundTrip(t, w2, r2, in))
	waitHelpers(t, 0)
}

// recordHelpers counts the live goroutines the helper pool started. It
// goes by each goroutine's "created by" line, which a goroutine has from
// the go statement on: one that has not run yet shows only the wrapper
// the compiler makes for the go statement's arguments, not recordHelper,
// and a loaded machine leaves fresh helpers unscheduled for a while.
func recordHelpers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("\ncreated by github.com/ospreystore/osprey/msgr.(*recordHelperPool).acquire in goroutine "))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitHelpers waits, up to 10 s, until n helpers run.
func waitHelpers(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); recordHelpers() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d record helpers, want %d", recordHelpers(), n)
		}
		runtime.Gosched()
	}
}

// BenchmarkSealRecords: one core's GCM throughput by record size, what
// sealRecordSize is chosen from: the fixed cost of an AEAD message
// against a frame cut in enough records to share between cores.
func BenchmarkSealRecords(b *testing.B) {
	s, err := auth.NewSealer(bytes.Repeat([]byte{1}, auth.DirectionKeyLen))
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 1<<20)
	out := make([]byte, 0, len(data)+1024*auth.Overhead)
	for _, rs := range []int{16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20} {
		b.Run(fmt.Sprint(rs>>10, "KiB"), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			var sc recordScratch
			for b.Loop() {
				k := len(data) / rs
				recs, err := s.Reserve(k, len(data))
				if err != nil {
					b.Fatal(err)
				}
				for i := range k {
					recs.Seal(&sc.nb, out[i*(rs+auth.Overhead):i*(rs+auth.Overhead)], i, data[i*rs:(i+1)*rs], sc.additional(i, k))
				}
			}
		})
	}
}
