package main

// Local files a download writes: as cp does, a download never replaces
// what is not a regular file, follows symbolic links, respects the umask
// and keeps an existing file's mode.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// writeFileAtomic writes a download into name through write:
//
//   - A new file, or an existing regular file, gets the bytes through a
//     temporary file in the same directory that is renamed over name only
//     when write (and the close) succeeded: readers of name see the old
//     file or the whole new one, and a failed download leaves name as it
//     was. A new file is created 0666 less the umask, as cp creates one;
//     an existing file keeps its mode.
//   - Anything else that exists (a device such as /dev/null, a FIFO) is
//     opened and written into, never replaced; what it got of a failed
//     download stays there.
//   - A symbolic link is followed, and its target written as above: the
//     link stays. One that points at nothing is an error, as in cp.
//
// Every error of a write, and of the close, is returned: ENOSPC from
// /dev/full fails the download.
func writeFileAtomic(name string, write func(io.Writer) error) error {
	fi, err := os.Lstat(name)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		target, lerr := filepath.EvalSymlinks(name)
		if errors.Is(lerr, fs.ErrNotExist) {
			return fmt.Errorf("not writing through the dangling symbolic link %s", name)
		} else if lerr != nil {
			return lerr
		}
		name = target
		fi, err = os.Lstat(name)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return writeViaTemp(name, nil, write)
	case err != nil:
		return err
	case fi.Mode().IsRegular():
		return writeViaTemp(name, fi, write)
	case fi.IsDir():
		return fmt.Errorf("%s is a directory", name)
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeViaTemp writes a temporary file beside name and renames it over
// name. It gets the mode of old, the file it replaces, or without one
// keeps 0666 less the umask.
func writeViaTemp(name string, old fs.FileInfo, write func(io.Writer) error) (err error) {
	f, err := createTemp(filepath.Dir(name), tempPrefix(filepath.Base(name)))
	if err != nil {
		return targetErr(err, name)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = targetErr(err, name)
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	if old != nil {
		if err = f.Chmod(old.Mode().Perm()); err != nil {
			return err
		}
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

// tempSuffix ends writeViaTemp's temporary names, before a random part
// of exactly tempDigits base-36 digits (a uint64, zero-padded): so fixed a
// form that no one's own dotfile (".env.osprey-prod") is taken for one.
const (
	tempSuffix = ".osprey-"
	tempDigits = 13 // a uint64's base-36 digits
)

// tempPrefix is writeViaTemp's temporary name for base, less its random
// part: ".BASE.osprey-", with BASE cut (on a UTF-8 boundary) so that the
// whole name fits a file system's 255 bytes whatever base's length.
func tempPrefix(base string) string {
	const room = 255 - len(".") - len(tempSuffix) - tempDigits
	if len(base) > room {
		cut := room
		for cut > 0 && !utf8.RuneStart(base[cut]) {
			cut--
		}
		base = base[:cut]
	}
	return "." + base + tempSuffix
}

// isTempName reports whether name is one of writeViaTemp's temporary
// names.
func isTempName(name string) bool {
	i := strings.LastIndex(name, tempSuffix)
	if !strings.HasPrefix(name, ".") || i < 1 {
		return false
	}
	rnd := name[i+len(tempSuffix):]
	return len(rnd) == tempDigits && strings.Trim(rnd, "0123456789abcdefghijklmnopqrstuvwxyz") == ""
}

// targetErr names the file being written, not its temporary file, in a
// *fs.PathError of the write.
func targetErr(err error, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path != name {
		return &fs.PathError{Op: pe.Op, Path: name, Err: pe.Err}
	}
	return err
}

// createTemp is os.CreateTemp with mode 0666, so that the umask decides
// the new file's mode (CreateTemp's 0600 would hide it).
func createTemp(dir, prefix string) (*os.File, error) {
	for range 100 {
		rnd := strconv.FormatUint(rand.Uint64(), 36)
		rnd = strings.Repeat("0", tempDigits-len(rnd)) + rnd
		f, err := os.OpenFile(filepath.Join(dir, prefix+rnd), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("cannot create a temporary file in %s", dir)
}
