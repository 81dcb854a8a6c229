package client_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// watchingTCP is TCP whose links report each data segment written from
// the caller's memory, watched (the same bytes, not a copy of them), and
// hold such a write at gate while one is set, or, with swallow set, say
// they wrote it and write nothing: an OSD that hangs, which never acks it.
type watchingTCP struct {
	tcp.Transport
	watched *atomic.Pointer[byte] // the first byte of the caller's body
	sent    *atomic.Int32         // segments written from it
	gate    *atomic.Pointer[chan struct{}]
	held    chan struct{} // a write waits at the gate
	swallow *atomic.Bool
}

func (t watchingTCP) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
	l, err := t.Transport.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	return watchingLink{l, t}, nil
}

type watchingLink struct {
	wire.Link
	t watchingTCP
}

func (l watchingLink) EndHandshake() {
	if e, ok := l.Link.(wire.HandshakeEnder); ok {
		e.EndHandshake()
	}
}

func (l watchingLink) WriteFrames(frames []wire.Frame) error {
	for i := range frames {
		if d := frames[i].Data; len(d) > 0 && unsafe.SliceData(d) == l.t.watched.Load() {
			l.t.sent.Add(1)
			if l.t.swallow.Load() {
				return nil
			}
			if g := l.t.gate.Load(); g != nil {
				l.t.held <- struct{}{}
				<-*g
			}
		}
	}
	return l.Link.WriteFrames(frames)
}

// putBytes is osdtest.Put through PutObjectBytes.
func putBytes(ctx context.Context, cl *client.Client, bucket, key string, data []byte, opts client.PutOptions) (client.ObjectInfo, error) {
	return cl.PutObjectBytes(ctx, bucket, key, data, opts)
}

func watchedClient(t *testing.T) (*client.Client, context.Context, watchingTCP) {
	t.Helper()
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8})
	w := watchingTCP{watched: new(atomic.Pointer[byte]), sent: new(atomic.Int32), gate: new(atomic.Pointer[chan struct{}]),
		held: make(chan struct{}, 1), swallow: new(atomic.Bool)}
	cl := c.Client(t, func(o *client.Options) { o.Transports = []wire.Transport{w} })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	return cl, ctx, w
}

// TestPutObjectBytesSendsInPlace: over TCP, PutObjectBytes writes the
// body to the socket from the caller's bytes, where PutObject copies
// them into a send buffer first; both store the same object. So does
// each part of a body larger than PartSize.
func TestPutObjectBytesSendsInPlace(t *testing.T) {
	cl, ctx, w := watchedClient(t)
	data := osdtest.Payload(1<<20+5, 3)
	w.watched.Store(&data[0])
	if _, err := osdtest.Put(ctx, cl, "bkt", "reader", data, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := w.sent.Load(); n != 0 {
		t.Fatalf("PutObject wrote %d data segments from the caller's reader's bytes, want a copy", n)
	}
	info, err := cl.PutObjectBytes(ctx, "bkt", "bytes", data, client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := w.sent.Load(); n != 1 {
		t.Fatalf("PutObjectBytes wrote %d data segments from the caller's bytes, want 1", n)
	}
	if info.Size != int64(len(data)) || info.CRC32C != crc32c(data) {
		t.Fatalf("PutObjectBytes: %+v", info)
	}
	for _, key := range []string{"reader", "bytes"} {
		if got, _, err := osdtest.Get(ctx, cl, "bkt", key, client.GetOptions{}); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: read back %d bytes: %v", key, len(got), err)
		}
	}
	// Above PartSize, by multipart upload, or as one part in pieces
	// (WholeETag): each part or piece from the caller's bytes too.
	const part = 5 << 20
	big := osdtest.Payload(2*part+1, 4)
	for _, whole := range []bool{false, true} {
		w.watched.Store(&big[part])
		before := w.sent.Load()
		info, err := cl.PutObjectBytes(ctx, "bkt", "big", big, client.PutOptions{PartSize: part, WholeETag: whole})
		if err != nil {
			t.Fatal(err)
		}
		if n := w.sent.Load() - before; n != 1 {
			t.Errorf("WholeETag %v: the second part was written %d times from the caller's bytes, want 1", whole, n)
		}
		if multi := strings.HasSuffix(info.ETag, "-3"); multi == whole || info.Size != int64(len(big)) {
			t.Errorf("WholeETag %v: %+v", whole, info)
		}
		if got, _, err := osdtest.Get(ctx, cl, "bkt", "big", client.GetOptions{}); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("big: read back %d bytes: %v", len(got), err)
		}
	}
}

// TestPutObjectBytesHoldsUntilReleased: PutObjectBytes does not return
// while the messenger may still read the caller's bytes, even once its
// context has ended: here the write of the body is held up, the put's
// context times out, and it returns only after the write.
func TestPutObjectBytesHoldsUntilReleased(t *testing.T) {
	cl, ctx, w := watchedClient(t)
	data := osdtest.Payload(256<<10, 5)
	w.watched.Store(&data[0])
	gate := make(chan struct{})
	w.gate.Store(&gate)
	waiting := make(chan struct{})
	client.SetWaitReleased(t, func(wait func()) {
		close(waiting)
		wait()
	})
	putCtx, cancel := context.WithCancel(ctx)
	returned := make(chan error, 1)
	go func() {
		_, err := cl.PutObjectBytes(putCtx, "bkt", "k", data, client.PutOptions{})
		returned <- err
	}()
	select {
	case <-w.held: // the body's write waits at the gate
	case err := <-returned:
		t.Fatalf("PutObjectBytes returned (%v) without writing from the caller's bytes", err)
	}
	cancel()
	select {
	case <-waiting: // the put gave up and waits for its bytes
	case err := <-returned:
		t.Fatalf("PutObjectBytes returned (%v) while the messenger was writing its bytes", err)
	}
	w.gate.Store(nil)
	close(gate)
	if err := <-returned; !errors.Is(err, context.Canceled) {
		t.Fatalf("a put whose context ended: %v, want context.Canceled", err)
	}
}

// TestPutObjectBytesLetGoOfByAHungOSD: a PutObjectBytes whose body went to
// an OSD that never answers nor acks it (stopped, SIGSTOP: its link stays
// up) returns once its context ends: the client closes the session that
// held the bytes for resending, which releases them, rather than wait for
// the OSD to come back.
func TestPutObjectBytesLetGoOfByAHungOSD(t *testing.T) {
	cl, ctx, w := watchedClient(t)
	data := osdtest.Payload(256<<10, 6)
	w.watched.Store(&data[0])
	w.swallow.Store(true)
	putCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() {
		_, err := cl.PutObjectBytes(putCtx, "bkt", "k", data, client.PutOptions{})
		returned <- err
	}()
	select {
	case err := <-returned:
		if !errors.Is(err, context.DeadlineExceeded) || w.sent.Load() == 0 {
			t.Fatalf("a put to a hung OSD: %v after %d writes of its body, want its context's end", err, w.sent.Load())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("PutObjectBytes still waits for an OSD that never acks its body, 20 s after its context ended")
	}
	// The client dials the OSD again for the next op.
	w.swallow.Store(false)
	if _, err := cl.PutObjectBytes(ctx, "bkt", "k", data, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestDoneContextSendsNothing: an op called with a context already done
// fails with the context's error and is not sent, so nothing of it is
// applied after the caller was told it failed (as net/http sends no
// request then).
func TestDoneContextSendsNothing(t *testing.T) {
	cl, ctx, _ := watchedClient(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cl.PutObjectBytes(done, "bkt", "never", []byte("x"), client.PutOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("PutObjectBytes with a done context: %v", err)
	}
	// The same PG's next write, on the same session: had the first been
	// sent, it would be there before this one.
	if _, err := cl.PutObjectBytes(ctx, "bkt", "never", []byte("yz"), client.PutOptions{IfNoneMatch: "*"}); err != nil {
		t.Fatalf("a put called with a done context was applied: %v", err)
	}
	if err := cl.MakeBucket(done, "never"); !errors.Is(err, context.Canceled) {
		t.Fatalf("MakeBucket with a done context: %v", err)
	}
	if err := cl.MakeBucket(ctx, "never"); err != nil {
		t.Fatalf("a bucket made with a done context exists: %v", err)
	}
}

// TestAbandonedPutFailsItsSessionsOps: the session a PutObjectBytes
// closes when its context ends with its body on the wire fails the other
// ops waiting on it, which retry at once on a new one: a local close
// raises no event, and a StatObject queued behind the put's write waited
// out its whole OpTimeout (review of session 47).
func TestAbandonedPutFailsItsSessionsOps(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8})
	w := watchingTCP{watched: new(atomic.Pointer[byte]), sent: new(atomic.Int32), gate: new(atomic.Pointer[chan struct{}]),
		held: make(chan struct{}, 1), swallow: new(atomic.Bool)}
	const opTimeout = time.Minute
	cl := c.Client(t, func(o *client.Options) { o.Transports = []wire.Transport{w}; o.OpTimeout = opTimeout })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	if _, err := osdtest.Put(ctx, cl, "bkt", "other", []byte("x"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	data := osdtest.Payload(256<<10, 6)
	w.watched.Store(&data[0])
	gate := make(chan struct{})
	w.gate.Store(&gate)
	putCtx, putCancel := context.WithCancel(ctx)
	putDone := make(chan error, 1)
	go func() {
		_, err := cl.PutObjectBytes(putCtx, "bkt", "k", data, client.PutOptions{})
		putDone <- err
	}()
	<-w.held // the put's body is being written, held there
	var old *msgr.Conn
	for cn := range cl.Messenger().Conns() {
		if cn.Peer() == "osd.0" {
			old = cn
		}
	}
	statDone := make(chan error, 1)
	go func() {
		_, err := cl.StatObject(ctx, "bkt", "other")
		statDone <- err
	}()
	msgrtest.Eventually(t, 10*time.Second, "the stat queued behind the put", func() bool { return old.Stats().QueuedMsgs >= 2 })
	putCancel()
	msgrtest.Eventually(t, 10*time.Second, "the put's session closed", func() bool {
		for cn := range cl.Messenger().Conns() {
			if cn == old {
				return false
			}
		}
		return true
	})
	w.gate.Store(nil)
	close(gate)
	select {
	case err := <-statDone:
		if err != nil {
			t.Fatalf("the stat on the closed session: %v", err)
		}
	case <-time.After(opTimeout / 2):
		t.Fatalf("the stat on the session the abandoned put closed still waits, %v on: for its OpTimeout", opTimeout/2)
	}
	if err := <-putDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned put: %v", err)
	}
}
