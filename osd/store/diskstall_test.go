package store_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/osd/store"
)

// syncGate holds the syncs of the data files (under data/) while closed.
type syncGate struct {
	mu sync.Mutex
	ch chan struct{}
}

func (g *syncGate) set(closed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case closed && g.ch == nil:
		g.ch = make(chan struct{})
	case !closed && g.ch != nil:
		close(g.ch)
		g.ch = nil
	}
}

func (g *syncGate) wait() {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

type dataSyncFS struct {
	vfs.FS
	g *syncGate
}

func (fs dataSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	if err != nil || !strings.Contains(name, "/data/") {
		return f, err
	}
	return dataSyncFile{f, fs.g}, nil
}

type dataSyncFile struct {
	vfs.File
	g *syncGate
}

func (f dataSyncFile) SyncData() error { f.g.wait(); return f.File.SyncData() }

// TestDataFileStallSeen: a put whose data file's sync hangs (a disk that
// takes only large puts and stops answering) is a stall DiskStall reports,
// though Pebble's health checks do not time data files; it ends with the
// sync.
func TestDataFileStallSeen(t *testing.T) {
	g := &syncGate{}
	defer g.set(false)
	opts := store.WithFSForTest(store.Options{DiskSlowThreshold: 100 * time.Millisecond, DataFileThreshold: 1000, ChunkSize: 256}, dataSyncFS{vfs.Default, g})
	e := newEnv(t, opts)
	e.createBucket(0, "b")
	g.set(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.put(0, "b", "big", bytes.Repeat([]byte{2}, 5000))
	}()
	msgrtest.Eventually(t, 10*time.Second, "DiskStall to report the stuck data file", func() bool {
		d, what := e.s.DiskStall()
		return d > 100*time.Millisecond && what == "write data file"
	})
	g.set(false)
	<-done
	if d, what := e.s.DiskStall(); d != 0 {
		t.Fatalf("DiskStall %v (%s) once the sync went through", d, what)
	}
}

// readStallFS holds the reads of the data files (under data/) while its
// gate is closed, as a disk that takes writes and hangs reads. Its files
// have no fd, so the store reads them through ReadAt, not O_DIRECT.
type readStallFS struct {
	vfs.FS
	g *syncGate
}

func (fs readStallFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil || !strings.Contains(name, "/data/") {
		return f, err
	}
	return readStallFile{f, fs.g}, nil
}

type readStallFile struct {
	vfs.File
	g *syncGate
}

func (f readStallFile) Fd() uintptr { return vfs.InvalidFd }
func (f readStallFile) ReadAt(p []byte, off int64) (int, error) {
	f.g.wait()
	return f.File.ReadAt(p, off)
}

// TestDataFileReadStallSeen: a get whose data file's read hangs (a disk
// that still takes writes) is a stall DiskStall reports, though Pebble's
// health checks time no reads; it ends with the read.
func TestDataFileReadStallSeen(t *testing.T) {
	g := &syncGate{}
	defer g.set(false)
	opts := store.WithFSForTest(store.Options{DiskSlowThreshold: 100 * time.Millisecond, DataFileThreshold: 1000, ChunkSize: 256, ReadCacheSize: -1}, readStallFS{vfs.Default, g})
	e := newEnv(t, opts)
	e.createBucket(0, "b")
	body := bytes.Repeat([]byte{3}, 5000)
	e.put(0, "b", "big", body)
	g.set(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.mustRead("b", "big", body)
	}()
	msgrtest.Eventually(t, 10*time.Second, "DiskStall to report the stuck read", func() bool {
		d, what := e.s.DiskStall()
		return d > 100*time.Millisecond && strings.HasPrefix(what, "read ") && strings.Contains(what, "/data/")
	})
	g.set(false)
	<-done
	if d, what := e.s.DiskStall(); d != 0 {
		t.Fatalf("DiskStall %v (%s) once the read went through", d, what)
	}
}
