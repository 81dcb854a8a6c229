package store

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ospreystore/osprey/internal/guard"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Options configures a Store. The zero value of every field but Dir picks
// the default.
type Options struct {
	// Dir is the Pebble data directory; created if missing.
	Dir string
	// CacheSize is the block cache, default 256 MiB. One cache is created per
	// Store and shared by its tables; object chunks are mostly read once per
	// GET, so the cache mainly keeps heads, index blocks and PG logs hot.
	CacheSize int64
	// ReadCacheSize bounds the cache of checked whole objects read from
	// data files, default 512 MiB; negative turns it off (every get then
	// reads the disk with O_DIRECT). Gets of cached objects are sent from
	// it with no read and no copy (osd/store/extent.go); size it to the
	// hot objects, as BlueStore's cache is (1-3 GiB per OSD).
	ReadCacheSize int64
	// ReadCacheAlloc, if set, gives the read cache (and the O_DIRECT
	// reads that fill it) its memory instead of the store's own pool. An
	// OSD on RDMA passes memory registered with its public messenger's
	// transport, so that a cached get's reply is read by the client where
	// it lies, with no copy (extent.go).
	ReadCacheAlloc Allocator
	// MemTableSize is the steady-state memtable, default 64 MiB or 1/256
	// of the data filesystem, whichever is smaller (at least 256 KiB): the
	// WAL grows to a memtable's size and up to four memtables queue for
	// their flush, so on a small disk a 64 MiB memtable alone would fill the
	// headroom the full ratio leaves. Pebble's
	// 4 MiB default would hold only three 1 MiB chunks, so puts would force a
	// flush every few objects and pile tiny L0 tables up to the write-stall
	// limit. 64 MiB holds dozens of chunks, and since a batch larger than
	// half a memtable bypasses it as a "flushable batch", it also keeps the
	// 4 MiB chunk batches of a put on the ordinary memtable path.
	MemTableSize uint64
	// ChunkSize is the largest chunk an object is split into, default and
	// maximum 1 MiB (MaxChunkSize). Smaller chunks make range reads touch
	// fewer bytes; tests use small chunks to exercise multi-chunk objects.
	ChunkSize int
	// DataFileThreshold: objects of at least this many bytes keep their
	// bytes in a data file of their own (DIR/data/) instead of in Pebble,
	// default 256 KiB; negative keeps every object in Pebble. A data file is
	// written once and fdatasync'd, where Pebble writes every byte twice (WAL,
	// then a flush to a blob file) and compactions move it again. Below the
	// threshold the file's own sync (two syncs per put instead of one) and
	// its inode cost more than the double write saves; see the package
	// comment.
	DataFileThreshold int
	// KeepReplacedFor is how long a get that stops short of an object's
	// end (a read in windows) holds the object: an overwrite or delete
	// meanwhile keeps the replaced data file, so the reader's next window
	// (ReadOptions.Want) still reads the object it began on, as S3 has a
	// GET finish with the object it started. Default 30 s, negative for
	// none (keep.go).
	KeepReplacedFor time.Duration
	// KeepReplacedBytes bounds the bytes of the files kept so, default
	// 256 MiB: past it a replaced file is removed at once and its reader
	// is told to read again.
	KeepReplacedBytes int64
	// LogKeep is how many PG log entries per PG TrimLog keeps, default 2000.
	// A replica that falls further behind than this is backfilled.
	LogKeep int
	// Logger receives Pebble's events and the Store's own warnings;
	// default slog.Default().
	Logger *slog.Logger
	// ReserveBytes is the reserve kept for the store's own metadata, so
	// that deletes and a restart work on a full disk (space.go); default 1%
	// of the data filesystem within [8 MiB, 64 MiB], negative for none.
	ReserveBytes int64
	// WALMinSyncInterval, when positive, is the least time between two
	// syncs of Pebble's WAL (Pebble's WALMinSyncInterval): a synced commit
	// that comes sooner after the last sync waits for the next one, with
	// the commits that arrive meanwhile, instead of syncing alone. Every
	// put is still acknowledged only once its commit is synced. Default 0:
	// sync as soon as a commit asks and the last sync ended. It saves CPU
	// where the CPU, not the disk, bounds small puts (a client and three
	// OSDs on two busy cores: 500 µs to 1 ms cut a 4 KiB put's CPU over the
	// cluster by about 8% at load 10, nothing measurable at load 5), and
	// costs throughput where the disk does: one store with 16 writers made
	// half as many 4 KiB puts per second with 500 µs (BenchmarkApplyPutParallel).
	WALMinSyncInterval time.Duration

	// DiskSlowThreshold: a write or sync on the store's disk in flight for
	// longer is slow: logged, and Store.DiskStall reports it (the OSD
	// gives up its PGs past osd.Config.DiskStallTimeout). Default 5s,
	// Pebble's; negative: no disk health checks.
	DiskSlowThreshold time.Duration
	// OnFatal, if set, is called with Pebble's message when Pebble meets an
	// error it cannot continue from (a failed WAL write, say); it must not
	// return. The daemon exits cleanly there; the default panics, which keeps
	// the stack for a library user.
	OnFatal func(msg string)
	// DroppedParts, if set, is asked by the apply of a put or delete that
	// replaces an object, with that object's meta, which keys of the
	// multipart bucket the entry makes garbage; the apply records them in
	// the entry (LogEntry.DroppedParts) before it logs it. The apply reads
	// the replaced head anyway, so the entry that every member logs says
	// what to delete at no second read, and a resend answered from any
	// member's log can delete it again.
	DroppedParts func(e *osdpb.LogEntry, replaced *osdpb.ObjectMeta) []string

	// fs replaces the OS filesystem; tests set it to Pebble's crashable
	// in-memory filesystem to simulate power loss.
	fs vfs.FS
	// syncWALStarting, when set (tests), runs as SyncWAL starts.
	syncWALStarting func()
}

// WithFSForTest makes the store use fs instead of the OS filesystem: tests,
// here and in the OSD, run stores on Pebble's crashable in-memory
// filesystem to cut the power under them.
func WithFSForTest(o Options, fs vfs.FS) Options {
	o.fs = fs
	return o
}

// WithSyncWALHookForTest makes the store call f each time SyncWAL starts:
// a test holding the WAL's syncs learns that an answer now waits for one.
func WithSyncWALHookForTest(o Options, f func()) Options {
	o.syncWALStarting = f
	return o
}

// memTableFor is the default memtable for a filesystem of total bytes (0:
// unknown); see Options.MemTableSize.
func memTableFor(total uint64) uint64 {
	if total == 0 {
		return defaultMemTableSize
	}
	return min(max(total/256, minMemTableSize), defaultMemTableSize)
}

const (
	minMemTableSize          = 256 << 10
	defaultDataFileThreshold = 256 << 10
	defaultCacheSize         = 256 << 20
	defaultMemTableSize      = 64 << 20
	defaultLogKeep           = 2000
	defaultKeepReplacedFor   = 30 * time.Second
	defaultKeepReplacedBytes = 256 << 20
)

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, fmt.Errorf("%w: Options.Dir is empty", ErrInvalidArgument)
	}
	if o.CacheSize <= 0 {
		o.CacheSize = defaultCacheSize
	}
	switch {
	case o.ReadCacheSize == 0:
		o.ReadCacheSize = defaultReadCacheBytes
	case o.ReadCacheSize < 0:
		o.ReadCacheSize = 0
	}
	switch {
	case o.ChunkSize == 0:
		o.ChunkSize = MaxChunkSize
	case o.ChunkSize < 0 || o.ChunkSize > MaxChunkSize:
		return o, fmt.Errorf("%w: ChunkSize %d not in [1, %d]", ErrInvalidArgument, o.ChunkSize, MaxChunkSize)
	}
	if o.DataFileThreshold == 0 {
		o.DataFileThreshold = defaultDataFileThreshold
	}
	if o.LogKeep <= 0 {
		o.LogKeep = defaultLogKeep
	}
	if o.KeepReplacedFor == 0 {
		o.KeepReplacedFor = defaultKeepReplacedFor
	}
	if o.KeepReplacedBytes == 0 {
		o.KeepReplacedBytes = defaultKeepReplacedBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DiskSlowThreshold == 0 {
		o.DiskSlowThreshold = defaultDiskSlowThreshold
	}
	return o, nil
}

// pebbleOptions is where the LSM is tuned for an object store: values of up
// to 1 MiB that are written once, read whole or in ranges, and deleted by
// overwrite, next to small heads, log entries and index keys.
func pebbleOptions(o Options, cache *pebble.Cache) *pebble.Options {
	po := &pebble.Options{
		FS:           o.fs,
		Cache:        cache,
		MemTableSize: o.MemTableSize,
		// Four queued memtables (256 MiB at the default size) absorb a burst of
		// multi-MiB puts while one memtable is flushing, instead of stalling
		// writers at the default of two.
		MemTableStopWritesThreshold: 4,
		// Compact L0 after four tables or sublevels, as Pebble does by default,
		// but stop writes only at 24 sublevels rather than 12: large values make
		// flushes long, and an OSD that stalls stalls its whole PG and every
		// replica waiting on it. Read amplification from a deep L0 costs one
		// extra seek per sublevel on head lookups, which bloom filters mostly
		// absorb.
		L0CompactionThreshold: 4,
		L0StopWritesThreshold: 24,
		// With 64 MiB memtables a 64 MiB Lbase (the default) would be refilled
		// by every flush, adding a level and its rewrite; 512 MiB keeps the
		// tree shallow.
		LBaseMaxBytes: 512 << 20,
		// Sync sstables every 1 MiB while writing them so a flush of a 64 MiB
		// memtable does not end in one long fsync that delays WAL syncs.
		BytesPerSync: 1 << 20,
		// No background WAL syncing: every Apply ends in a synced commit, so a
		// sync_file_range every N bytes only adds I/O to the commit path.
		WALBytesPerSync: 0,
		// Options.WALMinSyncInterval; a negative one is none.
		WALMinSyncInterval: func() time.Duration { return max(o.WALMinSyncInterval, 0) },
		// Pin the format instead of inheriting Pebble's default, which may
		// change between releases; FormatValueSeparation enables blob files.
		FormatMajorVersion: pebble.FormatValueSeparation,
		Merger:             countersMergerDef,
		Logger:             pebbleLogger{o.Logger, o.OnFatal},
		EventListener:      eventListener(o.Logger),
		// One compaction normally, up to half the cores when L0 or compaction
		// debt builds up; the other half serves the network and checksums.
		CompactionConcurrencyRange: func() (int, int) {
			return 1, max(2, runtime.GOMAXPROCS(0)/2)
		},
	}
	// Flushes of a 64 MiB memtable are split into 32 MiB L0 tables rather
	// than 2 MiB ones, so L0 holds a handful of files per flush.
	po.TargetFileSizes[0] = 32 << 20
	for i := range po.Levels {
		// Heads, bucket records, reqid and PG records are looked up by exact
		// key (SeekPrefixGE with the default whole-key Split); a 10-bit bloom
		// filter skips tables that cannot hold the key.
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// Object bytes are often already compressed (media, archives, encrypted
	// data). The "fastest" profile gives up quickly on incompressible blocks
	// and still shrinks heads and logs.
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionFastest })
	// Value separation (WiscKey-style blob files): at flush, values of 16 KiB
	// and more (object chunks) go to blob files and the sstables keep only a
	// handle, so compactions rewrite keys instead of re-copying every chunk
	// once per level. Overwrites leave garbage in blob files; a file is
	// rewritten once 20% of it is garbage and it is older than 5 minutes.
	po.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           16 << 10,
			MaxBlobReferenceDepth: 10,
			RewriteMinimumAge:     5 * time.Minute,
			TargetGarbageRatio:    0.20,
		}
	}
	return po
}

// pebbleLogger sends Pebble's log lines to slog.
type pebbleLogger struct {
	l       *slog.Logger
	onFatal func(string)
}

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Info(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf must not return (Pebble's contract: it reports a broken invariant
// or a write it cannot take back, and continuing could write bad data).
// Options.OnFatal decides how to stop; without it a panic keeps the stack.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true)
	if p.onFatal != nil {
		p.onFatal(msg)
	}
	panic("pebble: " + msg)
}

// eventListener logs only what an operator acts on: background errors,
// detected corruption, write stalls and full disks (slow ones: diskWatch). Flush and compaction
// events are counted in Stats instead of logged. Background errors and
// low-space warnings repeat for as long as their cause lasts (a flush that
// fails on a full disk is retried at once, again and again): at most one
// line of each per 10 s, with the count of those suppressed.
func eventListener(l *slog.Logger) *pebble.EventListener {
	rl := &guard.RateLog{}
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			rl.Log(l, slog.LevelError, "background", "pebble background error", "err", err)
		},
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			l.Error("pebble detected corruption", "path", info.Path, "err", info.Details)
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			l.Warn("pebble write stall", "reason", info.Reason)
		},
		WriteStallEnd: func() { l.Info("pebble write stall ended") },
		LowDiskSpace: func(info pebble.LowDiskSpaceInfo) {
			rl.Log(l, slog.LevelWarn, "lowspace", "low disk space", "avail_bytes", info.AvailBytes, "total_bytes", info.TotalBytes)
		},
	}
}

// countersMergerDef sums counters merge operands. Its name is recorded in
// the store's OPTIONS file, so it must never change.
var countersMergerDef = &pebble.Merger{
	Name: "osprey.counters.v1",
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		m := &countersMerger{}
		m.add(value)
		return m, nil
	},
}

// countersMerger adds deltas. A malformed operand counts as zero rather than
// failing: a merge error would fail every compaction touching the key.
type countersMerger struct{ c counters }

func (m *countersMerger) add(v []byte) {
	if d, err := decodeCounters(v); err == nil {
		m.c.add(d)
	}
}

func (m *countersMerger) MergeNewer(v []byte) error { m.add(v); return nil }
func (m *countersMerger) MergeOlder(v []byte) error { m.add(v); return nil }

func (m *countersMerger) Finish(bool) ([]byte, io.Closer, error) {
	return appendCounters(nil, m.c), nil, nil
}
