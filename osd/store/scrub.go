package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
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
