//go:build !linux

package store

// writeDirect is Linux-only; elsewhere data files are written buffered.
func writeDirect(fd int, body []byte) (supported bool, err error) { return false, nil }

// readDirect is Linux-only; elsewhere data files are read buffered.
func readDirect(fd int, b []byte, off int64) (n int, supported bool, err error) {
	return 0, false, nil
}
