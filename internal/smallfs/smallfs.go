// Package smallfs gives tests a small filesystem of their own, to fill up:
// a tmpfs of a chosen size mounted on a temporary directory. Mounting needs
// root (CI runs as root); elsewhere the test is skipped, unless
// OSPREY_REQUIRE_SMALLFS=1 (set by `make test`) makes that a failure.
package smallfs

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Mount mounts a tmpfs of size bytes on a new directory and returns it; the
// test's cleanup unmounts it.
func Mount(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	MountAt(t, dir, size)
	return dir
}

// MountAt mounts a tmpfs of size bytes on dir, creating it; the test's
// cleanup unmounts it, before the removal of a t.TempDir that holds it
// (cleanups run last registered first).
func MountAt(t testing.TB, dir string, size int64) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mount(t, dir, size); err != nil {
		if os.Getenv("OSPREY_REQUIRE_SMALLFS") == "1" {
			t.Fatalf("mount a %d-byte tmpfs on %s: %v (OSPREY_REQUIRE_SMALLFS=1)", size, dir, err)
		}
		t.Skipf("mount a %d-byte tmpfs: %v (needs root)", size, err)
	}
}

// TryMount is Mount where mounting is allowed (root), else a plain
// t.TempDir(): for tests that only go faster on memory, where nothing
// waits for a disk's fsync.
func TryMount(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := mount(t, dir, size); err != nil {
		t.Logf("on the host's disk: mount a %d-byte tmpfs: %v", size, err)
	}
	return dir
}

// mount mounts a tmpfs of size bytes on dir, unmounted at the test's
// cleanup.
func mount(t testing.TB, dir string, size int64) error {
	err := unix.Mount("osprey-smallfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size))
	if err != nil {
		return err
	}
	// Registered after TempDir's own cleanup, so it runs first: the
	// directory is unmounted before it is removed.
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return nil
}

// Fill writes a file in dir until the filesystem has at most leave bytes
// available (it may stop a little short: statfs counts in blocks), and
// returns its path. Removing it frees the space again.
func Fill(t testing.TB, dir string, leave uint64) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "filler-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		avail := st.Bavail * uint64(st.Frsize)
		if avail <= leave {
			break
		}
		n := min(uint64(len(buf)), avail-leave)
		if _, err := f.Write(buf[:n]); err != nil {
			break // ENOSPC: as full as it gets
		}
	}
	return f.Name()
}
