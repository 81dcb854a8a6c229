// Package logbuf is a log that a daemon under test writes while the test
// reads it. A leaf package, so that tests of packages osdtest imports
// (internal/local) can use it too.
package logbuf

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer for an slog handler, safe to write and read at
// once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what has been written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
