package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A cluster holds its directory with an exclusive flock on DIR/LOCK from
// before Start reads or writes anything there until Close. The lock never
// waits: a second cluster on the directory must fail at once, naming it.
// Without it, the second one's embedded etcd blocked for ever in bbolt's
// open, which waits on its own lock with no timeout and heeds no context
// (so no signal either); and without a mon, a new map overwrote the
// running cluster's before Pebble refused the OSDs' stores. The kernel
// drops the lock when its holder exits, however it exits, so the file
// left behind is harmless and stays.
const lockFile = "LOCK"

// DirInUseError is Start's error for a directory another cluster runs in:
// another process's, or one of this process's not yet closed.
type DirInUseError struct {
	Dir string
	// PID is the holder's process id, as it wrote it in the lock file; 0
	// when unknown.
	PID int
	Err error // flock's
}

func (e *DirInUseError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%s is in use by %s: it holds the lock on %s", e.Dir, holder, filepath.Join(e.Dir, lockFile))
}

func (e *DirInUseError) Unwrap() error { return e.Err }

// lockDir takes dir's lock, or fails with *DirInUseError. Closing the file
// releases it.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &DirInUseError{Dir: dir, PID: lockHolder(path), Err: err}
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	// The pid is only for the error above, best effort: the flock is the
	// lock, and a reader that catches the file between these two writes
	// says "another process".
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// lockHolder is the pid in the lock file at path; 0 when it has none.
func lockHolder(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}
