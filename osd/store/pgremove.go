package store

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Removing a PG's copy (a stray's, once the PG is clean elsewhere) is many
// batches, not one: a PG can hold millions of objects, and one batch that
// big would stall every writer behind its commit. The crash safety comes
// from the order:
//
//  1. One synced batch marks the PG removing ('X') and backfilling ('I'),
//     and drops its PG record, log, request index and last_epoch_started.
//     From here on the copy reports nothing (PGInfo is zero) and peering
//     would take it as no witness of anything (incomplete).
//  2. Synced pages of objects: heads, PG index entries, chunks, and 'W' "F"
//     records for data files, which the reaper then unlinks.
//  3. One synced batch drops the removing mark and the PG's counters. The
//     backfilling mark stays: an empty copy that held writes is no
//     witness of the intervals it held them in, so peering takes it as
//     one mid-backfill (incomplete) until a backfill fills it (CopyLog, SetPGLast).
//
// A crash between 1 and 3 leaves the 'X' mark: RemovingPGs lists the PG
// for its owner (the OSD) to finish, paced, before it serves the copy.
// Open does not, so a start is not held behind a big removal.

// removePage bounds the objects one removal batch deletes: small enough
// that a page's commit and the PG lock it holds are brief next to client
// writes, which share the WAL.
var removePage = 256

func removingKey(pg uint32) []byte { return binary.BigEndian.AppendUint32([]byte{nsRemoving}, pg) }

// RemovePG deletes PG pg's copy from the store: its objects (data files
// included), PG index, log, request index, PG record, removal mark and
// counters; a backfilling mark stays (see above). between runs after each
// page of objects, the last one too (nil: none); it paces the removal and
// may stop it with an error, which leaves the removal for the next
// RemovePG to finish (RemovingPGs). It returns the objects removed.
//
// REQUIRES: the caller lets no other writer touch pg meanwhile (the OSD
// does not hold the PG: it is in no acting set of its map).
func (s *Store) RemovePG(ctx context.Context, pg uint32, between func(context.Context) error) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	st := s.lockPG(pg)
	defer st.mu.Unlock()
	n, err := s.removePG(ctx, st, pg, between)
	if err != nil {
		return n, fmt.Errorf("store: remove pg %d: %w", pg, err)
	}
	s.counters.pgsRemoved.Add(1)
	return n, nil
}

func (s *Store) removePG(ctx context.Context, st *pgState, pg uint32, between func(context.Context) error) (int, error) {
	b := s.db.NewBatch()
	defer b.Close()
	lp, rp := logPrefix(pg), reqPrefix(pg)
	for _, err := range []error{
		b.Set(removingKey(pg), nil, nil),
		b.Set(backfillKey(pg), nil, nil),
		b.Delete(pgKey(pg), nil),
		b.Delete(lesKey(pg), nil),
		b.Delete(scrubKey(pg), nil),
		b.Delete(inconsistentKey(pg), nil),
		b.DeleteRange(lp, prefixEnd(lp), nil),
		b.DeleteRange(rp, prefixEnd(rp), nil),
	} {
		if err != nil {
			return 0, err
		}
	}
	err := b.Commit(pebble.Sync)
	st.setPGRecord(pgInfo{}, err == nil)
	if err != nil {
		return 0, err
	}
	removed := 0
	for {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		n, more, err := s.removePGPage(pg)
		removed += n
		if err != nil {
			return removed, err
		}
		if between != nil {
			if err := between(ctx); err != nil {
				return removed, err
			}
		}
		if !more {
			break
		}
	}
	b.Reset()
	for _, err := range []error{
		b.Delete(removingKey(pg), nil),
		b.Delete(pgCountersKey(pg), nil),
	} {
		if err != nil {
			return removed, err
		}
	}
	return removed, b.Commit(pebble.Sync)
}

// removePGPage deletes up to removePage objects of PG pg in one synced
// batch; more reports that some may be left.
func (s *Store) removePGPage(pg uint32) (n int, more bool, err error) {
	// Shared, as every object commit: a bucket purge (exclusive) must not
	// delete the same heads and count them twice.
	s.bucketMu.RLock()
	defer s.bucketMu.RUnlock()
	b := s.db.NewBatch()
	defer b.Close()
	var files []uint64
	err = s.withView(func(v *view) error {
		lo := pgIndexPrefix(pg)
		var d counters
		ok := v.scan(lo, prefixEnd(lo))
		for ; ok && n < removePage; ok = v.it.Next() {
			k := v.it.Key()
			bucket, key, good := splitPGIndexKey(k)
			if err := b.Delete(k, nil); err != nil {
				return err
			}
			n++
			if !good {
				continue
			}
			h, present, err := s.headOf(s.latest(), bucket, key)
			if err != nil {
				// A corrupt head stays (and is reported); its index entry
				// goes with the PG.
				s.opts.Logger.Warn("store: removing a pg: leaving a head it cannot read", "pg", pg, "bucket", bucket, "key", key, "err", err)
				continue
			}
			if !present || h.pg != pg {
				continue // the object is not this PG's (any more)
			}
			if err := b.Delete(headKey(bucket, key), nil); err != nil {
				return err
			}
			if err := dropData(b, h); err != nil {
				return err
			}
			files = append(files, fileOf(h)...)
			d.add(headCounters(h).neg())
		}
		if err := v.it.Error(); err != nil {
			return err
		}
		more = ok
		if d != (counters{}) {
			return b.Merge(keyCounters, appendCounters(nil, d), nil)
		}
		return nil
	})
	if err == nil && !b.Empty() {
		err = b.Commit(pebble.Sync)
	}
	if err != nil {
		return 0, false, err
	}
	s.killDataFiles(files...)
	return n, more, nil
}

// HeldPGs returns every PG of which the store holds a copy: a PG record,
// a log, objects, a removal mark. A bare backfill mark (what a removal
// leaves) holds nothing.
func (s *Store) HeldPGs(ctx context.Context) ([]uint32, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	seen := map[uint32]bool{}
	var pgs []uint32
	err := s.withView(func(v *view) error {
		for _, ns := range []byte{nsPG, nsLog, nsPGIndex, nsLES, nsRemoving} {
			lo := []byte{ns}
			// One seek per PG: skip past the rest of its keys.
			for ok := v.scan(lo, prefixEnd(lo)); ok; {
				k := v.it.Key()
				if len(k) < 5 {
					ok = v.it.Next()
					continue
				}
				pg := binary.BigEndian.Uint32(k[1:5])
				if !seen[pg] {
					seen[pg] = true
					pgs = append(pgs, pg)
				}
				if pg == ^uint32(0) {
					break
				}
				ok = v.it.SeekGE(binary.BigEndian.AppendUint32([]byte{ns}, pg+1))
			}
			if err := v.it.Error(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list held pgs: %w", err)
	}
	return pgs, nil
}

// RemovingPGs returns the PGs whose removal a stop cut short (RemovePG
// finishes one). Until then a copy reads as one mid-backfill with no log.
func (s *Store) RemovingPGs(ctx context.Context) ([]uint32, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	var pgs []uint32
	err := s.withView(func(v *view) error {
		lo := []byte{nsRemoving}
		for ok := v.scan(lo, prefixEnd(lo)); ok; ok = v.it.Next() {
			if k := v.it.Key(); len(k) == 5 {
				pgs = append(pgs, binary.BigEndian.Uint32(k[1:]))
			}
		}
		return v.it.Error()
	})
	if err != nil {
		return nil, fmt.Errorf("store: scan pg removals: %w", err)
	}
	return pgs, nil
}
