package osdtest

import (
	"syscall"
	"testing"
	"time"
)

// ProcessCPU is the user+system CPU time of the process so far.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPU adds the process's CPU time per op since cpu0 (cpu-us/op): on
// a shared machine the CPU an op costs is a steadier figure than its
// ns/op, which is mostly waiting for the disk and for other processes.
func ReportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64((ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}
