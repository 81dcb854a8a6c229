package client_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// TestETags: a single put's ETag is S3's hex MD5 with Options.MD5 and the
// CRC32C without; a multipart object's is S3's MD5 of the parts' MD5s and
// "-N" either way. Around the part size, with the size unknown, and put
// from bytes (PutObjectBytes, size -2 here).
func TestETags(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 16})
	plain := c.Client(t, nil)
	withMD5 := c.Client(t, func(o *client.Options) { o.MD5 = true })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := plain.MakeBucket(ctx, "etags"); err != nil {
		t.Fatal(err)
	}
	const part = 5 << 20
	opts := client.PutOptions{PartSize: part}
	for _, n := range []int{0, 1000, part, part + 1} {
		data := osdtest.Payload(n, uint64(n))
		sum := md5.Sum(data)
		for _, size := range []int64{int64(n), -1, -2} {
			for _, cl := range []*client.Client{plain, withMD5} {
				key := fmt.Sprintf("o%d", n)
				var info client.ObjectInfo
				var err error
				if size == -2 {
					info, err = cl.PutObjectBytes(ctx, "etags", key, data, opts)
				} else {
					info, err = cl.PutObject(ctx, "etags", key, bytes.NewReader(data), size, opts)
				}
				if err != nil {
					t.Fatalf("%d bytes (size %d): %v", n, size, err)
				}
				want := fmt.Sprintf("crc32c:%08x", crc32c(data))
				if cl == withMD5 {
					want = fmt.Sprintf("%x", sum)
				}
				if n > part {
					p1, p2 := md5.Sum(data[:part]), md5.Sum(data[part:])
					want = fmt.Sprintf("%x-2", md5.Sum(append(p1[:], p2[:]...)))
				}
				if info.ETag != want || info.CRC32C != crc32c(data) || info.Size != int64(n) {
					t.Errorf("%d bytes (size %d, MD5 %v): ETag %s CRC32C %08x, want %s %08x", n, size, cl == withMD5, info.ETag, info.CRC32C, want, crc32c(data))
				}
				if st, err := cl.StatObject(ctx, "etags", key); err != nil || st.ETag != want {
					t.Errorf("%d bytes: stat ETag %s (%v), want %s", n, st.ETag, err, want)
				}
				got, _, err := osdtest.Get(ctx, cl, "etags", key, client.GetOptions{})
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("%d bytes: read back %d: %v", n, len(got), err)
				}
			}
		}
	}
	// A reader shorter than the size is an error, not a shorter object.
	for _, n := range []int{100, part + 100} {
		if _, err := plain.PutObject(ctx, "etags", "short", bytes.NewReader(make([]byte, n)), int64(n+1), opts); err == nil {
			t.Errorf("%d bytes put as %d", n, n+1)
		}
	}
}

// corruptingTCP is TCP whose links corrupt one byte of the data segment
// of the next frames that have one, as a faulty wire would.
type corruptingTCP struct {
	tcp.Transport
	left, done *atomic.Int32 // frames still to corrupt; frames corrupted
	withCRC    *atomic.Int32 // links dialled that compute data CRCs
	// readLeft: received frames still to corrupt, as an OSD would send
	// bytes that are wrong, with the frame CRC of those wrong bytes.
	readLeft *atomic.Int32
}

func (t corruptingTCP) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
	if !opts.NoDataCRC {
		t.withCRC.Add(1)
	}
	l, err := t.Transport.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	return corruptingLink{l, t}, nil
}

type corruptingLink struct {
	wire.Link
	t corruptingTCP
}

func (l corruptingLink) EndHandshake() {
	if e, ok := l.Link.(wire.HandshakeEnder); ok {
		e.EndHandshake()
	}
}

func (l corruptingLink) ReadFrame(f *wire.Frame) error {
	err := l.Link.ReadFrame(f)
	if err == nil && len(f.Data) > 0 && l.t.readLeft != nil && l.t.readLeft.Add(-1) >= 0 {
		f.Data[0] ^= 1
		f.DataCRC, f.HasDataCRC = crc32c(f.Data), true
	}
	return err
}

func (l corruptingLink) WriteFrames(frames []wire.Frame) error {
	for i := range frames {
		f := &frames[i]
		if len(f.Data) == 0 || l.t.left.Add(-1) < 0 {
			continue
		}
		l.t.done.Add(1)
		orig, buf := f.Data, f.Buf
		f.Data, f.Buf = bytes.Clone(orig), nil // never the sender's bytes
		f.Data[len(f.Data)/2] ^= 1
		defer func() { f.Data, f.Buf = orig, buf }()
	}
	return l.Link.WriteFrames(frames)
}

// TestPutResendsACorruptBody: the client sends bodies without a messenger
// data CRC, since their CRC32C is checked by the OSD. A body corrupted on
// the way is refused (BadDigest) and sent again from the client's intact
// buffer, a bounded number of times.
func TestPutResendsACorruptBody(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8})
	var left, done, withCRC atomic.Int32
	cl := c.Client(t, func(o *client.Options) {
		o.Transports = []wire.Transport{corruptingTCP{left: &left, done: &done, withCRC: &withCRC}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	data := osdtest.Payload(1<<20+3, 7)
	left.Store(1)
	if _, err := osdtest.Put(ctx, cl, "bkt", "k", data, client.PutOptions{}); err != nil {
		t.Fatalf("a put whose first send was corrupted: %v", err)
	}
	got, _, err := osdtest.Get(ctx, cl, "bkt", "k", client.GetOptions{})
	if err != nil || !bytes.Equal(got, data) || done.Load() != 1 {
		t.Fatalf("read back %d bytes (%v) after %d corrupted sends", len(got), err, done.Load())
	}
	// A wire that corrupts every send: the put fails after 3 sends.
	left.Store(1 << 30)
	done.Store(0)
	if _, err := osdtest.Put(ctx, cl, "bkt", "k", osdtest.Payload(1000, 8), client.PutOptions{}); !errors.Is(err, client.ErrBadDigest) || done.Load() != 3 {
		t.Fatalf("always corrupted: %v after %d sends, want BadDigest after 3", err, done.Load())
	}
	if n := withCRC.Load(); n != 0 {
		t.Errorf("%d of the client's links compute data CRCs", n)
	}
	left.Store(0)
	if got, _, err := osdtest.Get(ctx, cl, "bkt", "k", client.GetOptions{}); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the object after refused puts: %d bytes, %v", len(got), err)
	}
}

// oneOSD is a one-OSD cluster, so every reply comes on one session, with
// a bucket of objects of the sizes given (named s0, s1, ...).
func oneOSD(t *testing.T, sizes ...int) (*client.Client, context.Context, [][]byte) {
	t.Helper()
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8})
	cl := c.Client(t, func(o *client.Options) { o.OpTimeout = 10 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	var objs [][]byte
	for i, n := range sizes {
		data := osdtest.Payload(n, uint64(i))
		if _, err := osdtest.Put(ctx, cl, "bkt", fmt.Sprintf("s%d", i), data, client.PutOptions{PartSize: 5 << 20}); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, data)
	}
	return cl, ctx, objs
}

// checkNothingHeld: no reply's data is kept by the client nor charged to
// its messenger's receive budget.
func checkNothingHeld(t *testing.T, cl *client.Client) {
	t.Helper()
	if h, x, in := client.HeldBytes(cl), client.HeldExternal(cl), client.MessengerStats(cl).Recv.InFlight; h != 0 || x != 0 || in != 0 {
		t.Fatalf("%d bytes of replies kept by Objects (%d in transport memory), %d held by the messenger", h, x, in)
	}
}

// TestGetHandsOverAndReleasesReplies: an Object's window is the reply's
// data, kept by the client (the messenger no longer counts it: the reply
// itself is released), and every way of ending a read releases it exactly
// once: many gets, read whole (Read, WriteTo), in part, at offsets, or
// closed at once, twice, leave nothing kept. A read after Close fails.
func TestGetHandsOverAndReleasesReplies(t *testing.T) {
	sizes := []int{0, 1000, 3 << 20, 9<<20 + 5, 11 << 20} // the last multipart
	cl, ctx, objs := oneOSD(t, sizes...)
	o, err := cl.GetObject(ctx, "bkt", "s2", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h, in := client.HeldBytes(cl), client.MessengerStats(cl).Recv.InFlight; h != 3<<20 || in != 0 {
		t.Fatalf("open 3 MiB object: %d bytes kept by the client, %d held by the messenger; want the data kept, the reply released", h, in)
	}
	o.Close()
	o.Close()
	checkNothingHeld(t, cl)
	if _, err := o.Read(make([]byte, 10)); !errors.Is(err, client.ErrObjectClosed) {
		t.Errorf("Read after Close: %v, want ErrObjectClosed", err)
	}
	if _, err := o.ReadAt(make([]byte, 10), 5); !errors.Is(err, client.ErrObjectClosed) {
		t.Errorf("ReadAt after Close: %v, want ErrObjectClosed", err)
	}
	if _, err := o.WriteTo(io.Discard); !errors.Is(err, client.ErrObjectClosed) {
		t.Errorf("WriteTo after Close: %v, want ErrObjectClosed", err)
	}
	if _, err := o.Seek(0, io.SeekStart); !errors.Is(err, client.ErrObjectClosed) {
		t.Errorf("Seek after Close: %v, want ErrObjectClosed", err)
	}
	checkNothingHeld(t, cl)
	// Read to the end, the window goes back before Close.
	if o, err = cl.GetObject(ctx, "bkt", "s2", client.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(o); err != nil || !bytes.Equal(got, objs[2]) {
		t.Fatalf("s2: %d bytes, %v", len(got), err)
	}
	checkNothingHeld(t, cl)
	o.Close()

	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 12 {
				k := (g + i) % len(objs)
				data := objs[k]
				o, err := cl.GetObject(ctx, "bkt", fmt.Sprintf("s%d", k), client.GetOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				var got []byte
				switch i % 5 {
				case 0:
					got, err = io.ReadAll(o)
				case 1:
					var b bytes.Buffer
					_, err = io.Copy(&b, o) // WriteTo
					got = b.Bytes()
				case 2: // a little, then Close
					got = make([]byte, min(len(data), 100))
					_, err = io.ReadFull(o, got)
					data = data[:len(got)]
				case 3: // ReadAt across a window or part boundary
					off := max(0, min(len(data)-10, 8<<20-5))
					got = make([]byte, len(data)-off)
					_, err = o.ReadAt(got, int64(off))
					if len(got) == 0 && err == io.EOF {
						err = nil // at the end: io.ReaderAt allows either
					}
					data = data[off:]
				case 4: // Close at once
					data = nil
				}
				o.Close()
				if err != nil || !bytes.Equal(got, data) {
					t.Errorf("s%d, way %d: %d bytes, %v", k, i%5, len(got), err)
				}
			}
		})
	}
	wg.Wait()
	checkNothingHeld(t, cl)
}

// TestOpenObjectsHoldNoCredit: Objects opened and not read keep their
// first windows, all of them and not copies (the client keeps every byte
// of them), yet the replies are released: more than a session's receive
// window (64 MiB) and more messages than it was allowed to hold before
// are kept, the messenger holds nothing, and a further read on the same
// session goes through.
func TestOpenObjectsHoldNoCredit(t *testing.T) {
	const n = 20
	var sizes []int
	for range n {
		sizes = append(sizes, 128<<10)
	}
	for range n {
		sizes = append(sizes, 4<<20) // 80 MiB, more than a session's 64 MiB window
	}
	sizes = append(sizes, 9<<20)
	cl, ctx, objs := oneOSD(t, sizes...)
	var open []*client.Object
	var want int64
	for i := range 2 * n {
		o, err := cl.GetObject(ctx, "bkt", fmt.Sprintf("s%d", i), client.GetOptions{})
		if err != nil {
			t.Fatalf("opening object %d: %v", i, err)
		}
		open = append(open, o)
		want += int64(sizes[i])
	}
	if h, in := client.HeldBytes(cl), client.MessengerStats(cl).Recv.InFlight; h != want || in != 0 {
		t.Fatalf("%d objects open: %d bytes kept, %d held by the messenger; want %d kept, none held", len(open), h, in, want)
	}
	last := len(objs) - 1
	if got, _, err := osdtest.Get(ctx, cl, "bkt", fmt.Sprintf("s%d", last), client.GetOptions{}); err != nil || !bytes.Equal(got, objs[last]) {
		t.Fatalf("a read while %d objects are open: %d bytes, %v", len(open), len(got), err)
	}
	for i, o := range open {
		got, err := io.ReadAll(o)
		o.Close()
		if err != nil || !bytes.Equal(got, objs[i]) {
			t.Fatalf("object %d: %d bytes, %v", i, len(got), err)
		}
	}
	checkNothingHeld(t, cl)
}

// TestGetChecksumsOnce: a whole read checks the object's CRC32C from the
// CRCs the client's messenger verified its windows against, so the client
// reads none of the bytes again for it; only windows that came without a
// verified CRC (a transport or sender that skips it) are checksummed by
// the client, once. Either way each byte is checksummed once in the
// client, and a range read checksums nothing more.
func TestGetChecksumsOnce(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8})
	var left, done, withCRC atomic.Int32
	var strip atomic.Bool
	cl := c.Client(t, func(o *client.Options) {
		o.Transports = []wire.Transport{crcStrippingTCP{corruptingTCP{left: &left, done: &done, withCRC: &withCRC}, &strip}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	const size = 9<<20 + 5 // two windows
	data := osdtest.Payload(size, 9)
	if _, err := osdtest.Put(ctx, cl, "bkt", "k", data, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		strip bool
		opts  client.GetOptions
		want  int64 // bytes the client checksums itself
		whole int
	}{
		{false, client.GetOptions{}, 0, 1},
		{true, client.GetOptions{}, size, 1},
		{true, client.GetOptions{Range: true, Offset: 100, Length: 1 << 20}, 0, 0},
	} {
		strip.Store(tc.strip)
		o, err := cl.GetObject(ctx, "bkt", "k", tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, err = io.Copy(&b, o)
		crcd, whole := client.CRCBytes(o), client.WholePartFetches(o)
		o.Close()
		want := data
		if tc.opts.Range {
			want = data[tc.opts.Offset : tc.opts.Offset+tc.opts.Length]
		}
		if err != nil || !bytes.Equal(b.Bytes(), want) {
			t.Fatalf("%+v: %d bytes, %v", tc, b.Len(), err)
		}
		if crcd != tc.want || whole != tc.whole {
			t.Errorf("CRCs stripped %v, %+v: the client checksummed %d bytes itself and checked %d objects whole; want %d, %d", tc.strip, tc.opts, crcd, whole, tc.want, tc.whole)
		}
	}
	checkNothingHeld(t, cl)
}

// crcStrippingTCP is TCP whose links, while strip is set, hand frames up
// without the data CRC they verified, as a link that skips it would.
type crcStrippingTCP struct {
	corruptingTCP
	strip *atomic.Bool
}

func (t crcStrippingTCP) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
	l, err := t.corruptingTCP.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	return crcStrippingLink{l.(corruptingLink), t.strip}, nil
}

type crcStrippingLink struct {
	corruptingLink
	strip *atomic.Bool
}

func (l crcStrippingLink) ReadFrame(f *wire.Frame) error {
	err := l.corruptingLink.ReadFrame(f)
	if err == nil && l.strip.Load() {
		f.DataCRC, f.HasDataCRC = 0, false
	}
	return err
}

// TestBodiesNotCopied: a put reads its body straight into a pooled send
// buffer and a get hands over the reply's buffer, so neither allocates
// anything like the body per op (they allocated one each, and a get
// copied it).
func TestBodiesNotCopied(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	const size, ops = 4 << 20, 16
	cl, ctx, objs := oneOSD(t, size)
	allocated := func(op func() error) uint64 {
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		for range ops {
			if err := op(); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&b)
		return (b.TotalAlloc - a.TotalAlloc) / ops
	}
	put := allocated(func() error {
		_, err := osdtest.Put(ctx, cl, "bkt", "s0", objs[0], client.PutOptions{})
		return err
	})
	get := allocated(func() error { return discardObject(ctx, cl, "bkt", "s0", size) })
	if put > size/2 || get > size/2 {
		t.Fatalf("a 4 MiB put allocates %d bytes, a get %d: want well under 4 MiB", put, get)
	}
	t.Logf("allocated per 4 MiB op, cluster included: put %d bytes, get %d", put, get)
}

// TestGetChecksWhatTheOSDSent: bytes an OSD sends wrong, with a frame CRC
// that matches them (the messenger's check passes, and its CRC stands for
// the bytes in the client's), do not match the CRC32C the OSD's store
// recorded for them (the reply's data_crc32c): the client reads them again,
// checked by the OSD, and gets them right. Sent wrong twice, the object's
// CRC32C still fails them: a whole read is BadDigest, for a plain object in
// one window or several and for a part, and the next read succeeds.
func TestGetChecksWhatTheOSDSent(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8})
	var left, done, withCRC, readLeft atomic.Int32
	cl := c.Client(t, func(o *client.Options) {
		o.Transports = []wire.Transport{corruptingTCP{left: &left, done: &done, withCRC: &withCRC, readLeft: &readLeft}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	objs := map[string][]byte{"one": osdtest.Payload(1<<20, 1), "two": osdtest.Payload(9<<20, 2), "mp": osdtest.Payload(11<<20, 3)}
	for k, data := range objs {
		if _, err := osdtest.Put(ctx, cl, "bkt", k, data, client.PutOptions{PartSize: 5 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"one", "two", "mp"} {
		readLeft.Store(1)
		if got, _, err := osdtest.Get(ctx, cl, "bkt", k, client.GetOptions{}); err != nil || !bytes.Equal(got, objs[k]) {
			t.Errorf("%s sent wrong once: %d bytes, %v; want it read again, right", k, len(got), err)
		}
		if readLeft.Load() >= 0 {
			t.Errorf("%s: the get read no window twice", k)
		}
		readLeft.Store(2)
		if got, _, err := osdtest.Get(ctx, cl, "bkt", k, client.GetOptions{}); !errors.Is(err, client.ErrBadDigest) {
			t.Errorf("%s sent wrong twice: %d bytes, %v; want BadDigest", k, len(got), err)
		}
		readLeft.Store(0)
		if got, _, err := osdtest.Get(ctx, cl, "bkt", k, client.GetOptions{}); err != nil || !bytes.Equal(got, objs[k]) {
			t.Errorf("%s: %d bytes, %v", k, len(got), err)
		}
	}
	checkNothingHeld(t, cl)
}
