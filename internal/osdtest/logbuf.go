package osdtest

import "github.com/ospreystore/osprey/internal/logbuf"

// LogBuffer is a log a daemon under test writes (an slog handler's
// io.Writer) while the test reads it: safe for both at once.
type LogBuffer = logbuf.Buffer
