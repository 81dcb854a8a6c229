package store_test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"
	"iter"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// quietLogger keeps Pebble's and the store's logs out of test output.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// env is one store under test with a version counter per PG.
type env struct {
	t    testing.TB
	ctx  context.Context
	s    *store.Store
	opts store.Options
	seq  map[uint32]uint64
	tid  uint64
}

func newEnv(t testing.TB, opts store.Options) *env {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	e := &env{t: t, ctx: context.Background(), opts: opts, seq: map[uint32]uint64{}}
	e.open()
	t.Cleanup(func() { e.s.Close() })
	return e
}

func (e *env) open() {
	e.t.Helper()
	s, err := store.Open(e.ctx, e.opts)
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.s = s
}

// reopen closes and reopens the store, as a restart does.
func (e *env) reopen() {
	e.t.Helper()
	if err := e.s.Close(); err != nil {
		e.t.Fatalf("Close: %v", err)
	}
	e.open()
}

// entry builds the next log entry of pg.
func (e *env) entry(pg uint32, kind osdpb.OpKind, bucket, key string) *osdpb.LogEntry {
	e.seq[pg]++
	e.tid++
	return &osdpb.LogEntry{
		Version: &osdpb.Version{Epoch: 1, Seq: e.seq[pg]},
		Req:     &osdpb.ReqID{Client: 42, Tid: e.tid},
		Kind:    kind,
		Bucket:  bucket,
		Key:     key,
	}
}

func putEntry(le *osdpb.LogEntry, body []byte) *osdpb.LogEntry {
	le.Meta = &osdpb.ObjectMeta{
		Size:          uint64(len(body)),
		Crc32C:        crc(body),
		Etag:          "etag",
		MtimeUnixNano: 1700000000,
		ContentType:   "application/octet-stream",
		UserMeta:      map[string]string{"k": "v"},
	}
	return le
}

func (e *env) mustApply(pg uint32, le *osdpb.LogEntry, body []byte) {
	e.t.Helper()
	if err := e.s.Apply(e.ctx, pg, le, body); err != nil {
		e.t.Fatalf("Apply %v %q/%q at %v: %v", le.Kind, le.Bucket, le.Key, le.Version, err)
	}
}

func (e *env) createBucket(pg uint32, name string) {
	e.t.Helper()
	le := e.entry(pg, osdpb.OpKind_OP_CREATE_BUCKET, name, "")
	le.Meta = &osdpb.ObjectMeta{MtimeUnixNano: 1234}
	e.mustApply(pg, le, nil)
}

func (e *env) put(pg uint32, bucket, key string, body []byte) *osdpb.LogEntry {
	e.t.Helper()
	le := putEntry(e.entry(pg, osdpb.OpKind_OP_PUT, bucket, key), body)
	e.mustApply(pg, le, body)
	return le
}

func (e *env) del(pg uint32, bucket, key string) {
	e.t.Helper()
	e.mustApply(pg, e.entry(pg, osdpb.OpKind_OP_DELETE, bucket, key), nil)
}

// read reads a whole object.
func (e *env) read(bucket, key string) (*osdpb.ObjectMeta, []byte, error) {
	return e.s.ReadRange(e.ctx, bucket, key, 0, -1, nil)
}

func (e *env) mustRead(bucket, key string, want []byte) {
	e.t.Helper()
	meta, got, err := e.read(bucket, key)
	if err != nil {
		e.t.Fatalf("read %q/%q: %v", bucket, key, err)
	}
	if !bytes.Equal(got, want) {
		e.t.Fatalf("read %q/%q: %d bytes differ from the %d put", bucket, key, len(got), len(want))
	}
	if meta.Size != uint64(len(want)) || meta.Crc32C != crc(want) {
		e.t.Fatalf("read %q/%q: meta size %d crc %08x, want %d %08x", bucket, key, meta.Size, meta.Crc32C, len(want), crc(want))
	}
}

func (e *env) checkIntegrity() {
	e.t.Helper()
	if err := e.s.CheckIntegrityForTest(); err != nil {
		e.t.Fatalf("integrity: %v", err)
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantCorrupt checks that each range (offset, length) of bucket/key fails
// with a CorruptError naming chunk, appends nothing to the caller's bytes,
// and that the store counted the corruption.
func (e *env) wantCorrupt(bucket, key string, chunk int64, ranges ...[2]int64) {
	e.t.Helper()
	for _, rg := range ranges {
		_, got, err := e.s.ReadRange(e.ctx, bucket, key, rg[0], rg[1], []byte("x"))
		wantErr(e.t, err, store.ErrCorrupt)
		var ce *store.CorruptError
		if !errors.As(err, &ce) || ce.Bucket != bucket || ce.Key != key || ce.Chunk != chunk {
			e.t.Fatalf("range %v: %#v", rg, err)
		}
		if string(got) != "x" {
			e.t.Fatalf("corrupt read returned bytes %q", got)
		}
	}
	if e.s.Stats().Corruptions == 0 {
		e.t.Fatal("corruption not counted")
	}
}

// parkedRead runs read on a goroutine of its own and returns once read
// has reached its first data-file read, where it stays parked until
// release; later file reads pass. wait returns what read returned.
func (e *env) parkedRead(read func() ([]byte, error)) (release func(), wait func() ([]byte, error)) {
	parked, rel := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	e.s.SetBeforeFileReadForTest(func() {
		if first.Swap(false) {
			close(parked)
			<-rel
		}
	})
	type result struct {
		body []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		body, err := read()
		done <- result{body, err}
	}()
	<-parked
	return func() { close(rel) }, func() ([]byte, error) { r := <-done; return r.body, r.err }
}

// rangesOf yields every range [off, end) of an object of size bytes with
// off one of offs and end one of offs or size.
func rangesOf(offs []int64, size int64) iter.Seq2[int64, int64] {
	return func(yield func(int64, int64) bool) {
		for _, off := range offs {
			if off < 0 || off >= size {
				continue
			}
			for _, end := range append(offs, size) {
				if end > off && end <= size && !yield(off, end) {
					return
				}
			}
		}
	}
}
