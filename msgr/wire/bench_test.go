package wire

import (
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"
)

func BenchmarkParsePreamble(b *testing.B) {
	var buf [PreambleSize]byte
	(&Preamble{Tag: TagMessage, Type: 7, FrontLen: 100, DataLen: 4000, Seq: 1 << 20, Ack: 1 << 19,
		GrantMsgs: 1 << 21, GrantBytes: 1 << 30}).Put(buf[:])
	var p Preamble
	b.ReportAllocs()
	b.SetBytes(PreambleSize)
	for b.Loop() {
		if err := p.Parse(buf[:], testLimits); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPutPreamble(b *testing.B) {
	var buf [PreambleSize]byte
	p := Preamble{Tag: TagMessage, Type: 7, FrontLen: 100, DataLen: 4000, Seq: 1 << 20, Ack: 1 << 19,
		GrantMsgs: 1 << 21, GrantBytes: 1 << 30}
	b.ReportAllocs()
	b.SetBytes(PreambleSize)
	for b.Loop() {
		p.Seq++
		p.Put(buf[:])
	}
}

// repeatReader returns b over and over; b holds whole frames, so it reads
// as an endless stream of valid frames.
type repeatReader struct {
	b   []byte
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.b[r.off:])
		n += c
		r.off = (r.off + c) % len(r.b)
	}
	return n, nil
}

// BenchmarkStreamWriteRead measures the stream framing alone: encoding
// frames into an io.Discard writer (one frame per call, and batches), and
// decoding them from an endless in-memory stream. Each op is one frame.
func BenchmarkStreamWriteRead(b *testing.B) {
	for _, size := range []int{64, 4 << 10} {
		name := fmt.Sprintf("%dB", size)
		if size >= 1<<10 {
			name = fmt.Sprintf("%dKiB", size>>10)
		}
		frame := Frame{
			Preamble: Preamble{Tag: TagMessage, Type: 1, Seq: 1, Ack: 1, GrantMsgs: 1024, GrantBytes: 64 << 20},
			Front:    make([]byte, 16),
			Data:     make([]byte, size-16),
		}
		wire := int64(encodeFrameLen(frame))
		b.Run("write/"+name, func(b *testing.B) {
			l := writerLink(io.Discard, 0, false)
			frames := []Frame{frame}
			b.ReportAllocs()
			b.SetBytes(wire)
			for b.Loop() {
				if err := l.WriteFrames(frames); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("write-batch32/"+name, func(b *testing.B) {
			l := writerLink(io.Discard, 0, false)
			frames := make([]Frame, 32)
			for i := range frames {
				frames[i] = frame
			}
			b.ReportAllocs()
			b.SetBytes(32 * wire)
			for b.Loop() {
				if err := l.WriteFrames(frames); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(32*b.N), "ns/frame")
		})
		b.Run("read/"+name, func(b *testing.B) {
			var stream []byte
			for range 64 {
				stream = append(stream, encodeFrame(frame.Preamble, frame.Front, frame.Data)...)
			}
			l := NewReaderLink(&repeatReader{b: stream}, 0, testLimits)
			var f Frame
			b.ReportAllocs()
			b.SetBytes(wire)
			for b.Loop() {
				if err := l.ReadFrame(&f); err != nil {
					b.Fatal(err)
				}
				f.Release()
			}
		})
		// A frame of a front only, of the same size: handed out in the
		// read chunk, with no copy.
		b.Run("read-front/"+name, func(b *testing.B) {
			var stream []byte
			for range 64 {
				stream = append(stream, encodeFrame(frame.Preamble, make([]byte, size), nil)...)
			}
			l := NewReaderLink(&repeatReader{b: stream}, 0, testLimits)
			var f Frame
			b.ReportAllocs()
			b.SetBytes(int64(encodeFrameLen(Frame{Preamble: frame.Preamble, Front: make([]byte, size)})))
			for b.Loop() {
				if err := l.ReadFrame(&f); err != nil {
					b.Fatal(err)
				}
				f.Release()
			}
		})
	}
}

// BenchmarkStreamReadLarge decodes 4 MiB frames, each read into a buffer
// of its own, with its data CRC checked as it arrives; with chunks, the
// link also hands up its 1 MiB chunks' CRCs (LinkOptions.DataChunk). Each
// op is one frame; neither allocates once the pools are warm.
func BenchmarkStreamReadLarge(b *testing.B) {
	frame := msgFrame(1, 100, 4<<20)
	stream := encodeFrame(frame.Preamble, frame.Front, frame.Data)
	for _, chunk := range []int{0, 1 << 20} {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			l := NewReaderLink(&repeatReader{b: stream}, 0, testLimits)
			l.dataChunk = chunk
			var f Frame
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				if err := l.ReadFrame(&f); err != nil {
					b.Fatal(err)
				}
				if chunk > 0 && len(f.DataChunkCRCs) != 4 {
					b.Fatalf("%d chunk crcs", len(f.DataChunkCRCs))
				}
				f.Release()
			}
		})
	}
}

// BenchmarkStreamTCPLarge moves 4 MiB frames over loopback TCP, the
// reader checking each data CRC as it arrives (the sender's is known, as
// an OSD forwarding a put has it), with body reads uncapped and capped at
// sumReadMax. It reports the CPU both ends spend per GB (getrusage, the
// whole process): run with -count to alternate them. NB: on one link
// alone the cap halves the CRC's share (perf) but the totals stay within
// this VM's noise; it pays most where a busy reader finds megabytes
// queued, as OSDs under 16 puts do.
func BenchmarkStreamTCPLarge(b *testing.B) {
	frame := msgFrame(1, 200, 4<<20)
	frame.DataCRC, frame.HasDataCRC = CRC(frame.Data), true
	defer func(v int) { sumReadMax = v }(sumReadMax)
	for _, max := range []int{64 << 20, 256 << 10} {
		name := fmt.Sprintf("read=%dKiB", max>>10)
		if max > len(frame.Data) {
			name = "read=uncapped"
		}
		b.Run(name, func(b *testing.B) {
			sumReadMax = max
			w, r := linkPair(b, "tcp", 0, LinkOptions{Limits: testLimits})
			done := make(chan error, 1)
			n := b.N
			go func() {
				frames := []Frame{frame}
				for range n {
					if err := w.WriteFrames(frames); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			b.SetBytes(int64(len(frame.Data)))
			cpu0 := processCPU()
			b.ResetTimer()
			var f Frame
			for range n {
				if err := r.ReadFrame(&f); err != nil {
					b.Fatal(err)
				}
				f.Release()
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric((processCPU()-cpu0).Seconds()/(float64(n)*float64(len(frame.Data))/1e9), "cpu-s/GB")
		})
	}
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
