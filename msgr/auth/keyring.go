package auth

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrKeyringMode: a keyring file that others than its owner may read or
// write. The key in it is the entity, so it is refused, as ssh refuses a
// private key others can read.
var ErrKeyringMode = errors.New("auth: keyring file is open to others")

// keyringMode is the only mode a keyring file is written with.
const keyringMode = 0o600

// maxKeyringFile bounds what LoadKeyring reads: a keyring is about 2 KiB.
const maxKeyringFile = 64 << 10

// LoadKeyring reads and checks the keyring file at path.
func LoadKeyring(path string) (*Keyring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o; run chmod 600 %s", ErrKeyringMode, path, m, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyringFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxKeyringFile {
		return nil, fmt.Errorf("%w: %s is larger than a keyring can be", ErrBadCredential, path)
	}
	k, err := ParseKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// createKeyringTemp creates the file WriteKeyringFile renames to path,
// beside it, so that the rename stays on one filesystem.
func createKeyringTemp(path string) (*os.File, error) {
	return os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
}

// keyringTarget is where WriteKeyringFile writes for path: path with its
// symlinks resolved, and whether it names something other than a regular
// file (written into, not replaced). A directory is refused.
func keyringTarget(path string) (string, bool, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return path, false, nil // nothing there yet (or a dangling link): made anew
	}
	fi, err := os.Stat(real)
	switch {
	case err != nil:
		return real, false, nil
	case fi.IsDir():
		return "", false, fmt.Errorf("%s is a directory, not a keyring file", path)
	}
	return real, !fi.Mode().IsRegular(), nil
}

// CheckKeyringPath fails where WriteKeyringFile could not write path (its
// directory missing or not writable), without touching path: a caller
// checks before it has a keyring that must not be lost.
func CheckKeyringPath(path string) error {
	path, special, err := keyringTarget(path)
	if err != nil || special {
		return err // a device or pipe is opened when written
	}
	tmp, err := createKeyringTemp(path)
	if err != nil {
		return err
	}
	tmp.Close()
	return os.Remove(tmp.Name())
}

// WriteKeyringFile writes a keyring file (data as MarshalPEM made it) to
// path with mode 0600, replacing any file there in one rename, so a
// reader never sees half of one and the key is never readable by others,
// not even for a moment. A symlink's target is what is replaced; a path
// that names no regular file (/dev/stdout, a pipe) is written into, as
// Ceph's -o does: renamed over, it would become a file holding the key
// (`-o /dev/null` as root made /dev/null one).
func WriteKeyringFile(path string, data []byte) error {
	path, special, err := keyringTarget(path)
	if err != nil {
		return err
	}
	if special {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	tmp, err := createKeyringTemp(path)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	// CreateTemp makes the file 0600 already; Chmod says so for a umask
	// or filesystem that would not.
	if err := tmp.Chmod(keyringMode); err != nil && !errors.Is(err, fs.ErrPermission) {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The rename lasts only once the directory is synced: an OSD's
	// keyring lost to a power cut after its first boot is one the mon
	// does not give out again.
	return SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs directory dir, so that a file renamed into it stays
// there after a power cut.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Save writes the keyring to path (see WriteKeyringFile).
func (k *Keyring) Save(path string) error {
	data, err := k.MarshalPEM()
	if err != nil {
		return err
	}
	return WriteKeyringFile(path, data)
}
