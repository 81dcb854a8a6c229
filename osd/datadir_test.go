package osd_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestDataDirIsTheOwners: an OSD makes its data directory 0750, as Ceph's
// /var/lib/ceph/osd/ceph-N: the store's files are the objects, which other
// local users read from a 0755 directory.
func TestDataDirIsTheOwners(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, Size: 1, PGs: 8})
	st, err := os.Stat(filepath.Join(c.Dir, "osd.0"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm&0o007 != 0 {
		t.Fatalf("the OSD's data directory is %v: others may read the objects", perm)
	}
}
