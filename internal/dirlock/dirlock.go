// Package dirlock holds a data directory for one process at a time, with
// an exclusive flock on DIR/LOCK that never waits.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A local cluster (internal/local) and an embedded etcd (mon.StartEtcd)
// hold their directory from before they read or write anything there
// until they close. The lock never waits: a second holder must fail at
// once, naming the directory. Without it, a second embedded etcd on the
// directory blocked for ever in bbolt's open, which waits on its own lock
// with no timeout and heeds no context (so no signal either); and a second
// local cluster overwrote the running one's map before Pebble refused the
// OSDs' stores. The kernel drops the lock when its holder exits, however
// it exits, so the file left behind is harmless and stays.
const lockFile = "LOCK"

// InUseError is Lock's error for a directory another holder has: another
// process, or a holder in this process not yet closed.
type InUseError struct {
	Dir string
	// PID is the holder's process id, as it wrote it in the lock file; 0
	// when unknown.
	PID int
	Err error // flock's
}

func (e *InUseError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%s is in use by %s: it holds the lock on %s", e.Dir, holder, filepath.Join(e.Dir, lockFile))
}

func (e *InUseError) Unwrap() error { return e.Err }

// Lock takes dir's lock, or fails with *InUseError. Closing the file
// releases it.
func Lock(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &InUseError{Dir: dir, PID: lockHolder(path), Err: err}
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
