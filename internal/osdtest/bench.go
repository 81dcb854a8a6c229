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

// BenchOps runs op from parallelism goroutines per GOMAXPROCS
// (testing.B.SetParallelism), i counting each goroutine's calls, and
// reports beside the usual the process's CPU time per GB of size-byte
// payloads (cpu-s/GB) and per op (cpu-µs/op): on a shared machine the
// figures to trust, where MB/s moves with the neighbours.
func BenchOps(b *testing.B, size int64, parallelism int, op func(i int) error) {
	b.SetBytes(size)
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	cpu0 := ProcessCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if err := op(i); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	cpu := ProcessCPU() - cpu0
	b.ReportMetric(cpu.Seconds()/(float64(int64(b.N)*size)/1e9), "cpu-s/GB")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}
