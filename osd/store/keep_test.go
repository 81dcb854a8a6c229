package store_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// waitKept polls until the store keeps n replaced versions.
func (e *env) waitKept(n int64) {
	e.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); e.s.Stats().KeptVersions != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			e.t.Fatalf("kept versions: %+v, want %d", e.s.Stats(), n)
		}
	}
}

// TestReplacedVersionKeptForItsReader: a get that stops short of an
// object's end holds it, so a reader in windows reads the rest of the
// version it began on after an overwrite and after a delete, as S3 has a
// GET finish with the object it started; the kept file goes when the hold
// lapses, and a version nobody held is not kept.
func TestReplacedVersionKeptForItsReader(t *testing.T) {
	opts := fileOptions()
	opts.KeepReplacedFor = 300 * time.Millisecond
	e := newEnv(t, opts)
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(5, 6))
	v1, v2, v3 := randBytes(r, 6000), randBytes(r, 7000), randBytes(r, 5000)
	e.put(0, "b", "k", v1)
	id1 := e.fileID("b", "k")

	// The first window: [0, 2000) of 6000 holds the object.
	m1, got, err := e.readVersion("b", "k", 0, 2000, nil)
	must(t, err)
	if !bytes.Equal(got, v1[:2000]) {
		t.Fatal("first window: wrong bytes")
	}
	e.put(0, "b", "k", v2) // replaces v1 while held
	if st := e.s.Stats(); st.KeptVersions != 1 || st.KeptBytes != 6000 {
		t.Fatalf("after the overwrite: %+v", st)
	}
	// The next window, wanting v1, reads v1; one that wants nothing, v2.
	m, got, err := e.readVersion("b", "k", 2000, 2000, m1)
	must(t, err)
	if m.Crc32C != m1.Crc32C || !bytes.Equal(got, v1[2000:4000]) {
		t.Fatalf("second window: crc %08x, want %08x", m.Crc32C, m1.Crc32C)
	}
	if m, _, err := e.readVersion("b", "k", 0, -1, nil); err != nil || m.Crc32C != crc(v2) {
		t.Fatalf("a new reader: %v, %v", m, err)
	}
	m2, _, err := e.readVersion("b", "k", 0, 1000, nil) // a reader of v2, held
	must(t, err)
	e.del(0, "b", "k")
	// Deleted: both readers finish their versions.
	if _, got, err := e.readVersion("b", "k", 4000, -1, m1); err != nil || !bytes.Equal(got, v1[4000:]) {
		t.Fatalf("last window of v1 after the delete: %v", err)
	}
	if _, got, err := e.readVersion("b", "k", 1000, -1, m2); err != nil || !bytes.Equal(got, v2[1000:]) {
		t.Fatalf("last window of v2 after the delete: %v", err)
	}
	if _, _, err := e.readVersion("b", "k", 0, -1, nil); err == nil {
		t.Fatal("a new reader found the deleted object")
	}
	e.checkIntegrity()

	// Nobody reads any more: the holds lapse and the files go.
	e.waitKept(0)
	e.waitReaped()
	if e.s.DataFileExistsForTest(id1) {
		t.Fatal("v1's file outlived its hold")
	}
	if _, _, err := e.readVersion("b", "k", 4000, -1, m1); err == nil {
		t.Fatal("read v1 after its hold lapsed")
	}

	// Whole reads and ReadRange (recovery) hold nothing: an overwrite then
	// kills the old file at once. (Every earlier hold has lapsed: a kept
	// version lives as long as its object's hold.)
	e.put(0, "b", "k", v1)
	if _, _, err := e.readVersion("b", "k", 0, -1, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.s.ReadRange(e.ctx, "b", "k", 0, 100, nil); err != nil {
		t.Fatal(err)
	}
	e.put(0, "b", "k", v3)
	if st := e.s.Stats(); st.KeptVersions != 0 {
		t.Fatalf("kept a version nobody held: %+v", st)
	}
	// A hold is of one version: the versions that come after it and go
	// unread are not kept, however often the object is overwritten.
	if _, _, err := e.readVersion("b", "k", 0, 100, nil); err != nil {
		t.Fatal(err)
	}
	e.put(0, "b", "k", v1)
	e.put(0, "b", "k", v2)
	if st := e.s.Stats(); st.KeptVersions != 1 || st.KeptBytes != int64(len(v3)) {
		t.Fatalf("kept %+v, want v3 only", st)
	}
	e.checkIntegrity()
}

// TestKeptVersionsBounded: past Options.KeepReplacedBytes a replaced file
// is not kept, and its reader gets the object as it is now.
func TestKeptVersionsBounded(t *testing.T) {
	opts := fileOptions()
	opts.KeepReplacedBytes = 10000
	e := newEnv(t, opts)
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(7, 8))
	var metas []*osdpb.ObjectMeta
	for i := range 3 {
		e.put(0, "b", "k", randBytes(r, 6000+i))
		m, _, err := e.readVersion("b", "k", 0, 100, nil)
		must(t, err)
		metas = append(metas, m)
	}
	e.put(0, "b", "k", randBytes(r, 100))
	st := e.s.Stats()
	if st.KeptVersions != 1 || st.KeptBytes != 6000 || st.KeepRefused != 2 {
		t.Fatalf("kept %+v, want the first version only", st)
	}
	if m, _, err := e.readVersion("b", "k", 100, 100, metas[0]); err != nil || m.Size != 6000 {
		t.Fatalf("the kept version: %v, %v", m, err)
	}
	if m, _, err := e.readVersion("b", "k", 0, 100, metas[1]); err != nil || m.Size != 100 {
		t.Fatalf("a version not kept: %v, %v; want the current object", m, err)
	}
	// Close removes the kept files with the dead ones.
	id := e.s.Stats()
	e.reopen()
	if st := e.s.Stats(); st.KeptVersions != 0 || st.GarbageCollected != 0 {
		t.Fatalf("after a restart: %+v (before %+v)", st, id)
	}
	e.checkIntegrity()
}

// TestHoldTakesBackAKillSinceTheView: an overwrite that commits between a
// first window's view and its hold killed the old file unheld; the hold
// takes it back (the reader's epoch had kept it), so the next window
// still reads the version the first began on.
func TestHoldTakesBackAKillSinceTheView(t *testing.T) {
	e := newEnv(t, fileOptions())
	e.createBucket(0, "b")
	r := rand.New(rand.NewPCG(9, 10))
	v1, v2 := randBytes(r, 6000), randBytes(r, 3000)
	e.put(0, "b", "k", v1)
	var m1 *osdpb.ObjectMeta
	release, wait := e.parkedRead(func() ([]byte, error) {
		m, b, err := e.readVersion("b", "k", 0, 2500, nil)
		m1 = m
		return b, err
	})
	e.put(0, "b", "k", v2) // v1 killed: nobody held it yet
	if st := e.s.Stats(); st.KeptVersions != 0 || st.DataFilesPending != 1 {
		t.Fatalf("before the hold: %+v", st)
	}
	release()
	if b, err := wait(); err != nil || !bytes.Equal(b, v1[:2500]) {
		t.Fatalf("first window: %v", err)
	}
	if st := e.s.Stats(); st.KeptVersions != 1 || st.DataFilesPending != 0 {
		t.Fatalf("after the hold: %+v", st)
	}
	if _, b, err := e.readVersion("b", "k", 2500, -1, m1); err != nil || !bytes.Equal(b, v1[2500:]) {
		t.Fatalf("second window: %v", err)
	}
	e.checkIntegrity()
}
