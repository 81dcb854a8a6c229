package store_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ospreystore/osprey/internal/stallfs"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/osd/store"
)

// inData: the data files (under data/).
func inData(name string) bool { return strings.Contains(name, "/data/") }

// TestDataFileStallSeen: a put whose data file's sync hangs (a disk that
// takes only large puts and stops answering) is a stall DiskStall reports,
// though Pebble's health checks do not time data files; it ends with the
// sync.
func TestDataFileStallSeen(t *testing.T) {
	g := stallfs.NewGate()
	defer g.Release()
	opts := store.WithFSForTest(store.Options{DiskSlowThreshold: 100 * time.Millisecond, DataFileThreshold: 1000, ChunkSize: 256}, stallfs.FS{FS: vfs.Default, Gate: g, Ops: stallfs.Syncs, Match: inData})
	e := newEnv(t, opts)
	e.createBucket(0, "b")
	g.Hold()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.put(0, "b", "big", bytes.Repeat([]byte{2}, 5000))
	}()
	msgrtest.Eventually(t, 10*time.Second, "DiskStall to report the stuck data file", func() bool {
		d, what := e.s.DiskStall()
		return d > 100*time.Millisecond && what == "write data file"
	})
	g.Release()
	<-done
	if d, what := e.s.DiskStall(); d != 0 {
		t.Fatalf("DiskStall %v (%s) once the sync went through", d, what)
	}
}

// TestDataFileReadStallSeen: a get whose data file's read hangs (a disk
// that still takes writes) is a stall DiskStall reports, though Pebble's
// health checks time no reads; it ends with the read.
func TestDataFileReadStallSeen(t *testing.T) {
	g := stallfs.NewGate()
	defer g.Release()
	opts := store.WithFSForTest(store.Options{DiskSlowThreshold: 100 * time.Millisecond, DataFileThreshold: 1000, ChunkSize: 256, ReadCacheSize: -1}, stallfs.FS{FS: vfs.Default, Gate: g, Ops: stallfs.Reads, Match: inData})
	e := newEnv(t, opts)
	e.createBucket(0, "b")
	body := bytes.Repeat([]byte{3}, 5000)
	e.put(0, "b", "big", body)
	g.Hold()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.mustRead("b", "big", body)
	}()
	msgrtest.Eventually(t, 10*time.Second, "DiskStall to report the stuck read", func() bool {
		d, what := e.s.DiskStall()
		return d > 100*time.Millisecond && strings.HasPrefix(what, "read ") && strings.Contains(what, "/data/")
	})
	g.Release()
	<-done
	if d, what := e.s.DiskStall(); d != 0 {
		t.Fatalf("DiskStall %v (%s) once the read went through", d, what)
	}
}
