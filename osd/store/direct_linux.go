//go:build linux

package store

import (
	"errors"
	"io"
	"sync"
	"syscall"
	"unsafe"
)

// directPiece is the most one O_DIRECT write takes, and the size of the
// aligned buffers an unaligned body is copied through.
const directPiece = 4 << 20

var directBufs = sync.Pool{New: func() any {
	b := make([]byte, directPiece+dataAlign)
	off := (dataAlign - int(uintptr(unsafe.Pointer(&b[0]))%dataAlign)) % dataAlign
	b = b[off : off+directPiece]
	return &b
}}

// writeDirect writes body, zero-padded to a multiple of dataAlign, at
// offset 0 of the open file fd with O_DIRECT: from the caller's memory
// straight to the device, without filling the page cache. That saves the
// kernel's copy and, more, the allocation of page-cache pages, which on
// this project's VMs costs several milliseconds of CPU per 4 MiB once the
// cache grows into untouched memory (measured with a pwrite+fdatasync
// probe: 7-14 ms of CPU per 4 MiB buffered, under 1 ms direct). Pieces of
// body that are aligned in memory are written from it, all but the last
// partial block of the body, which alone is copied through an aligned
// buffer to be padded; pieces not aligned in memory are copied whole.
//
// supported false means the file or its filesystem refuses O_DIRECT
// (tmpfs, some FUSE and network filesystems) before anything was written:
// the caller writes buffered instead.
func writeDirect(fd int, body []byte) (supported bool, err error) {
	flags, err := fcntl(fd, syscall.F_GETFL, 0)
	if err != nil {
		return false, nil
	}
	if _, err := fcntl(fd, syscall.F_SETFL, flags|syscall.O_DIRECT); err != nil {
		return false, nil
	}
	var buf *[]byte
	defer func() {
		if buf != nil {
			directBufs.Put(buf)
		}
	}()
	// write writes b at off. refused: O_DIRECT (or its alignment) was
	// refused at the first write, which wrote nothing; the flag is off again.
	write := func(b []byte, off int) (refused bool, err error) {
		err = pwriteAll(fd, b, int64(off))
		if err != nil && off == 0 && errors.Is(err, syscall.EINVAL) {
			_, _ = fcntl(fd, syscall.F_SETFL, flags)
			return true, nil
		}
		return false, err
	}
	for off := 0; off < len(body); off += directPiece {
		piece := body[off:min(off+directPiece, len(body))]
		if whole := len(piece) &^ (dataAlign - 1); whole > 0 && whole < len(piece) && uintptr(unsafe.Pointer(&piece[0]))%dataAlign == 0 {
			// The body's last piece, aligned in memory but not a whole
			// number of blocks: its whole blocks go straight from the
			// body, only the partial one through the buffer.
			if refused, err := write(piece[:whole], off); refused || err != nil {
				return !refused, err
			}
			off += whole
			piece = piece[whole:]
		}
		out := piece
		if len(piece)%dataAlign != 0 || uintptr(unsafe.Pointer(&piece[0]))%dataAlign != 0 {
			if buf == nil {
				buf = directBufs.Get().(*[]byte)
			}
			out = (*buf)[:paddedLen(len(piece))]
			n := copy(out, piece)
			clear(out[n:])
		}
		if refused, err := write(out, off); refused || err != nil {
			return !refused, err
		}
	}
	return true, nil
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := syscall.Pwrite(fd, b, off)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

func fcntl(fd, cmd, arg int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), uintptr(arg))
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// readDirect fills b from offset off of the open file fd with O_DIRECT:
// the device writes into b itself, so the read costs the CPU no copy and
// leaves the page cache alone. REQUIRES: b's address, len(b) and off are
// multiples of dataAlign, and fd is used for nothing else meanwhile (the
// flag stays set on it). n short of len(b) means the file ended there.
//
// supported false means the file or its filesystem refuses O_DIRECT before
// anything was read: the caller reads buffered instead.
func readDirect(fd int, b []byte, off int64) (n int, supported bool, err error) {
	flags, err := fcntl(fd, syscall.F_GETFL, 0)
	if err != nil {
		return 0, false, nil
	}
	if flags&syscall.O_DIRECT == 0 {
		if _, err := fcntl(fd, syscall.F_SETFL, flags|syscall.O_DIRECT); err != nil {
			return 0, false, nil
		}
	}
	for n < len(b) {
		k, err := syscall.Pread(fd, b[n:], off+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			if n == 0 && errors.Is(err, syscall.EINVAL) {
				_, _ = fcntl(fd, syscall.F_SETFL, flags)
				return 0, false, nil
			}
			return n, true, err
		}
		if k == 0 {
			break // end of file
		}
		n += k
		if k%dataAlign != 0 {
			break // a direct read stops short only at the end of the file
		}
	}
	return n, true, nil
}
