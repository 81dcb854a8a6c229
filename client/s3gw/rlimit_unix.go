//go:build unix

package s3gw

import "syscall"

// openFileLimit is the process's soft limit on open files (which Go
// raises to the hard one at start), or 0 if unknown.
func openFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return uint64(rl.Cur)
}
