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
//	                               chunk size, pg, version, ObjectMeta
//	'D' dataID(8) chunk(4)      -> crc32c(4) bytes   (chunk <= 1 MiB)
//	'W' dataID(8)               -> empty: chunks written, head not yet
//	'P' pg(4) bucket 0x00 key   -> empty: PG membership, for backfill
//	'L' pg(4) epoch(8) seq(8)   -> sealed LogEntry
//	'R' pg(4) client(8) tid(8)  -> sealed version of the answering entry
//	'G' pg(4)                   -> sealed (last, tail) versions
//	'N'                         -> sealed data-id high-water mark
//	'S'                         -> object and byte counters (merge deltas)
//
// "Sealed" is a format byte, the payload and a CRC32C over both. An
// object's bytes live under an immutable data id, never under its name, so
// an overwrite writes new chunks and then one synced batch swaps the head
// to the new id and deletes the old chunks: a reader or a crash sees the
// old object or the new one, never a mix. Objects of up to one chunk are
// written in that same batch. Larger ones are written first in unsynced
// batches, the first of which adds a 'W' record that the head batch
// deletes; Pebble's WAL is one sequential log (a WAL rotation syncs the
// old file before the new one takes writes), so syncing the head batch
// also makes the chunks written before it durable. After a crash, Open
// deletes the chunks of every remaining 'W' record.
//
// The PG log of a PG holds the entries with versions in (tail, last]: tail
// is exclusive, as in Ceph. Apply writes the log entry, the request index
// and the new last version in the op's own batch, so an op and its log
// entry are durable together and a resent request is answered from the
// log. TrimLog moves the tail; SetPGLast (after a backfill) resets the log
// to start at the new last version.
//
// # Locking
//
// Writers of one PG hold that PG's mutex (the OSD already serialises them;
// the mutex makes a caller bug harmless). Object commits hold bucketMu
// shared and bucket creation and deletion hold it exclusively, so a put
// cannot land in a bucket that is being deleted. Lock order: PG, then
// bucketMu. Readers take no lock: each read is one Pebble iterator, a
// point-in-time view of the whole store.
//
// # Pebble tuning
//
// The defaults suit small keys and values; an OSD stores 1 MiB chunks.
// Each choice is explained where it is made (options.go); in short:
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
