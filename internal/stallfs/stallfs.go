// Package stallfs is a Pebble filesystem whose writes, syncs or reads a
// test can hold, as a disk that stops answering them: for the tests of
// what the store and the OSD do while their disk hangs (a stall seen and
// acted on, an op answered only once it is durable).
package stallfs

import (
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Gate holds the operations of an FS while closed. Its zero value is
// open.
type Gate struct {
	mu      sync.Mutex
	closed  chan struct{} // nil while open
	entered chan struct{} // an operation is held (buffered 1)
}

// NewGate returns an open gate.
func NewGate() *Gate { return &Gate{entered: make(chan struct{}, 1)} }

// Hold closes the gate: operations wait from now on.
func (g *Gate) Hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
}

// Release opens the gate and lets the held operations go on.
func (g *Gate) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

// Entered receives once an operation is held (one signal at a time; a
// gate made without NewGate has none).
func (g *Gate) Entered() <-chan struct{} { return g.entered }

// Wait returns once the gate is open.
func (g *Gate) Wait() {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed == nil {
		return
	}
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-closed
}

// Ops says which operations an FS holds.
type Ops uint8

const (
	Writes Ops = 1 << iota // Write, WriteAt
	Syncs                  // Sync, SyncData, SyncTo
	// Reads: Read, ReadAt. Such files have no fd (Fd is vfs.InvalidFd),
	// so that the store reads them through ReadAt rather than O_DIRECT.
	Reads
)

// FS is FS with the Ops of the files it opens whose names Match (every
// file when Match is nil) held by Gate.
type FS struct {
	vfs.FS
	Gate  *Gate
	Ops   Ops
	Match func(name string) bool
}

func (fs FS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || fs.Match != nil && !fs.Match(name) {
		return f, err
	}
	return file{f, fs.Gate, fs.Ops}, nil
}

func (fs FS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs FS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

func (fs FS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	return fs.wrap(name, f, err)
}

func (fs FS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	return fs.wrap(name, f, err)
}

type file struct {
	vfs.File
	g   *Gate
	ops Ops
}

func (f file) wait(op Ops) {
	if f.ops&op != 0 {
		f.g.Wait()
	}
}

func (f file) Write(p []byte) (int, error) { f.wait(Writes); return f.File.Write(p) }
func (f file) WriteAt(p []byte, off int64) (int, error) {
	f.wait(Writes)
	return f.File.WriteAt(p, off)
}
func (f file) Sync() error     { f.wait(Syncs); return f.File.Sync() }
func (f file) SyncData() error { f.wait(Syncs); return f.File.SyncData() }
func (f file) SyncTo(n int64) (bool, error) {
	f.wait(Syncs)
	return f.File.SyncTo(n)
}
func (f file) Read(p []byte) (int, error) { f.wait(Reads); return f.File.Read(p) }
func (f file) ReadAt(p []byte, off int64) (int, error) {
	f.wait(Reads)
	return f.File.ReadAt(p, off)
}

func (f file) Fd() uintptr {
	if f.ops&Reads != 0 {
		return vfs.InvalidFd
	}
	return f.File.Fd()
}
