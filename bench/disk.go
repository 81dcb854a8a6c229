package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DiskCeiling is what the disk under a directory allows, measured as puts
// use it: ceilingStreams writers at once (a cluster has many puts in
// flight, and a disk takes parallel synced writes faster than one stream),
// each writing 4 MiB pieces to a file of its own and syncing (fdatasync)
// after each, with O_DIRECT where the filesystem takes it; then the same
// bytes read back with O_DIRECT. An object benchmark's rows read as a
// fraction of it.
type DiskCeiling struct {
	Dir              string  `json:"dir"`
	WriteBytesPerSec float64 `json:"write_bytes_per_sec"`
	ReadBytesPerSec  float64 `json:"read_bytes_per_sec"`
	// Direct is false where the filesystem refused O_DIRECT (tmpfs, some
	// network filesystems): the figures then include the page cache.
	Direct bool `json:"direct"`
}

// 4 streams of 4 synced 4 MiB writes: 64 MiB, a fraction of a second on
// an SSD.
const (
	ceilingPiece   = 4 << 20
	ceilingStreams = 4
	ceilingPerFile = 16 << 20
)

// MeasureDisk measures the disk under dir with temporary files it removes.
func MeasureDisk(ctx context.Context, dir string) (DiskCeiling, error) {
	c := DiskCeiling{Dir: dir, Direct: true}
	fail := func(err error) (DiskCeiling, error) {
		return c, fmt.Errorf("bench: measure the disk under %s: %w", dir, err)
	}
	var fds []int
	defer func() {
		for i, fd := range fds {
			unix.Close(fd)
			os.Remove(ceilingPath(dir, i))
		}
	}()
	for i := range ceilingStreams {
		fd, err := unix.Open(ceilingPath(dir, i), unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, syscall.EINVAL) {
			c.Direct = false
			fd, err = unix.Open(ceilingPath(dir, i), unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
		}
		if err != nil {
			return fail(err)
		}
		fds = append(fds, fd)
	}
	// O_DIRECT wants memory aligned to the logical block: an anonymous
	// mapping is page-aligned. One buffer per stream.
	bufs := make([][]byte, ceilingStreams)
	for i := range bufs {
		b, err := unix.Mmap(-1, 0, ceilingPiece, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			return fail(err)
		}
		defer unix.Munmap(b)
		fillRandom(b, uint64(i+1))
		bufs[i] = b
	}
	// each runs op on every piece of every stream's file, the streams at
	// once, and returns the bytes per second.
	each := func(op func(fd int, b []byte, off int64) error) (float64, error) {
		start := time.Now()
		errs := make(chan error, ceilingStreams)
		for i, fd := range fds {
			go func() {
				for off := int64(0); off < ceilingPerFile; off += ceilingPiece {
					if err := ctx.Err(); err != nil {
						errs <- err
						return
					}
					if err := op(fd, bufs[i], off); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		var first error
		for range fds {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return ceilingStreams * ceilingPerFile / time.Since(start).Seconds(), first
	}
	var err error
	c.WriteBytesPerSec, err = each(func(fd int, b []byte, off int64) error {
		if _, err := unix.Pwrite(fd, b, off); err != nil {
			return err
		}
		return unix.Fdatasync(fd)
	})
	if err != nil {
		return fail(err)
	}
	if !c.Direct {
		// Reads would come from the page cache the writes just filled.
		for _, fd := range fds {
			_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
		}
	}
	c.ReadBytesPerSec, err = each(func(fd int, b []byte, off int64) error {
		_, err := unix.Pread(fd, b, off)
		return err
	})
	if err != nil {
		return fail(err)
	}
	return c, nil
}

func ceilingPath(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf(".osprey-ceiling-%d-%d", os.Getpid(), i))
}
