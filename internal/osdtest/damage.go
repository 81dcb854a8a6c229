package osdtest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// DamageDataFiles flips one byte at offset at of the data files holding
// body in OSD data directory dir (found by their first 4 KiB: a fresh
// cluster holds few), as a disk that rotted under the store would. Every
// such file: one a repair replaced may not be removed yet, and damaging
// only that one would leave the live copy whole.
func DamageDataFiles(t testing.TB, dir string, body []byte, at int64) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "store", "data", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	damaged := 0
	for _, name := range files {
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			if os.IsNotExist(err) {
				continue // removed since the glob
			}
			t.Fatal(err)
		}
		head := make([]byte, 4096)
		if n, _ := f.ReadAt(head, 0); n == len(head) && bytes.Equal(head, body[:4096]) {
			b := []byte{body[at] ^ 0x10}
			if _, err := f.WriteAt(b, at); err != nil {
				t.Fatal(err)
			}
			damaged++
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if damaged == 0 {
		t.Fatalf("%s has no data file holding the object (%d files)", dir, len(files))
	}
}
