package store

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ospreystore/osprey/msgr/wire"
)

// receivedBody returns a data segment as the messenger hands it to the
// OSD: a MESSAGE frame of size data bytes read by a stream link, which
// places the data on a wire.DataAlign boundary.
func receivedBody(t *testing.T, size int) (data []byte, release func()) {
	t.Helper()
	front := []byte("an op's front")
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i*13 + 5)
	}
	p := wire.Preamble{Tag: wire.TagMessage, Type: 1, Seq: 1, FrontLen: uint32(len(front)), DataLen: uint32(size)}
	stream := make([]byte, wire.PreambleSize, p.WireSize())
	p.Put(stream)
	stream = append(append(stream, front...), body...)
	var epi [wire.EpilogueSize]byte
	wire.PutEpilogue(epi[:], wire.CRC(front), wire.CRC(body))
	stream = append(stream, epi[:]...)
	var f wire.Frame
	link := wire.NewReaderLink(bytes.NewReader(stream), 0, wire.Limits{MaxFront: 1 << 10, MaxData: 64 << 20})
	if err := link.ReadFrame(&f); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Data, body) {
		t.Fatal("the frame read back holds other bytes")
	}
	return f.Data, f.Release
}

// TestWriteBodyAlignedNoBounce: a body the messenger received (its data on
// a 4 KiB boundary, its length a multiple of 4 KiB, as a 4 MiB object's)
// goes to its data file with O_DIRECT straight from the receive buffer,
// with no bounce copy; a misaligned one is copied (the control that shows
// the count works), and both files hold the body, zero-padded.
func TestWriteBodyAlignedNoBounce(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("O_DIRECT data files are Linux-only")
	}
	dir := t.TempDir()
	s, err := Open(context.Background(), Options{Dir: filepath.Join(dir, "db"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write := func(name string, body []byte) {
		t.Helper()
		path := filepath.Join(dir, name)
		f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := s.writeBody(f, body); err != nil {
			t.Fatal(err)
		}
		if s.files.buffered.Load() {
			t.Skipf("%s does not take O_DIRECT: data files are written buffered there", dir)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if want := append(bytes.Clone(body), make([]byte, paddedLen(len(body))-len(body))...); !bytes.Equal(got, want) {
			t.Fatalf("%s: the file holds %d bytes, not the %d-byte body zero-padded", name, len(got), len(body))
		}
	}
	for _, size := range []int{4 << 10, 4 << 20, 8 << 20} {
		body, release := receivedBody(t, size)
		if uintptr(unsafe.Pointer(unsafe.SliceData(body)))%dataAlign != 0 {
			t.Fatalf("the messenger handed a %d-byte body at %p, not on %d", size, unsafe.SliceData(body), dataAlign)
		}
		if n := bounceBuffersMade(func() { write("aligned", body) }); n != 0 {
			t.Fatalf("%d-byte received body: %d bounce buffers taken, want none", size, n)
		}
		// The same bytes 8 bytes off the boundary must be copied.
		off := make([]byte, size+dataAlign+8)
		k := (dataAlign-int(uintptr(unsafe.Pointer(&off[0]))%dataAlign))%dataAlign + 8
		mis := off[k : k+size]
		copy(mis, body)
		if n := bounceBuffersMade(func() { write("misaligned", mis) }); n != 1 {
			t.Fatalf("%d-byte misaligned body: %d bounce buffers taken, want 1 (is the count broken?)", size, n)
		}
		release()
	}
}
