package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// scrubKey is where PG pg's last deep scrub is recorded ('C' pg(4) ->
// sealed unix nanoseconds), so that a restart does not scrub every PG
// again at once.
func scrubKey(pg uint32) []byte { return binary.BigEndian.AppendUint32([]byte{nsScrub}, pg) }

// PGScrubbed returns when this copy of PG pg was last deep-scrubbed (the
// zero time: never).
func (s *Store) PGScrubbed(ctx context.Context, pg uint32) (time.Time, error) {
	if err := s.enter(ctx); err != nil {
		return time.Time{}, err
	}
	defer s.leave()
	n, err := s.getSealedUint64(scrubKey(pg), "pg %d scrub stamp", pg)
	if err != nil || n == 0 {
		return time.Time{}, err
	}
	return time.Unix(0, int64(n)), nil
}

// SetPGScrubbed records when this copy of PG pg was deep-scrubbed. Not
// synced: a stamp lost in a crash only brings the PG's next scrub
// forward.
func (s *Store) SetPGScrubbed(ctx context.Context, pg uint32, at time.Time) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if err := s.db.Set(scrubKey(pg), appendSealedUint64(nil, uint64(at.UnixNano())), pebble.NoSync); err != nil {
		return fmt.Errorf("store: set pg %d scrub stamp: %w", pg, err)
	}
	return nil
}

// inconsistentKey is where PG pg's last cross-replica scrub result is
// kept, so that a restarted primary still reports (and lists) the
// inconsistent objects it found until a scrub finds them gone.
func inconsistentKey(pg uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{nsIncons}, pg)
}

// PGInconsistent returns what the last cross-replica scrub of PG pg
// recorded (nil: none recorded).
func (s *Store) PGInconsistent(ctx context.Context, pg uint32) (*osdpb.PGInconsistent, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	v, closer, err := s.db.Get(inconsistentKey(pg))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: get pg %d scrub result: %w", pg, err)
	}
	defer closer.Close()
	r, err := decodeProto[osdpb.PGInconsistent](v, "scrub result")
	if err != nil {
		s.counters.corruptions.Add(1)
		return nil, corrupt("", "", "pg %d scrub result: %v", pg, err)
	}
	return r, nil
}

// SetPGInconsistent records the result of a cross-replica scrub of PG
// pg, a clean one too (so that its time and epoch tell "scrubbed clean"
// from "never scrubbed"); nil removes the record. Not synced, as the
// stamp: a result lost in a crash is found again by the next scrub.
func (s *Store) SetPGInconsistent(ctx context.Context, pg uint32, r *osdpb.PGInconsistent) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	var err error
	if r == nil {
		err = s.db.Delete(inconsistentKey(pg), pebble.NoSync)
	} else {
		var v []byte
		if v, err = appendProto(nil, r); err == nil {
			err = s.db.Set(inconsistentKey(pg), v, pebble.NoSync)
		}
	}
	if err != nil {
		return fmt.Errorf("store: set pg %d scrub result: %w", pg, err)
	}
	return nil
}

// HeadVersion returns an object's metadata and the PG version that wrote
// this copy of it (0.0 when a recovery installed it without one).
func (s *Store) HeadVersion(ctx context.Context, bucket, key string) (*osdpb.ObjectMeta, *osdpb.Version, error) {
	if err := s.enter(ctx); err != nil {
		return nil, nil, err
	}
	defer s.leave()
	if err := checkName(bucket, key, true); err != nil {
		return nil, nil, objErr("head", bucket, key, err)
	}
	var h *head
	err := s.withView(func(v *view) (err error) {
		h, err = s.lookup(v, bucket, key)
		return err
	})
	if err != nil {
		return nil, nil, objErr("head", bucket, key, err)
	}
	return h.meta, h.version.proto(), nil
}
