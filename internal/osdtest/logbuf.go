package osdtest

import (
	"bytes"
	"sync"
)

// LogBuffer is a log a daemon under test writes (an slog handler's
// io.Writer) while the test reads it: safe for both at once.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what has been written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
