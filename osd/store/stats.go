package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Stats is a snapshot of the store's counters and of Pebble's health.
type Stats struct {
	// Objects and Bytes count the objects held (every PG) and their logical
	// size; manifests count as objects of zero bytes, their parts being
	// objects of their own. DataFiles and DataFileBytes count those of them
	// whose bytes are in data files (included in Objects and Bytes).
	// Persistent, exact across restarts.
	Objects, Bytes, DataFiles, DataFileBytes int64

	// Since Open: puts and deletes applied (including backfill), bytes put
	// and read, corrupt records, chunks or data files detected, and the data
	// ids whose chunks or data files Open removed (interrupted puts, and
	// pooled or dead data files a crash left).
	Puts, Deletes, WrittenBytes, ReadBytes, Corruptions, GarbageCollected int64

	// Data files overwritten or deleted and not yet removed (waiting for
	// readers that may still open them, or for the reaper), and data files
	// removed since Open.
	DataFilesPending, DataFilesRemoved int64

	// KeptVersions and KeptBytes: data files of replaced objects kept for
	// readers that began on them (Options.KeepReplacedFor);
	// KeepRefused counts the replaced files not kept, as more than
	// Options.KeepReplacedBytes would have been, since Open.
	KeptVersions, KeptBytes, KeepRefused int64

	// SpaceMeasures counts the statfs calls (Space) since Open: the OSD's
	// polls and one per put.
	SpaceMeasures int64

	// BodyCRCBytes counts the bytes of put bodies the store checksummed
	// itself since Open, those that came without chunk CRCs from the
	// messenger (CheckOptions.ChunkCRCs): inline bodies, and those of
	// secure sessions.
	BodyCRCBytes int64

	// ReadCRCBytes counts the bytes of data files read and checked
	// against their chunk CRC32Cs since Open (gets whose client does not
	// check them, reads for recovery and scrub); UncheckedReadBytes those
	// read unchecked for a reader that checks them itself
	// (ReadOptions.Unchecked). Reads the cache serves count in neither.
	ReadCRCBytes, UncheckedReadBytes int64

	// PGsRemoved counts the PG copies RemovePG removed since Open.
	PGsRemoved int64

	// DiskBytes is Pebble's on-disk size (tables, blob files, WAL, its
	// manifest) plus DataFileBytes. The rest is Pebble's: memtable bytes, L0 shape, read
	// amplification, bytes compactions are behind, flush and compaction
	// counts, block cache size and hits.
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
	// WALBytesWritten counts the bytes Pebble wrote to its WAL since Open
	// (padding and headers included); WALBytes is the live WAL's size.
	WALBytesWritten uint64
	WALBytes        uint64
	// WALFsync is the latency of Pebble's WAL syncs since Open, which a
	// synced write waits for: a slow or failing disk shows here first
	// (what Ceph's osd perf calls commit latency).
	WALFsync Latencies
}

// Latencies is a histogram of durations: Count of them, Sum seconds, and
// Cumulative[i] of them at most Bounds[i] seconds.
type Latencies struct {
	Count      uint64
	Sum        float64
	Bounds     []float64
	Cumulative []uint64
}

// latencyBounds are the bounds Latencies reports of Pebble's finer
// histogram (100 buckets), in seconds: each is taken as the largest of
// Pebble's at most it.
var latencyBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// latenciesOf reads h, a Pebble histogram of nanoseconds, as Latencies.
func latenciesOf(h prometheus.Histogram) Latencies {
	var m dto.Metric
	if h == nil || h.Write(&m) != nil || m.Histogram == nil {
		return Latencies{}
	}
	ph := m.Histogram
	l := Latencies{Count: ph.GetSampleCount(), Sum: ph.GetSampleSum() / 1e9}
	buckets := ph.GetBucket()
	i := 0
	for _, want := range latencyBounds {
		// The last of Pebble's bounds at most want.
		j := -1
		for ; i < len(buckets) && buckets[i].GetUpperBound()/1e9 <= want*(1+1e-9); i++ {
			j = i
		}
		if j < 0 || len(l.Bounds) > 0 && buckets[j].GetUpperBound()/1e9 == l.Bounds[len(l.Bounds)-1] {
			continue
		}
		l.Bounds = append(l.Bounds, buckets[j].GetUpperBound()/1e9)
		l.Cumulative = append(l.Cumulative, buckets[j].GetCumulativeCount())
	}
	return l
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
	st.SpaceMeasures = s.counters.spaceMeasures.Load()
	st.BodyCRCBytes = s.counters.bodyCRCBytes.Load()
	st.ReadCRCBytes = s.counters.readCRCBytes.Load()
	st.UncheckedReadBytes = s.counters.uncheckedReadBytes.Load()
	st.PGsRemoved = s.counters.pgsRemoved.Load()

	v, closer, err := s.db.Get(keyCounters)
	switch {
	case err == nil:
		if c, derr := decodeCounters(v); derr == nil {
			st.Objects, st.Bytes, st.DataFiles, st.DataFileBytes = c.objects, c.bytes, c.files, c.fileBytes
		}
		closer.Close()
	case !errors.Is(err, pebble.ErrNotFound):
		s.opts.Logger.Warn("store: read counters", "err", err)
	}

	st.DataFilesPending = int64(s.files.pending())
	st.DataFilesRemoved = s.files.removed.Load()
	st.KeptVersions, st.KeptBytes = s.keptStats()
	st.KeepRefused = s.counters.keepRefused.Load()

	m := s.db.Metrics()
	st.DiskBytes = s.dirBytes() + uint64(max(0, st.DataFileBytes))
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
	st.WALBytesWritten = m.WAL.BytesWritten
	st.WALBytes = m.WAL.Size
	st.WALFsync = latenciesOf(m.LogWriter.FsyncLatency)
	return st
}

// WALFsync is Stats().WALFsync alone, for the OSD's beacon.
func (s *Store) WALFsync() Latencies {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return Latencies{}
	}
	return latenciesOf(s.db.Metrics().LogWriter.FsyncLatency)
}

// PGStats is one PG's share of the store's objects and bytes.
type PGStats struct {
	Objects, Bytes int64
}

// PGStats counts PG pg's objects and their bytes (what a primary reports
// to the mon, and the denominator of its degraded counts).
func (s *Store) PGStats(ctx context.Context, pg uint32) (PGStats, error) {
	if err := s.enter(ctx); err != nil {
		return PGStats{}, err
	}
	defer s.leave()
	v, closer, err := s.db.Get(pgCountersKey(pg))
	if errors.Is(err, pebble.ErrNotFound) {
		return PGStats{}, nil
	}
	if err != nil {
		return PGStats{}, err
	}
	defer closer.Close()
	c, err := decodeCounters(v)
	if err != nil {
		return PGStats{}, fmt.Errorf("store: pg %#x counters: %w", pg, err)
	}
	return PGStats{Objects: c.objects, Bytes: c.bytes}, nil
}

// dirBytes is the size of the files in Options.Dir but the reserve: Pebble's
// own. Pebble's Metrics.DiskSpaceUsage is not used: after a reopen it
// loses the size of the blob files the DB had (cockroachdb/pebble#5493),
// and deleting them then takes it below zero, which wraps.
func (s *Store) dirBytes() uint64 {
	fs := s.files.fs
	names, err := fs.List(s.opts.Dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, name := range names {
		if name == reserveName || name == dataDirName {
			continue
		}
		if fi, err := fs.Stat(fs.PathJoin(s.opts.Dir, name)); err == nil && fi.Mode().IsRegular() {
			n += uint64(max(0, fi.Size()))
		}
	}
	return n
}
