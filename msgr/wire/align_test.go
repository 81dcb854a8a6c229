package wire

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"unsafe"
)

func aligned(b []byte) bool { return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%DataAlign == 0 }

// alignSizes cover both read paths (a small frame copied out of the read
// chunk, a large one read into a buffer of its own) and both sides of
// their thresholds: bigFrameBytes, growFrom, the buffer size classes.
var alignSizes = []int{1, 7, 4095, 4096, 4097, 16 << 10, bigFrameBytes - 200, bigFrameBytes, bigFrameBytes + 1,
	1 << 20, 4 << 20, 4<<20 + 1, growFrom - 100, 8 << 20}

// TestReceivedDataAligned: whatever its size and its front's, a received
// data segment starts on a DataAlign boundary, holds the bytes sent, and
// comes with the CRC the link verified. Frames are read back to back, so
// small ones share the read chunk.
func TestReceivedDataAligned(t *testing.T) {
	for _, calm := range []bool{true, false} {
		t.Run(fmt.Sprintf("calm=%v", calm), func(t *testing.T) {
			opts := LinkOptions{Limits: Limits{MaxFront: 1 << 20, MaxData: 16 << 20}}
			if !calm {
				// A budget smaller than the frames: a large one starts in a
				// small buffer and grows (readBody), leading over it.
				opts.Budget = NewBudget(1 << 20)
			}
			w, r := linkPair(t, "tcp", 0, opts)
			var batch []Frame
			for i, size := range alignSizes {
				for _, front := range []int{0, 100, 5000} {
					batch = append(batch, msgFrame(uint64(i*3+front%7+1), front, size))
				}
			}
			werr := make(chan error, 1)
			go func() { werr <- w.WriteFrames(batch) }()
			for i := range batch {
				var f Frame
				if err := r.ReadFrame(&f); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				checkFrame(t, i, &f, &batch[i])
				if !aligned(f.Data) {
					t.Errorf("frame %d (front %d, data %d): data at %p, not on %d", i, len(f.Front), len(f.Data), unsafe.SliceData(f.Data), DataAlign)
				}
				if !f.HasDataCRC || f.DataCRC != CRC(batch[i].Data) {
					t.Errorf("frame %d: data crc %08x (known %v), want %08x", i, f.DataCRC, f.HasDataCRC, CRC(batch[i].Data))
				}
				f.Release() // the budget must be given back for the next
			}
			if err := <-werr; err != nil {
				t.Fatal(err)
			}
			if st := opts.Budget.Stats(); st.InFlight != 0 {
				t.Fatalf("budget holds %d bytes after every frame was released", st.InFlight)
			}
		})
	}
}

// TestGetAligned: the byte asked for is aligned whatever the buffer's
// class, and the run fits the buffer.
func TestGetAligned(t *testing.T) {
	for _, n := range []int{1, 100, 4096, 5000, 1 << 20} {
		for _, at := range []int{0, 1, 100, 4096, 4097, n} {
			if at > n {
				continue
			}
			buf, b := GetAligned(n, at)
			if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))) + uintptr(at); len(b) != n || p%DataAlign != 0 {
				t.Fatalf("GetAligned(%d, %d): len %d, byte %d at %#x", n, at, len(b), at, p)
			}
			buf.Release()
		}
	}
}

// TestWriteUsesGivenDataCRC: a frame whose sender knows its data CRC is
// written with it and without a pass over the data; the bytes are those a
// computed CRC gives. A wrong one is refused by the reader as corruption.
func TestWriteUsesGivenDataCRC(t *testing.T) {
	data := pattern(100<<10, 3) // written as its own iovec
	small := pattern(300, 4)    // copied into the write buffer
	var passes int
	testHookDataCRC = func(n int) { passes++ }
	defer func() { testHookDataCRC = nil }()
	encode := func(d []byte, crc uint32, known bool) []byte {
		var out bytes.Buffer
		f := msgFrame(1, 50, 0)
		f.Data, f.DataCRC, f.HasDataCRC = d, crc, known
		if err := writerLink(&out, 0, false).WriteFrames([]Frame{f}); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	for _, d := range [][]byte{data, small} {
		passes = 0
		computed := encode(d, 0, false)
		if passes != 1 {
			t.Fatalf("%d bytes without a CRC: %d passes, want 1", len(d), passes)
		}
		passes = 0
		given := encode(d, CRC(d), true)
		if passes != 0 {
			t.Fatalf("%d bytes with the sender's CRC: %d passes over the data, want 0", len(d), passes)
		}
		if !bytes.Equal(computed, given) {
			t.Fatalf("%d bytes: the frame with the sender's CRC differs from the computed one", len(d))
		}
		var f Frame
		if err := NewReaderLink(bytes.NewReader(given), 0, testLimits).ReadFrame(&f); err != nil {
			t.Fatal(err)
		}
		f.Release()
		wrong := encode(d, CRC(d)^1, true)
		err := NewReaderLink(bytes.NewReader(wrong), 0, testLimits).ReadFrame(&f)
		if !errors.Is(err, ErrCRC) {
			t.Fatalf("%d bytes with a wrong CRC: read %v, want ErrCRC", len(d), err)
		}
		// With NO_DATA_CRC agreed the CRC is neither computed nor sent.
		passes = 0
		var out bytes.Buffer
		f = msgFrame(1, 50, 0)
		f.Data, f.DataCRC, f.HasDataCRC = d, CRC(d)^1, true
		if err := writerLink(&out, FeatureNoDataCRC, true).WriteFrames([]Frame{f}); err != nil {
			t.Fatal(err)
		}
		f = Frame{}
		if err := NewReaderLink(&out, FeatureNoDataCRC, testLimits).ReadFrame(&f); err != nil {
			t.Fatal(err)
		}
		if passes != 0 || f.HasDataCRC {
			t.Fatalf("NO_DATA_CRC: %d passes, received frame claims a data CRC: %v", passes, f.HasDataCRC)
		}
		f.Release()
	}
}
