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

// DiskCeiling is what the disk under a directory allows, measured as a put
// uses it: 4 MiB writes, each synced (fdatasync), with O_DIRECT where the
// filesystem takes it; then the same bytes read back with O_DIRECT. An
// object benchmark's rows read as a fraction of it.
type DiskCeiling struct {
	Dir              string  `json:"dir"`
	WriteBytesPerSec float64 `json:"write_bytes_per_sec"`
	ReadBytesPerSec  float64 `json:"read_bytes_per_sec"`
	// Direct is false where the filesystem refused O_DIRECT (tmpfs, some
	// network filesystems): the figures then include the page cache.
	Direct bool `json:"direct"`
}

// ceilingPiece and ceilingBytes: 16 synced 4 MiB writes, a fraction of a
// second on an SSD.
const (
	ceilingPiece = 4 << 20
	ceilingBytes = 64 << 20
)

// MeasureDisk measures the disk under dir with a temporary file it removes.
func MeasureDisk(ctx context.Context, dir string) (DiskCeiling, error) {
	c := DiskCeiling{Dir: dir, Direct: true}
	path := filepath.Join(dir, fmt.Sprintf(".osprey-ceiling-%d", os.Getpid()))
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, syscall.EINVAL) {
		c.Direct = false
		fd, err = unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return c, fmt.Errorf("bench: measure the disk under %s: %w", dir, err)
	}
	defer os.Remove(path)
	defer unix.Close(fd)
	// O_DIRECT wants memory aligned to the logical block: an anonymous
	// mapping is page-aligned.
	buf, err := unix.Mmap(-1, 0, ceilingPiece, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return c, fmt.Errorf("bench: measure the disk: %w", err)
	}
	defer unix.Munmap(buf)
	fillRandom(buf, 1)

	start := time.Now()
	for off := int64(0); off < ceilingBytes; off += ceilingPiece {
		if err := ctx.Err(); err != nil {
			return c, err
		}
		if _, err := unix.Pwrite(fd, buf, off); err != nil {
			return c, fmt.Errorf("bench: measure the disk under %s: %w", dir, err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			return c, fmt.Errorf("bench: measure the disk under %s: %w", dir, err)
		}
	}
	c.WriteBytesPerSec = ceilingBytes / time.Since(start).Seconds()

	if !c.Direct {
		// Reads would come from the page cache the writes just filled.
		_ = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
	}
	start = time.Now()
	for off := int64(0); off < ceilingBytes; off += ceilingPiece {
		if _, err := unix.Pread(fd, buf, off); err != nil {
			return c, fmt.Errorf("bench: measure the disk under %s: %w", dir, err)
		}
	}
	c.ReadBytesPerSec = ceilingBytes / time.Since(start).Seconds()
	return c, nil
}
