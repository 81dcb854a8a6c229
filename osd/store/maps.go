package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// The OSD keeps the cluster maps it adopted, as Ceph's OSDs do: peering
// replays every epoch since a PG last went active to find the intervals
// that may hold writes, and a restarted OSD must not depend on the mon
// still having them. A PG's last_epoch_started is kept beside its record.

func mapKey(epoch uint64) []byte { return binary.BigEndian.AppendUint64([]byte{nsMap}, epoch) }

func lesKey(pg uint32) []byte { return binary.BigEndian.AppendUint32([]byte{nsLES}, pg) }

func backfillKey(pg uint32) []byte { return binary.BigEndian.AppendUint32([]byte{nsBackfil}, pg) }

// PutMap stores the encoded cluster map of one epoch. It is not synced:
// a map lost in a crash is fetched again from the mon or a peer.
func (s *Store) PutMap(ctx context.Context, epoch uint64, encoded []byte) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	v, start := beginSeal(make([]byte, 0, len(encoded)+5))
	v = finishSeal(append(v, encoded...), start)
	if err := s.db.Set(mapKey(epoch), v, pebble.NoSync); err != nil {
		return fmt.Errorf("store: put map epoch %d: %w", epoch, err)
	}
	return nil
}

// Maps returns the stored maps' encodings by epoch. A record that fails
// its checksum is skipped: the map is fetched again like a missing one.
func (s *Store) Maps(ctx context.Context) (map[uint64][]byte, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	out := map[uint64][]byte{}
	lo := []byte{nsMap}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return nil, fmt.Errorf("store: read maps: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != 9 {
			continue
		}
		p, err := unseal(it.Value())
		if err != nil {
			s.opts.Logger.Warn("store: skipping a damaged map record", "epoch", binary.BigEndian.Uint64(k[1:]), "err", err)
			continue
		}
		out[binary.BigEndian.Uint64(k[1:])] = append([]byte(nil), p...)
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return nil, fmt.Errorf("store: read maps: %w", err)
	}
	return out, nil
}

// TrimMaps drops the stored maps older than epoch.
func (s *Store) TrimMaps(ctx context.Context, epoch uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if err := s.db.DeleteRange(mapKey(0), mapKey(epoch), pebble.NoSync); err != nil {
		return fmt.Errorf("store: trim maps before %d: %w", epoch, err)
	}
	return nil
}

// PGLastEpochStarted returns PG pg's last_epoch_started (0: never set).
func (s *Store) PGLastEpochStarted(ctx context.Context, pg uint32) (uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	return s.getSealedUint64(lesKey(pg), "pg %d last_epoch_started", pg)
}

// getSealedUint64 reads a sealed number (0 where the key is absent); what
// and args name it in errors.
func (s *Store) getSealedUint64(k []byte, what string, args ...any) (uint64, error) {
	v, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: %s: %w", fmt.Sprintf(what, args...), err)
	}
	defer closer.Close()
	n, err := decodeSealedUint64(v)
	if err != nil {
		s.counters.corruptions.Add(1)
		return 0, corrupt("", "", "%s: %v", fmt.Sprintf(what, args...), err)
	}
	return n, nil
}

// SetPGLastEpochStarted records PG pg's last_epoch_started. Not synced:
// losing it makes peering ask about more intervals than it needs to,
// never fewer.
func (s *Store) SetPGLastEpochStarted(ctx context.Context, pg uint32, epoch uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if err := s.db.Set(lesKey(pg), appendSealedUint64(nil, epoch), pebble.NoSync); err != nil {
		return fmt.Errorf("store: set pg %d last_epoch_started: %w", pg, err)
	}
	return nil
}

// SetPGBackfilling records, synced, that a backfill of PG pg is under way:
// until SetPGLast or CopyLog (Backfilled) ends it, the local copy may lack writes it acknowledged
// (a replica being backfilled acks writes to objects the walk has not
// reached yet, which it copies later), so peering must not take it as a
// witness of its intervals. A restart keeps the mark.
func (s *Store) SetPGBackfilling(ctx context.Context, pg uint32) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if err := s.db.Set(backfillKey(pg), nil, pebble.Sync); err != nil {
		return fmt.Errorf("store: mark pg %d backfilling: %w", pg, err)
	}
	return nil
}

// FreshMark reports whether SetFreshMark(true) was called and not undone:
// the store is new and the OSD has not yet told the mon so.
func (s *Store) FreshMark(ctx context.Context) (bool, error) {
	if err := s.enter(ctx); err != nil {
		return false, err
	}
	defer s.leave()
	return s.hasMark([]byte{nsFresh}, "fresh mark")
}

// hasMark reports whether key k, a mark with no value, is set; what names
// it in errors.
func (s *Store) hasMark(k []byte, what string, args ...any) (bool, error) {
	_, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: %s: %w", fmt.Sprintf(what, args...), err)
	}
	closer.Close()
	return true, nil
}

// SetFreshMark records, synced, that the store is new (on) until the mon
// has been told (off). The OSD tells a new store by its holding no map; the
// mark keeps it new across a restart between storing its first map and a
// boot the mon acknowledged, as Ceph's OSD stays fresh until its
// superblock has a map.
func (s *Store) SetFreshMark(ctx context.Context, on bool) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	var err error
	if on {
		err = s.db.Set([]byte{nsFresh}, nil, pebble.Sync)
	} else {
		err = s.db.Delete([]byte{nsFresh}, pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("store: fresh mark: %w", err)
	}
	return nil
}

// PGBackfilling reports whether a backfill of PG pg began and has not
// ended (SetPGLast, CopyLog).
func (s *Store) PGBackfilling(ctx context.Context, pg uint32) (bool, error) {
	if err := s.enter(ctx); err != nil {
		return false, err
	}
	defer s.leave()
	return s.hasMark(backfillKey(pg), "pg %d backfill mark", pg)
}
