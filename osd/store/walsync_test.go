package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// walSyncFS is the OS filesystem, counting the syncs of Pebble's WAL files.
type walSyncFS struct {
	vfs.FS
	syncs atomic.Int64
}

func (fs *walSyncFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &walSyncFile{File: f, n: &fs.syncs}, nil
}

func (fs *walSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *walSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

type walSyncFile struct {
	vfs.File
	n *atomic.Int64
}

func (f *walSyncFile) Sync() error     { f.n.Add(1); return f.File.Sync() }
func (f *walSyncFile) SyncData() error { f.n.Add(1); return f.File.SyncData() }
func (f *walSyncFile) SyncTo(length int64) (bool, error) {
	f.n.Add(1)
	return f.File.SyncTo(length)
}

// TestWALSyncsShared: a synced put waits for the WAL's next sync, which
// comes no sooner than WALMinSyncInterval after the last one, so the puts
// of concurrent writers share syncs instead of each syncing alone; and
// every put acknowledged is durable: a power cut that loses everything not
// synced keeps them all.
func TestWALSyncsShared(t *testing.T) {
	const writers, each = 8, 5
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	fs := &walSyncFS{FS: mem}
	// An interval far longer than a commit's CPU, so that every writer
	// commits again before the next sync even on a loaded machine.
	opts := store.Options{Dir: "/db", Logger: quietLogger(), WALMinSyncInterval: 50 * time.Millisecond}
	s, err := store.Open(ctx, store.WithFSForTest(opts, fs))
	must(t, err)
	defer s.Close()
	must(t, s.Apply(ctx, 0, &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: 1}, Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: "b"}, nil))
	body := []byte("body")
	before := fs.syncs.Load()
	var wg sync.WaitGroup
	for w := range writers {
		pg := uint32(w + 1)
		wg.Go(func() {
			for i := range each {
				le := putEntry(&osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: uint64(i + 1)}, Req: &osdpb.ReqID{Client: uint64(pg), Tid: uint64(i + 1)},
					Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: fmt.Sprintf("w%d-%d", w, i)}, body)
				if err := s.Apply(ctx, pg, le, body); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	syncs := fs.syncs.Load() - before
	if syncs == 0 || syncs > writers*each/4 {
		t.Fatalf("%d synced puts made %d WAL syncs, want 1 to %d", writers*each, syncs, writers*each/4)
	}
	clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	c, err := store.Open(ctx, store.WithFSForTest(store.Options{Dir: "/db", Logger: quietLogger()}, clone))
	must(t, err)
	defer c.Close()
	for w := range writers {
		for i := range each {
			if _, got, err := c.ReadRange(ctx, "b", fmt.Sprintf("w%d-%d", w, i), 0, -1, nil); err != nil || string(got) != string(body) {
				t.Fatalf("acknowledged put w%d-%d after a power cut: %q, %v", w, i, got, err)
			}
		}
	}
}

// slowSyncFS is the OS filesystem whose WAL syncs take at least d (a slow
// disk).
type slowSyncFS struct {
	walSyncFS
	d time.Duration
}

func (fs *slowSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.walSyncFS.Create(name, c)
	return fs.slow(f, err)
}

func (fs *slowSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.walSyncFS.ReuseForWrite(oldname, newname, c)
	return fs.slow(f, err)
}

func (fs *slowSyncFS) slow(f vfs.File, err error) (vfs.File, error) {
	if w, ok := f.(*walSyncFile); ok && err == nil {
		return &slowSyncFile{walSyncFile: w, d: fs.d}, nil
	}
	return f, err
}

type slowSyncFile struct {
	*walSyncFile
	d time.Duration
}

func (f *slowSyncFile) Sync() error     { time.Sleep(f.d); return f.walSyncFile.Sync() }
func (f *slowSyncFile) SyncData() error { time.Sleep(f.d); return f.walSyncFile.SyncData() }
func (f *slowSyncFile) SyncTo(length int64) (bool, error) {
	time.Sleep(f.d)
	return f.walSyncFile.SyncTo(length)
}

// TestWALFsyncLatencies: the store's stats say how long its WAL syncs
// took (osprey_osd_wal_fsync_duration_seconds): on a disk whose syncs
// take 3 ms, every one is past the bounds below 3 ms, and they sum to at
// least that each.
func TestWALFsyncLatencies(t *testing.T) {
	const slow = 3 * time.Millisecond
	ctx := context.Background()
	fs := &slowSyncFS{walSyncFS: walSyncFS{FS: vfs.NewMem()}, d: slow}
	s, err := store.Open(ctx, store.WithFSForTest(store.Options{Dir: "/db", Logger: quietLogger()}, fs))
	must(t, err)
	defer s.Close()
	must(t, s.Apply(ctx, 0, &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: 1}, Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: "b"}, nil))
	for i := range 5 {
		le := putEntry(&osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: uint64(i + 1)}, Req: &osdpb.ReqID{Client: 1, Tid: uint64(i + 1)},
			Kind: osdpb.OpKind_OP_PUT, Bucket: "b", Key: fmt.Sprint(i)}, []byte("x"))
		must(t, s.Apply(ctx, 1, le, []byte("x")))
	}
	w := s.Stats().WALFsync
	if w.Count < 5 || len(w.Bounds) != len(w.Cumulative) || len(w.Bounds) < 10 || w.Sum < float64(w.Count)*slow.Seconds() {
		t.Fatalf("WAL syncs: %+v", w)
	}
	for i, le := range w.Bounds {
		switch {
		case i > 0 && (le <= w.Bounds[i-1] || w.Cumulative[i] < w.Cumulative[i-1]):
			t.Fatalf("bounds or counts out of order: %+v", w)
		case le < slow.Seconds() && w.Cumulative[i] != 0:
			t.Fatalf("%d syncs of %v at most %gs: %+v", w.Cumulative[i], slow, le, w)
		case w.Cumulative[i] > w.Count:
			t.Fatalf("more syncs at most %gs than in all: %+v", le, w)
		}
	}
}
