package store_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestPGInconsistent: a PG's compare result survives a restart, a clean
// one replaces it (kept, for its time), nil removes it, and removing the
// PG's copy removes it too; HeadVersion
// gives the version that wrote the copy.
func TestPGInconsistent(t *testing.T) {
	e := newEnv(t, store.Options{})
	const pg = 5
	if r, err := e.s.PGInconsistent(e.ctx, pg); err != nil || r != nil {
		t.Fatalf("never recorded: %v, %v", r, err)
	}
	want := &osdpb.PGInconsistent{ScrubbedUnixNano: 7, Epoch: 3, Objects: []*osdpb.InconsistentObject{{Bucket: "b", Key: "k",
		Errors: []string{"missing"}, Shards: []*osdpb.ScrubShard{{Osd: 1, Missing: true, Errors: []string{"missing"}}}}}}
	if err := e.s.SetPGInconsistent(e.ctx, pg, want); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if r, err := e.s.PGInconsistent(e.ctx, pg); err != nil || !proto.Equal(r, want) {
		t.Fatalf("after a restart: %v, %v", r, err)
	}
	clean := &osdpb.PGInconsistent{ScrubbedUnixNano: 8, Epoch: 4}
	if err := e.s.SetPGInconsistent(e.ctx, pg, clean); err != nil {
		t.Fatal(err)
	}
	if r, err := e.s.PGInconsistent(e.ctx, pg); err != nil || !proto.Equal(r, clean) {
		t.Fatalf("after a clean compare: %v, %v", r, err)
	}
	if err := e.s.SetPGInconsistent(e.ctx, pg, nil); err != nil {
		t.Fatal(err)
	}
	if r, err := e.s.PGInconsistent(e.ctx, pg); err != nil || r != nil {
		t.Fatalf("after nil: %v, %v", r, err)
	}
	if err := e.s.SetPGInconsistent(e.ctx, pg, want); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.RemovePG(e.ctx, pg, nil); err != nil {
		t.Fatal(err)
	}
	if r, err := e.s.PGInconsistent(e.ctx, pg); err != nil || r != nil {
		t.Fatalf("after the copy's removal: %v, %v", r, err)
	}

	e.createBucket(0, "b")
	le := e.put(pg, "b", "k", []byte("body"))
	meta, v, err := e.s.HeadVersion(e.ctx, "b", "k")
	if err != nil || !proto.Equal(v, le.Version) || meta.GetSize() != 4 {
		t.Fatalf("HeadVersion: %v %v %v; want version %v", meta, v, err, le.Version)
	}
}
