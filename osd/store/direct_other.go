//go:build !linux

package store

// writeDirect is Linux-only; elsewhere data files are written buffered.
func writeDirect(fd int, body []byte) (supported bool, err error) { return false, nil }
