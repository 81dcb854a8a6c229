package store

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestMapsAndLastEpochStarted: maps and a PG's last_epoch_started survive
// a reopen, trimming drops only older epochs, and a damaged map record is
// skipped rather than returned.
func TestMapsAndLastEpochStarted(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openAt(t, dir)
	for e := uint64(1); e <= 5; e++ {
		if err := s.PutMap(ctx, e, []byte{byte(e), 0xAA}); err != nil {
			t.Fatal(err)
		}
	}
	if les, err := s.PGLastEpochStarted(ctx, 7); err != nil || les != 0 {
		t.Fatalf("unset last_epoch_started = %d, %v; want 0", les, err)
	}
	if err := s.SetPGLastEpochStarted(ctx, 7, 4); err != nil {
		t.Fatal(err)
	}
	if err := s.TrimMaps(ctx, 3); err != nil {
		t.Fatal(err)
	}
	// A damaged record: the checksum no longer matches.
	if err := s.db.Set(mapKey(9), []byte{1, 2, 3, 4, 5, 6}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, dir)
	defer s.Close()
	got, err := s.Maps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("maps after trim below 3: %v; want epochs 3..5", got)
	}
	for e := uint64(3); e <= 5; e++ {
		if !bytes.Equal(got[e], []byte{byte(e), 0xAA}) {
			t.Fatalf("map %d = %x", e, got[e])
		}
	}
	if les, err := s.PGLastEpochStarted(ctx, 7); err != nil || les != 4 {
		t.Fatalf("last_epoch_started after reopen = %d, %v; want 4", les, err)
	}
	if les, err := s.PGLastEpochStarted(ctx, 8); err != nil || les != 0 {
		t.Fatalf("another pg's last_epoch_started = %d, %v; want 0", les, err)
	}
}

func openAt(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBackfillMark: the mark survives a reopen and SetPGLast clears it.
func TestBackfillMark(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openAt(t, dir)
	if err := s.SetPGBackfilling(ctx, 3); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openAt(t, dir)
	defer s.Close()
	for pg, want := range map[uint32]bool{3: true, 4: false} {
		if got, err := s.PGBackfilling(ctx, pg); err != nil || got != want {
			t.Fatalf("pg %d backfilling = %v, %v; want %v", pg, got, err, want)
		}
	}
	if err := s.SetPGLast(ctx, 3, &osdpb.Version{Epoch: 2, Seq: 9}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.PGBackfilling(ctx, 3); err != nil || got {
		t.Fatalf("after SetPGLast: backfilling = %v, %v", got, err)
	}
}

// TestFreshMark: the mark survives a reopen (a restart before the mon was
// told) until cleared, and clearing it twice is harmless.
func TestFreshMark(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openAt(t, dir)
	if got, err := s.FreshMark(ctx); err != nil || got {
		t.Fatalf("a new store's mark = %v, %v; want none until set", got, err)
	}
	if err := s.SetFreshMark(ctx, true); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openAt(t, dir)
	defer s.Close()
	if got, err := s.FreshMark(ctx); err != nil || !got {
		t.Fatalf("after a reopen: %v, %v; want set", got, err)
	}
	for range 2 {
		if err := s.SetFreshMark(ctx, false); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.FreshMark(ctx); err != nil || got {
		t.Fatalf("cleared: %v, %v", got, err)
	}
}
