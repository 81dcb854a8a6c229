package store

import (
	"errors"

	"github.com/cockroachdb/pebble/v2"
)

// Stats is a snapshot of the store's counters and of Pebble's health.
type Stats struct {
	// Objects and Bytes count the objects held (every PG) and their logical
	// size; manifests count as objects of zero bytes, their parts being
	// objects of their own. Persistent, exact across restarts.
	Objects, Bytes int64

	// Since Open: puts and deletes applied (including backfill), bytes put
	// and read, corrupt records or chunks detected, and interrupted puts
	// whose chunks Open removed.
	Puts, Deletes, WrittenBytes, ReadBytes, Corruptions, GarbageCollected int64

	// Pebble: on-disk size (tables, blob files, WAL), memtable bytes, L0
	// shape, read amplification, bytes compactions are behind, flush and
	// compaction counts, block cache size and hits.
	DiskBytes        uint64
	MemTableBytes    uint64
	L0Files          int64
	L0Sublevels      int32
	ReadAmp          int
	CompactionDebt   uint64
	Flushes          int64
	Compactions      int64
	BlobFileBytes    uint64
	BlockCacheBytes  int64
	BlockCacheHits   int64
	BlockCacheMisses int64
}

// Stats returns the current statistics; a closed store returns zeros.
func (s *Store) Stats() Stats {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	var st Stats
	if s.closed {
		return st
	}
	st.Puts = s.counters.puts.Load()
	st.Deletes = s.counters.deletes.Load()
	st.WrittenBytes = s.counters.writtenBytes.Load()
	st.ReadBytes = s.counters.readBytes.Load()
	st.Corruptions = s.counters.corruptions.Load()
	st.GarbageCollected = s.counters.garbageCollected.Load()

	v, closer, err := s.db.Get(keyCounters)
	switch {
	case err == nil:
		if c, derr := decodeCounters(v); derr == nil {
			st.Objects, st.Bytes = c.objects, c.bytes
		}
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		s.opts.Logger.Warn("store: read counters", "err", err)
	}

	m := s.db.Metrics()
	st.DiskBytes = m.DiskSpaceUsage()
	st.MemTableBytes = m.MemTable.Size
	st.L0Files = m.Levels[0].TablesCount
	st.L0Sublevels = m.Levels[0].Sublevels
	st.ReadAmp = m.ReadAmp()
	st.CompactionDebt = m.Compact.EstimatedDebt
	st.Flushes = m.Flush.Count
	st.Compactions = m.Compact.Count
	st.BlobFileBytes = m.BlobFiles.LiveSize
	st.BlockCacheBytes = m.BlockCache.Size
	st.BlockCacheHits = m.BlockCache.Hits
	st.BlockCacheMisses = m.BlockCache.Misses
	return st
}
