// Package store is the Pebble layer of an OSD: it keeps one OSD's objects,
// bucket records and PG logs in a single Pebble database and is the only
// code that touches that database.
//
// It must never return bytes that fail their checksum (a *CorruptError
// comes back instead), never panic on bad stored bytes, never acknowledge
// a write before it is synced, and never leave an object half-written
// after a crash. It knows nothing of the network, placement or
// replication: the OSD orders the ops of each PG, decides which PG an
// object belongs to, and calls Apply on the primary and every replica.
//
// # Key layout
//
// Every key starts with a one-byte namespace; integers are fixed-width
// big-endian, so byte order is numeric order and every scan is a bounded
// range. Bucket names and keys are valid UTF-8 without 0x00 (the store
// rejects others with ErrInvalidKey), so 0x00 separates bucket from key
// and (bucket, key) order is byte order.
//
//	'B' bucket                  -> sealed BucketInfo
//	'O' bucket 0x00 key         -> sealed head: data id, chunk count,
//	                               chunk size, pg, version, [chunk CRC32Cs,]
//	                               ObjectMeta
//	'D' dataID(8) chunk(4)      -> crc32c(4) bytes   (chunk <= 1 MiB)
//	'W' dataID(8)               -> "" : chunks written, head not yet
//	                               "F": a data file no head names
//	'P' pg(4) bucket 0x00 key   -> empty: PG membership, for backfill
//	'L' pg(4) epoch(8) seq(8)   -> sealed LogEntry
//	'R' pg(4) client(8) tid(8)  -> sealed version of the answering entry
//	'G' pg(4)                   -> sealed (last, tail) versions
//	'E' pg(4)                   -> sealed last_epoch_started
//	'I' pg(4)                   -> "": a backfill of the PG is under way
//	'X' pg(4)                   -> "": the PG's removal is under way
//	'N'                         -> sealed data-id high-water mark
//	'S'                         -> object, byte, data-file and data-file
//	                               byte counters (merge deltas)
//
// "Sealed" is a format byte, the payload and a CRC32C over both. A head's
// format byte says where the bytes are: 1, 'D' chunks in Pebble; 2, the data
// file of its data id, with the CRC32C of each of the file's chunks in the
// head (4 bytes per MiB), so a read checks every chunk it touches just as
// it does a Pebble chunk. An object's bytes live under an immutable data
// id, never under its name, so an overwrite writes new bytes and then one
// synced batch swaps the head to the new id and drops the old bytes: a
// reader or a crash sees the old object or the new one, never a mix.
//
// Objects of at least Options.DataFileThreshold bytes (256 KiB by default)
// go to data files (below). Smaller objects of up to one chunk are written
// in the head's batch. Objects between one chunk and the threshold (only
// with a threshold above the chunk size, or none) are written first in
// unsynced batches, the first of which adds a 'W' record that the head
// batch deletes; Pebble's WAL is one sequential log (a WAL rotation syncs
// the old file before the new one takes writes), so syncing the head batch
// also makes the chunks written before it durable. After a crash, Open
// deletes the chunks of every remaining 'W' "" record.
//
// The PG log of a PG holds the entries with versions in (tail, last]: tail
// is exclusive, as in Ceph. Apply writes the log entry, the request index
// and the new last version in the op's own batch, so an op and its log
// entry are durable together and a resent request is answered from the
// log. CopyLog records the entries a recovery copied, with their request
// index and the new last version, in one batch too (a backfill's copy
// replaces the log). TrimLog moves the tail; SetPGLast resets the log to
// start at a new last version.
//
// RemovePG deletes a PG's copy in pages (pgremove.go says how a crash
// midway is made safe: RemovingPGs lists it for the owner to finish).
//
// # Data files
//
// Pebble writes every byte twice, to its WAL and again when the memtable
// flushes (to a blob file), and blob files are rewritten as overwrites
// leave garbage in them. For large objects that doubles the disk traffic of
// every put on a disk shared by the replicas of a PG. A data file is
// written once, straight from the put's body, and synced with fdatasync;
// only the head, the PG log entry and a few small records go through the
// WAL. Files are named by data id, which is never reused, and hold the
// object's bytes zero-padded to a multiple of 4 KiB (the O_DIRECT unit;
// the padding is never read and costs no space, the last block being
// allocated anyway):
//
//	DIR/data/XX/IIIIIIIIIIIIIIII    XX = (id >> 6) mod 256, I = id, both hex
//
// 64 consecutive ids share a directory, so the files of a pool refill
// (consecutive ids) land in one or two directories, and 256 directories
// keep each one small. A subdirectory is created (and data/ synced) the
// first time a process uses it; DIR/data itself at Open.
//
// The invariant that makes crashes safe: every data file that exists, or
// may reappear after a power cut, is named by exactly one durable head or
// one durable 'W' "F" record, never neither. Open removes the file of
// every 'W' "F" record (a missing one is fine), syncs the directories, and
// only then deletes the records. The steps that keep the invariant:
//
//  1. Pool refill (one per 32 large puts, one at a time): a synced batch
//     of 32 'W' "F" records for fresh ids; then the 32 files are created
//     and their directories synced, and only then pooled. A crash anywhere here leaves
//     records whose files Open removes. A put takes a file whose directory
//     entry is already durable, so it need not sync a directory itself.
//  2. Put: the body is written to the pooled file (pwrite) and the file is
//     fdatasync'd, before anything refers to it. A crash leaves the record.
//  3. Head batch (synced): the new head with the file's chunk CRC32Cs, the
//     deletion of the file's 'W' record, the PG log entry, and for the old
//     object either the deletion of its chunks or a 'W' "F" record for its
//     file. This commit is the put's only commit point: before it, the old
//     head and its file are intact and the new file is garbage; after it,
//     the new file is durable (step 2) and named, and the old one is
//     garbage with a durable record. Deletes and bucket purges write the
//     same 'W' "F" records in their batches.
//  4. Reaping: after the commit returns, the old file is "killed" (handed
//     to the reaper goroutine). Once no reader can still reach it (below),
//     the reaper unlinks it, syncs its directory, and only then deletes the
//     record (unsynced: a lost deletion makes Open remove a missing file).
//     Close removes the pool's unused files and every dead file the same
//     way (no reader is left by then).
//
// So a put costs two syncs in a row (the file, then the WAL), and the
// creation of files and removal of dead ones is batched: one Pebble sync
// and one or two directory syncs per 32 files, one directory sync per
// directory per reaper round. A refill starts in the background when the
// pool runs below half, so puts rarely wait for one.
//
// On Linux the body is written with O_DIRECT (set on the pooled file's
// descriptor with fcntl; direct_linux.go): from the caller's memory when
// it is 4 KiB-aligned, else through a pooled aligned buffer, so the page
// cache is neither filled nor copied into. On this project's VMs a page
// cache growing into untouched memory costs 7-14 ms of CPU per 4 MiB
// written; O_DIRECT costs under 1 ms (a pwrite+fdatasync probe). A
// filesystem that refuses O_DIRECT (or the in-memory FS of the crash
// tests, which has no descriptor) gets the same bytes through the page
// cache. Either way the file is then fdatasync'd: O_DIRECT alone does not
// flush the device's cache or the file's size and extents. Reads use
// O_DIRECT too, into aligned extents whose chunks are checked once; gets
// (ReadShared) go through a bounded cache of such verified extents and
// lend them without a copy (extent.go says why).
//
// The threshold: a file put syncs twice and costs an inode and a journal
// commit; an object in Pebble syncs once but is written twice and
// compacted. BenchmarkApplyPutParallelSizes (16 writers, one store, this
// project's 2-core VM, four runs) put 64 KiB objects at 390-540 MB/s in
// Pebble and 130-220 MB/s in files; 256 KiB at 320-420 MB/s in Pebble and
// 590-880 MB/s in files; 1 MiB at 270-375 and 1,050-1,360 MB/s. Serial
// puts (BenchmarkApplyPut) cross over near 64 KiB. Hence 256 KiB.
//
// # Reads of data files
//
// ReadRange reads a head from a Pebble view and then the file it names. An
// overwrite or delete committed between the two must not remove the file
// under the reader. Open file descriptors alone do not close that gap (the
// file can be unlinked before the reader opens it), and retrying with a
// new view when the file is gone would not bound the retries under a
// stream of overwrites, and could not tell a lost file from a replaced one.
// Instead removal is deferred with read epochs, as Pebble defers the
// deletion of obsolete tables for open iterators:
//
//   - Each kill bumps the epoch, after its commit, and records the new
//     epoch with the dead files.
//   - ReadRange registers in the current epoch before it takes its view,
//     and leaves when it has copied the bytes out.
//   - A reader of epoch e registered after every kill of epoch <= e had
//     committed, so its view can only name files killed later. A file
//     killed in epoch k is removed once no reader of an epoch < k remains.
//
// The cost is a short mutex section on entering and leaving each
// ReadRange; a slow reader only delays the removal of files killed while
// it runs (Stats.DataFilesPending). The file is read after the view is
// closed, so a reader pins no memtable or table while it copies. Chunks a
// range read cuts are read whole (to check their CRC32C) into a pooled
// buffer; the chunks it covers are read with one read, straight into the
// caller's buffer.
//
// Stats counts data-file objects and their bytes (DataFiles,
// DataFileBytes, persistent, in the 'S' counters) and adds them to
// DiskBytes.
//
// Compatibility: a store written before data files opens unchanged (format
// 1 heads, 16-byte counters, empty 'W' values are all still read). A store
// with data files cannot go back to an older binary, which would report
// format 2 heads as corrupt.
//
// # Locking
//
// Writers of one PG hold that PG's mutex (the OSD already serialises them;
// the mutex makes a caller bug harmless). Object commits hold bucketMu
// shared and bucket creation and deletion hold it exclusively, so a put
// cannot land in a bucket that is being deleted. Lock order: PG, then
// bucketMu. The data-file pool's lock is held only to take or add files
// (a refill runs outside it, one at a time, and takes the data-id
// allocator's); the read-epoch mutex is a leaf, which the reaper takes
// inside its round lock.
//
// The locks also make two caches safe, which save Pebble lookups on every
// write (a point lookup in a 64 MiB memtable is a skiplist seek of a few
// microseconds, and a fresh iterator costs more): the PG record is cached
// in its PG's state, since only the PG's writers change it; bucket records
// known to exist are cached, since only holders of bucketMu exclusively
// create or delete them. Writers read the rest (the old head, the request
// index) with Pebble point Gets instead of iterators: their locks keep
// what they read stable, so a point-in-time view across reads adds
// nothing.
//
// Readers take no lock but the read-epoch mutex for a moment: each read is
// one Pebble iterator, a point-in-time view of the whole store, plus for a
// data file the file the view's head names. Head, a single read, uses a
// point Get and needs a view only when the object is missing (to tell
// ErrNoSuchBucket from ErrNoSuchKey).
//
// # Pebble tuning
//
// The defaults suit small keys and values; an OSD stores chunks of up to
// 1 MiB (with data files, the default, only objects under the threshold,
// so chunks under 256 KiB). Each choice is explained where it is made
// (options.go); in short:
//
//   - 64 MiB memtables (Pebble's default is 4 MiB), so a memtable holds
//     dozens of chunks and the 4 MiB chunk batches stay below the
//     half-memtable size at which a batch becomes a separate flushable.
//     Four may queue before writes stop.
//   - One 256 MiB block cache per store (pebble.NewCache), mostly for
//     heads, index blocks and PG logs.
//   - L0 compaction starts at 4 sublevels (default) but writes stop only at
//     24 (default 12): long flushes of big values must not stall a PG.
//     Lbase is 512 MiB and L0 tables 32 MiB, matching 64 MiB flushes.
//   - Value separation: chunks of 16 KiB and more go to blob files at
//     flush, so compactions move handles instead of copying object bytes
//     through every level (the dominant write amplification otherwise).
//   - Bloom filters (10 bits/key) on every level: heads, bucket records,
//     request index and PG records are looked up by exact key.
//   - Fastest compression: object bytes are often incompressible.
//   - BytesPerSync 1 MiB for sstables; no WAL bytes-per-sync, since every
//     Apply ends in a synced commit anyway.
//   - The format major version is pinned (FormatValueSeparation) rather
//     than left to Pebble's default.
package store
