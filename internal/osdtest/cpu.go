package osdtest

import (
	"testing"
	"time"
)

// ReportCPU adds the process's CPU time per op since cpu0 (cpu-µs/op), as
// BenchOps does, for benchmarks that run their own loop: on a shared
// machine the CPU an op costs is a steadier figure than its ns/op, which
// is mostly waiting for the disk and for other processes.
func ReportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64((ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}
