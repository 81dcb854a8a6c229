package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// recordFn adds an op's PG-log bookkeeping (log entry, reqid index, PG
// record) to the op's batch; nil for backfill installs, which bypass the log.
// replaced is the meta of the object a put or delete replaces, nil when none.
type recordFn func(b *pebble.Batch, replaced *osdpb.ObjectMeta) error

// Apply applies one PG log entry to PG pg atomically with appending it to
// the PG log, indexing its request id and advancing the PG's last version to
// e.Version; the commit is synced before Apply returns.
//
// Versions are per PG and strictly increasing: an entry at or below the
// PG's last version returns ErrStaleVersion (callers answer resends from
// FindRequest). Errors that are the op's answer (ErrNoSuchBucket,
// ErrBucketExists, ErrBadDigest) leave the PG log unchanged.
//
// Kinds:
//   - OP_PUT: body holds exactly e.Meta.Size bytes whose CRC32C is
//     e.Meta.Crc32C, else ErrBadDigest and nothing is written; a multipart
//     manifest (e.Meta.Parts non-empty) has an empty body. The bucket must
//     exist. The bytes go under a fresh data id (chunks in Pebble, or a
//     synced data file from DataFileThreshold bytes); one synced batch then
//     swaps the head, drops the old bytes and records the entry, so a crash
//     leaves the old or the new object, never a mix.
//   - OP_DELETE: removes the object; a missing key is not an error (S3), the
//     entry is logged with e.Status as given. The bucket must exist.
//   - OP_CREATE_BUCKET: creates the bucket record, created at
//     e.Meta.MtimeUnixNano (the primary sets it so replicas agree; the local
//     clock if zero). ErrBucketExists if present.
//   - OP_DELETE_BUCKET: ErrNoSuchBucket if missing; removes the record and
//     every local object of the bucket in any PG (the caller checked
//     emptiness cluster-wide; puts that raced it are purged).
//
// A put or delete that replaces an object sets e.DroppedParts to what
// Options.DroppedParts says of it (when it says anything), and logs it so.
//
// REQUIRES: the caller serialises Applies per PG (the OSD's op queue). A
// violation cannot corrupt the store (a per-PG lock orders them) but one of
// two racing entries for the same version gets ErrStaleVersion.
func (s *Store) Apply(ctx context.Context, pg uint32, e *osdpb.LogEntry, body []byte) error {
	return s.ApplyChecked(ctx, pg, e, body, nil)
}

// Checked is an entry and body that passed Check: Apply need not read the
// body again for its CRC32C.
type Checked struct {
	e      *osdpb.LogEntry
	body   []byte
	crcs   []uint32 // a data file's chunk CRC32Cs
	inFile bool
}

// CheckOptions are what a caller of Check may hand in.
type CheckOptions struct {
	// Space, when set, is the filesystem's usage the caller measured
	// just before (Space), which a put's room check then uses instead of
	// measuring again: the OSD measures its disk for its full ratios
	// before every write that adds data, so a put costs one statfs.
	Space *Space
	// ChunkCRCs, when ChunkSize is the store's (Options.ChunkSize), are
	// the CRC32Cs of the body's ChunkSize-byte chunks from its start (the
	// last one the remainder), as the messenger computed them while the
	// body arrived (msgr.Message.DataChunkCRCs). A put to a data file then
	// checks the meta's CRC32C by combining them, with no pass over the
	// body, and keeps them as its chunks' (a body kept inline, its CRC32C
	// only); a list that does not give the meta's CRC32C, or has the wrong
	// count, is ErrBadDigest. For another chunk size the store computes.
	// REQUIRES: they are the CRCs of body as Check is given it.
	ChunkCRCs []uint32
	ChunkSize int
}

// Check runs the checks of Apply that depend only on the entry, its body
// and the store as it is now: the kind and names, a put's size and CRC32C
// (one pass over the body, which ApplyChecked then skips), room for it,
// and the bucket. What passes fails in ApplyChecked only on an I/O error,
// on space lost since, or on a bucket deleted since. The OSD checks a
// write before it sends the entry to its replicas and applies it locally
// meanwhile, so that an answer such as ErrBadDigest comes before any
// replica has the entry.
func (s *Store) Check(ctx context.Context, e *osdpb.LogEntry, body []byte, opts CheckOptions) (*Checked, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if e == nil {
		return nil, fmt.Errorf("store: check: %w: no log entry", ErrInvalidArgument)
	}
	if err := checkEntry(e); err != nil {
		return nil, fmt.Errorf("store: check: %w", err)
	}
	ck := &Checked{e: e, body: body}
	switch e.Kind {
	case osdpb.OpKind_OP_PUT:
		if err := s.room(len(body), opts.Space); err != nil {
			return nil, objErr("put", e.Bucket, e.Key, err)
		}
		crcs, inFile, err := s.checkBody(e, body, &opts)
		if err != nil {
			return nil, err
		}
		ck.crcs, ck.inFile = crcs, inFile
	case osdpb.OpKind_OP_DELETE:
		if len(body) != 0 {
			return nil, fmt.Errorf("store: delete %q/%q: %w: body on a delete", e.Bucket, e.Key, ErrInvalidArgument)
		}
	}
	// Bucket records change only on the meta PG's shard, where its writes
	// are applied in order; object writes are checked again at apply. A
	// bucket an object commit found is known (knownBuckets, which a bucket
	// delete clears) and costs no read; Check only reads the cache, since
	// what it read without bucketMu could be a record being deleted.
	exists := false
	if e.Kind == osdpb.OpKind_OP_PUT || e.Kind == osdpb.OpKind_OP_DELETE {
		_, exists = s.knownBuckets.Load(e.Bucket)
	}
	if !exists {
		if err := s.withView(func(v *view) (err error) { exists, err = s.bucketExists(v, e.Bucket); return err }); err != nil {
			return nil, err
		}
	}
	switch {
	case e.Kind == osdpb.OpKind_OP_CREATE_BUCKET && exists:
		return nil, fmt.Errorf("store: create bucket %q: %w", e.Bucket, ErrBucketExists)
	case e.Kind != osdpb.OpKind_OP_CREATE_BUCKET && !exists:
		return nil, objErr("write", e.Bucket, e.Key, ErrNoSuchBucket)
	}
	return ck, nil
}

// ApplyChecked is Apply of an entry that passed Check (ck, or nil for
// none): the same entry and body, or Apply checks the body itself.
func (s *Store) ApplyChecked(ctx context.Context, pg uint32, e *osdpb.LogEntry, body []byte, ck *Checked) error {
	a, err := s.ApplyAsync(ctx, pg, e, body, ck)
	if err != nil {
		return err
	}
	return a.Durable()
}

// Applied is an entry that ApplyAsync applied: its batch is in the WAL and
// visible to reads, and its synced commit may still be in flight.
type Applied struct {
	s *Store
	b *pebble.Batch // its batch, while the sync is in flight; nil when none is
	// old is the head its commit replaced (of bucket/key), whose data file
	// is retired once the commit is durable.
	bucket, key string
	old         *head
}

// Durable waits until the entry's commit is synced. REQUIRES: called exactly
// once, from any goroutine; Close waits for it. An error means the WAL could
// not be synced: the entry may or may not survive a crash, and must not be
// acknowledged.
func (a *Applied) Durable() error {
	defer a.s.leave()
	if a.b == nil {
		return nil
	}
	err := a.b.SyncWait()
	if err == nil {
		// A crash before the sync would bring the old head back, which
		// still names these files.
		a.s.retire(a.bucket, a.key, a.old)
	}
	a.b.Close()
	return err
}

// ApplyAsync is ApplyChecked that returns once the entry is applied (in the
// WAL and visible, as after Pebble's synced commit, which publishes a batch
// before its sync), without waiting for the sync: the caller waits with
// Applied.Durable, and acknowledges nothing before it returns. The PG's
// lock is free for the next entry meanwhile; the WAL is written in order,
// so the sync that covers an entry covers every entry applied before it.
// An object put is pipelined so; other kinds are synced before ApplyAsync
// returns.
func (s *Store) ApplyAsync(ctx context.Context, pg uint32, e *osdpb.LogEntry, body []byte, ck *Checked) (*Applied, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	a := &Applied{s: s}
	if err := s.applyAsync(ctx, pg, e, body, ck, a); err != nil {
		s.leave()
		return nil, err
	}
	return a, nil
}

func (s *Store) applyAsync(ctx context.Context, pg uint32, e *osdpb.LogEntry, body []byte, ck *Checked, a *Applied) error {
	if e == nil || e.Version == nil {
		return fmt.Errorf("store: apply pg %d: %w: log entry without a version", pg, ErrInvalidArgument)
	}
	if err := checkEntry(e); err != nil {
		return fmt.Errorf("store: apply pg %d: %w", pg, err)
	}
	if ck != nil && (ck.e != e || len(ck.body) != len(body) || (len(body) > 0 && &ck.body[0] != &body[0])) {
		ck = nil
	}
	ver := versionOf(e.Version)
	st := s.lockPG(pg)
	defer st.mu.Unlock()

	info, err := s.pgRecord(st, pg)
	if err != nil {
		return err
	}
	if !info.last.less(ver) {
		return fmt.Errorf("store: apply pg %d: entry %v at or below last %v: %w", pg, ver, info.last, ErrStaleVersion)
	}
	logged, err := appendProto(nil, e)
	if err != nil {
		return err
	}
	next := info
	next.last = ver
	record := func(b *pebble.Batch, replaced *osdpb.ObjectMeta) error {
		if replaced != nil && s.opts.DroppedParts != nil {
			if keys := s.opts.DroppedParts(e, replaced); len(keys) > 0 {
				e.DroppedParts = keys
				relogged, err := appendProto(nil, e)
				if err != nil {
					return err
				}
				logged = relogged
			}
		}
		if err := b.Set(logKey(pg, e.Version), logged, nil); err != nil {
			return err
		}
		if e.Req != nil {
			if err := b.Set(reqKey(pg, e.Req), appendReqVersion(nil, ver), nil); err != nil {
				return err
			}
		}
		return b.Set(pgKey(pg), appendPGInfo(nil, next), nil)
	}
	err = s.applyKind(ctx, pg, e, body, ck, record, a)
	// Answers such as ErrNoSuchBucket leave the record as it was, but a
	// failed commit may or may not have written it: any error drops the
	// cache, and the next op reads the record again.
	st.setPGRecord(next, err == nil)
	return err
}

// SyncWAL returns once everything applied so far is synced: for an answer
// that rests on entries applied earlier (a resent request found in the
// log), whose own Durable may still be waiting.
func (s *Store) SyncWAL(ctx context.Context) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if f := s.opts.syncWALStarting; f != nil {
		f()
	}
	return s.db.LogData(nil, pebble.Sync)
}

// checkEntry validates an entry's kind and names before anything is
// encoded or locked.
func checkEntry(e *osdpb.LogEntry) error {
	switch e.Kind {
	case osdpb.OpKind_OP_PUT, osdpb.OpKind_OP_DELETE:
		return checkName(e.Bucket, e.Key, true)
	case osdpb.OpKind_OP_CREATE_BUCKET, osdpb.OpKind_OP_DELETE_BUCKET:
		return checkName(e.Bucket, "", false)
	default:
		return fmt.Errorf("%w: op kind %v", ErrInvalidArgument, e.Kind)
	}
}

// applyKind dispatches one entry for Apply (record != nil) or InstallObject.
// With a, a put's commit is not waited for (ApplyAsync).
func (s *Store) applyKind(ctx context.Context, pg uint32, e *osdpb.LogEntry, body []byte, ck *Checked, record recordFn, a *Applied) error {
	switch e.Kind {
	case osdpb.OpKind_OP_PUT:
		if ck == nil { // Check measured the room just before
			if err := s.room(len(body), nil); err != nil {
				return objErr("put", e.Bucket, e.Key, err)
			}
		}
		return s.putObject(ctx, pg, e, body, ck, record, a)
	case osdpb.OpKind_OP_DELETE:
		if len(body) != 0 {
			return fmt.Errorf("store: delete %q/%q: %w: body on a delete", e.Bucket, e.Key, ErrInvalidArgument)
		}
		return s.deleteObject(ctx, pg, e.Bucket, e.Key, record != nil, ck, record)
	case osdpb.OpKind_OP_CREATE_BUCKET:
		// A bucket record is metadata, which the reserve is for; the OSD
		// refuses clients' new buckets by its full ratios.
		return s.createBucket(e, record)
	case osdpb.OpKind_OP_DELETE_BUCKET:
		return s.deleteBucket(ctx, e.Bucket, record)
	default:
		return fmt.Errorf("store: pg %d: %w: op kind %v", pg, ErrInvalidArgument, e.Kind)
	}
}

// InstallObject installs one entry pulled by backfill on a replica, without
// touching the PG log (CopyLog or SetPGLast sets the version afterwards).
// OP_PUT stores the object (checked like Apply's put; the bucket must
// exist, so backfill pulls bucket records first), OP_DELETE removes it,
// OP_CREATE_BUCKET writes the bucket record (replacing one present;
// created time from e.Meta.MtimeUnixNano), OP_DELETE_BUCKET removes the
// record and the bucket's local objects (a missing bucket is not an
// error).
func (s *Store) InstallObject(ctx context.Context, pg uint32, e *osdpb.LogEntry, body []byte) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if e == nil {
		return fmt.Errorf("store: install pg %d: %w: nil entry", pg, ErrInvalidArgument)
	}
	st := s.lockPG(pg)
	defer st.mu.Unlock()
	return s.applyKind(ctx, pg, e, body, nil, nil, nil)
}

// RemoveObject deletes one object of PG pg without touching the PG log
// (backfill found it gone on the primary). A missing object is not an error.
func (s *Store) RemoveObject(ctx context.Context, pg uint32, bucket, key string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	st := s.lockPG(pg)
	defer st.mu.Unlock()
	return s.deleteObject(ctx, pg, bucket, key, false, nil, nil)
}

func objErr(op, bucket, key string, err error) error {
	return fmt.Errorf("store: %s %q/%q: %w", op, bucket, key, err)
}

// putObject writes an object, in one of three ways:
//
//   - Objects of at least DataFileThreshold bytes go to a data file from
//     the pool (its 'W' record and directory entry already durable),
//     written and fdatasync'd before the synced head batch, which names the
//     file, records its chunk CRCs and deletes the 'W' record. A crash
//     before that commit leaves the record, and Open removes the file.
//   - Objects of up to one chunk (inlineMax) go in the head's own synced
//     batch.
//   - Others are written first, unsynced, in batches of chunkBatchBytes
//     under a fresh data id with a pending record ('W' id) in the first
//     batch; the synced head batch then deletes that record. Pebble's WAL
//     is one sequential log, and a WAL rotation syncs the old file before
//     the new one takes writes, so syncing the head batch also makes every
//     earlier (unsynced) chunk batch durable: the head can never be durable
//     without its chunks. A crash before the head commit leaves the
//     pending record, and Open deletes those chunks.
//
// checkBody checks a put's meta and body: sizes, and the body's CRC32C
// against the meta's, from the chunk CRCs in opts where they serve. It
// returns a data file's chunk CRC32Cs (inFile).
func (s *Store) checkBody(e *osdpb.LogEntry, body []byte, opts *CheckOptions) (crcs []uint32, inFile bool, err error) {
	bucket, key, meta := e.Bucket, e.Key, e.Meta
	if err := checkName(bucket, key, true); err != nil {
		return nil, false, objErr("put", bucket, key, err)
	}
	if meta == nil {
		return nil, false, objErr("put", bucket, key, fmt.Errorf("%w: no object meta", ErrInvalidArgument))
	}
	if isManifest(meta) {
		if len(body) != 0 {
			return nil, false, objErr("put", bucket, key, fmt.Errorf("%w: multipart manifest with a %d-byte body", ErrInvalidArgument, len(body)))
		}
		return nil, false, nil
	}
	inFile = len(body) > 0 && s.opts.DataFileThreshold > 0 && len(body) >= s.opts.DataFileThreshold
	if uint64(len(body)) != meta.Size {
		return nil, false, objErr("put", bucket, key, fmt.Errorf("%w: body has %d bytes, meta says %d", ErrBadDigest, len(body), meta.Size))
	}
	var sum uint32
	switch {
	case len(body) > 0 && opts != nil && opts.ChunkCRCs != nil && opts.ChunkSize == s.opts.ChunkSize:
		// The messenger's, computed as the body arrived: no pass here.
		if n := chunkCount(uint64(len(body)), uint32(s.opts.ChunkSize)); uint64(len(opts.ChunkCRCs)) != n {
			return nil, false, objErr("put", bucket, key, fmt.Errorf("%w: %d chunk crcs for %d chunks", ErrBadDigest, len(opts.ChunkCRCs), n))
		}
		sum = crc32cOfChunks(opts.ChunkCRCs, uint32(s.opts.ChunkSize), uint64(len(body)))
		if inFile {
			crcs = slices.Clone(opts.ChunkCRCs) // the head keeps them; the caller's are valid only until its message goes
		}
	case inFile:
		// One pass over the body: the object's CRC32C follows from the
		// chunks' (which the head keeps).
		crcs = s.chunkCRCs(body, uint32(s.opts.ChunkSize))
		sum = crc32cOfChunks(crcs, uint32(s.opts.ChunkSize), uint64(len(body)))
	default:
		sum = s.bodyCRC(body)
	}
	if sum != meta.Crc32C {
		return nil, false, objErr("put", bucket, key, fmt.Errorf("%w: body crc32c %08x, meta says %08x", ErrBadDigest, sum, meta.Crc32C))
	}
	return crcs, inFile, nil
}

func (s *Store) putObject(ctx context.Context, pg uint32, e *osdpb.LogEntry, body []byte, ck *Checked, record recordFn, a *Applied) error {
	bucket, key, meta := e.Bucket, e.Key, e.Meta
	var crcs []uint32 // a data file's chunk CRC32Cs
	var inFile bool
	if ck != nil {
		crcs, inFile = ck.crcs, ck.inFile
	} else {
		var err error
		if crcs, inFile, err = s.checkBody(e, body, nil); err != nil {
			return err
		}
	}
	if inFile || len(body) > s.inlineMax {
		// Fail fast, before writing any byte; commitObject checks again
		// under bucketMu, where it counts. An inline put writes nothing
		// before that check, so it skips this one.
		exists, err := s.bucketExists(s.latest(), bucket)
		if err != nil {
			return err
		}
		if !exists {
			return objErr("put", bucket, key, ErrNoSuchBucket)
		}
	}

	h := &head{pg: pg, version: versionOf(e.Version), meta: meta}
	var inline []byte
	pending := false
	if !isManifest(meta) && len(body) > 0 {
		h.chunkSize = uint32(s.opts.ChunkSize)
		n := chunkCount(uint64(len(body)), h.chunkSize)
		if n > math.MaxUint32 {
			return objErr("put", bucket, key, fmt.Errorf("%w: %d chunks", ErrInvalidArgument, n))
		}
		h.chunks = uint32(n)
		switch {
		case inFile:
			if err := ctx.Err(); err != nil {
				return err
			}
			id, err := s.writeDataFile(body)
			if err != nil {
				return objErr("put", bucket, key, err)
			}
			h.dataID, h.inFile, h.crcs, pending = id, true, crcs, true
		case len(body) <= s.inlineMax:
			id, err := s.newDataID()
			if err != nil {
				return err
			}
			h.dataID = id
			inline = body
		default:
			id, err := s.newDataID()
			if err != nil {
				return err
			}
			h.dataID = id
			pending = true
			if err := s.writeChunks(ctx, h, body); err != nil {
				s.discardData(h.dataID)
				return objErr("put", bucket, key, err)
			}
		}
	}
	committed, err := s.commitObject(ctx, pg, bucket, key, h, inline, pending, ck, record, a)
	if err != nil {
		if pending && !committed {
			if h.inFile {
				s.killDataFiles(h.dataID)
			} else {
				s.discardData(h.dataID)
			}
		}
		return objErr("put", bucket, key, err)
	}
	s.counters.puts.Add(1)
	s.counters.writtenBytes.Add(int64(len(body)))
	return nil
}

// addChunks adds chunks [from, to) of body to b.
func addChunks(b *pebble.Batch, h *head, body []byte, from, to uint32) error {
	cs := int(h.chunkSize)
	for n := from; n < to; n++ {
		start := int(n) * cs
		chunk := body[start:min(start+cs, len(body))]
		op := b.SetDeferred(dataKeyLen, chunkValueLen(len(chunk)))
		putChunkKey(op.Key, h.dataID, n)
		putChunk(op.Value, chunk)
		if err := op.Finish(); err != nil {
			return err
		}
	}
	return nil
}

// writeChunks writes a large object's chunks unsynced (see putObject).
func (s *Store) writeChunks(ctx context.Context, h *head, body []byte) error {
	per := uint32(max(1, s.chunkBatchBytes/int(h.chunkSize)))
	for from := uint32(0); from < h.chunks; from += per {
		if err := ctx.Err(); err != nil {
			return err
		}
		to := min(from+per, h.chunks)
		b := s.newDataBatch(int(to-from)*(int(h.chunkSize)+dataKeyLen+16) + 64)
		err := func() error {
			defer b.Close()
			if from == 0 {
				if err := b.Set(pendingKey(h.dataID), pendingChunks, nil); err != nil {
					return err
				}
			}
			if err := addChunks(b, h, body, from, to); err != nil {
				return err
			}
			return b.Commit(pebble.NoSync)
		}()
		if err != nil {
			return fmt.Errorf("write chunks %d-%d of data %d: %w", from, to, h.dataID, err)
		}
	}
	return nil
}

// newDataBatch returns a batch sized for size bytes of chunks. Pebble pools
// closed batches but drops buffers over 1 MiB by default, which would make
// every multi-MiB put allocate its batch afresh; retaining up to one chunk
// batch (4 MiB) lets the pool recycle them.
func (s *Store) newDataBatch(size int) *pebble.Batch {
	return s.db.NewBatchWithSize(size, pebble.WithMaxRetainedSizeBytes(s.chunkBatchBytes+MaxChunkSize/4))
}

// discardData removes the chunks and pending record of a put that will not
// commit. Best effort: if it fails, Open collects them.
func (s *Store) discardData(id uint64) {
	b := s.db.NewBatch()
	defer b.Close()
	lo, hi := dataSpan(id)
	err := b.DeleteRange(lo, hi, nil)
	if err == nil {
		err = b.Delete(pendingKey(id), nil)
	}
	if err == nil {
		err = b.Commit(pebble.NoSync)
	}
	if err != nil {
		s.opts.Logger.Warn("store: discard chunks of failed put; Open will retry", "data_id", id, "err", err)
	}
}

// dropData removes a head's bytes in b. Chunks are deleted: point deletes
// carry the deleted size, which lets Pebble's compaction picker see how
// much space they free; an object of many chunks gets one range tombstone
// instead of thousands of point tombstones. A data file gets a 'W' record
// in the batch that unlinks it from its head; once that batch commits the
// caller hands the file to the reaper (killDataFiles), which removes it
// when no reader can still reach it.
func dropData(b *pebble.Batch, h *head) error {
	if h == nil || h.chunks == 0 {
		return nil
	}
	if h.inFile {
		return b.Set(pendingKey(h.dataID), pendingFile, nil)
	}
	if h.chunks > 64 {
		lo, hi := dataSpan(h.dataID)
		return b.DeleteRange(lo, hi, nil)
	}
	for n := range h.chunks {
		if err := b.DeleteSized(chunkKey(h.dataID, n), uint32(chunkValueLen(h.chunkLen(n))), nil); err != nil {
			return err
		}
	}
	return nil
}

// fileOf is the data file a head owns, for killDataFiles after the commit
// that drops it; nil if its bytes are not in a file.
func fileOf(h *head) []uint64 {
	if h == nil || !h.inFile {
		return nil
	}
	return []uint64{h.dataID}
}

// dataBytes is what an object adds to Stats.Bytes.
func dataBytes(h *head) int64 {
	if h == nil || isManifest(h.meta) {
		return 0
	}
	return int64(h.meta.GetSize())
}

// headCounters is what one object adds to the counters. A nil head (present
// but corrupt) counts as an object of unknown, uncounted, size.
func headCounters(h *head) counters {
	c := counters{objects: 1, bytes: dataBytes(h)}
	if h != nil && h.inFile {
		c.files, c.fileBytes = 1, c.bytes
	}
	return c
}

// addCounters adds d to the store's counters and to PG pg's, in b.
func addCounters(b *pebble.Batch, pg uint32, d counters) error {
	v := appendCounters(nil, d)
	if err := b.Merge(keyCounters, v, nil); err != nil {
		return err
	}
	return b.Merge(pgCountersKey(pg), v, nil)
}

// pgOfHead is the PG an existing object is counted in: its head's, or
// (corrupt head) the PG the op names.
func pgOfHead(h *head, pg uint32) uint32 {
	if h == nil {
		return pg
	}
	return h.pg
}

func (c counters) neg() counters {
	return counters{-c.objects, -c.bytes, -c.files, -c.fileBytes}
}

// oldHead reads the head an op replaces. A corrupt head is replaced anyway
// (the op makes the key whole again); its chunks cannot be found and leak,
// which is logged.
func (s *Store) oldHead(v getter, bucket, key string) (old *head, present bool, err error) {
	old, present, err = s.headOf(v, bucket, key)
	if errors.Is(err, ErrCorrupt) {
		s.opts.Logger.Warn("store: replacing a corrupt head; its chunks are leaked", "bucket", bucket, "key", key, "err", err)
		return nil, true, nil
	}
	return old, present, err
}

// commitObject commits a put's head batch under bucketMu (shared). It
// reports whether the commit was attempted: after a failed commit the
// pending record must stay, since Pebble may have applied the batch.
func (s *Store) commitObject(ctx context.Context, pg uint32, bucket, key string, h *head, inline []byte, pending bool, ck *Checked, record recordFn, a *Applied) (attempted bool, err error) {
	s.bucketMu.RLock()
	defer s.bucketMu.RUnlock()
	// Point reads of the latest state: bucketMu keeps the bucket record and
	// the PG lock keeps the head from changing until the commit.
	var old *head
	var present bool
	err = func() error {
		g := s.latest()
		exists, err := s.bucketKnown(g, bucket)
		if err != nil {
			return err
		}
		if !exists {
			return ErrNoSuchBucket
		}
		old, present, err = s.oldHead(g, bucket, key)
		return err
	}()
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	hv, err := appendHead(nil, h)
	if err != nil {
		return false, err
	}
	b := s.newDataBatch(len(inline) + len(hv) + 256)
	err = func() error {
		if len(inline) > 0 {
			if err := addChunks(b, h, inline, 0, h.chunks); err != nil {
				return err
			}
		}
		if err := b.Set(headKey(bucket, key), hv, nil); err != nil {
			return err
		}
		if err := b.Set(pgIndexKey(pg, bucket, key), nil, nil); err != nil {
			return err
		}
		if err := dropData(b, old); err != nil {
			return err
		}
		if old != nil && old.pg != pg {
			if err := b.Delete(pgIndexKey(old.pg, bucket, key), nil); err != nil {
				return err
			}
		}
		if pending {
			if err := b.Delete(pendingKey(h.dataID), nil); err != nil {
				return err
			}
		}
		if err := addCounters(b, pg, headCounters(h)); err != nil {
			return err
		}
		if present {
			if err := addCounters(b, pgOfHead(old, pg), headCounters(old).neg()); err != nil {
				return err
			}
		}
		if record != nil {
			return record(b, old.metaOrNil())
		}
		return nil
	}()
	if err != nil {
		b.Close()
		return false, err
	}
	// The old version is retiring before the commit publishes the new
	// head (Pebble publishes before it syncs): a reader that began on it
	// finds it there until retire decides (keep.go).
	s.replacing(bucket, key, old)
	if a != nil {
		if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
			b.Close()
			s.notReplacing(old)
			return true, fmt.Errorf("commit: %w", err)
		}
		a.b, a.bucket, a.key, a.old = b, bucket, key, old
		return true, nil
	}
	defer b.Close()
	if err := b.Commit(pebble.Sync); err != nil {
		s.notReplacing(old)
		return true, fmt.Errorf("commit: %w", err)
	}
	s.retire(bucket, key, old)
	return true, nil
}

// metaOrNil is h's meta, nil for no head.
func (h *head) metaOrNil() *osdpb.ObjectMeta {
	if h == nil {
		return nil
	}
	return h.meta
}

// deleteObject removes an object. requireBucket: Apply answers
// ErrNoSuchBucket for a missing bucket (S3); backfill removals do not care.
func (s *Store) deleteObject(ctx context.Context, pg uint32, bucket, key string, requireBucket bool, ck *Checked, record recordFn) error {
	if err := checkName(bucket, key, true); err != nil {
		return objErr("delete", bucket, key, err)
	}
	s.bucketMu.RLock()
	defer s.bucketMu.RUnlock()
	// Point reads of the latest state, as in commitObject.
	var old *head
	var present bool
	err := func() error {
		g := s.latest()
		if requireBucket {
			exists, err := s.bucketKnown(g, bucket)
			if err != nil {
				return err
			}
			if !exists {
				return ErrNoSuchBucket
			}
		}
		var err error
		old, present, err = s.oldHead(g, bucket, key)
		return err
	}()
	if err != nil {
		return objErr("delete", bucket, key, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !present && record == nil {
		return nil // nothing to remove, nothing to log
	}
	b := s.db.NewBatch()
	defer b.Close()
	err = func() error {
		if present {
			if err := b.Delete(headKey(bucket, key), nil); err != nil {
				return err
			}
			if err := b.Delete(pgIndexKey(pg, bucket, key), nil); err != nil {
				return err
			}
			if old != nil && old.pg != pg {
				if err := b.Delete(pgIndexKey(old.pg, bucket, key), nil); err != nil {
					return err
				}
			}
			if err := dropData(b, old); err != nil {
				return err
			}
			if err := addCounters(b, pgOfHead(old, pg), headCounters(old).neg()); err != nil {
				return err
			}
		}
		if record != nil {
			return record(b, old.metaOrNil())
		}
		return nil
	}()
	if err == nil {
		s.replacing(bucket, key, old) // before the commit publishes, as commitObject
		if err = b.Commit(pebble.Sync); err != nil {
			s.notReplacing(old)
		}
	}
	if err != nil {
		return objErr("delete", bucket, key, err)
	}
	s.retire(bucket, key, old)
	s.counters.deletes.Add(1)
	return nil
}

// createBucket writes a bucket record; install replaces an existing one.
func (s *Store) createBucket(e *osdpb.LogEntry, record recordFn) error {
	if err := checkName(e.Bucket, "", false); err != nil {
		return fmt.Errorf("store: create bucket: %w", err)
	}
	s.bucketMu.Lock()
	defer s.bucketMu.Unlock()
	if record != nil {
		var exists bool
		if err := s.withView(func(v *view) (err error) { exists, err = s.bucketExists(v, e.Bucket); return err }); err != nil {
			return err
		}
		if exists {
			return fmt.Errorf("store: create bucket %q: %w", e.Bucket, ErrBucketExists)
		}
	}
	created := e.GetMeta().GetMtimeUnixNano()
	if created == 0 {
		created = time.Now().UnixNano()
	}
	val, err := appendProto(nil, &osdpb.BucketInfo{Name: e.Bucket, CreatedUnixNano: created})
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	err = b.Set(bucketKey(e.Bucket), val, nil)
	if err == nil && record != nil {
		err = record(b, nil)
	}
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	if err != nil {
		s.knownBuckets.Delete(e.Bucket) // the record may or may not be there
		return fmt.Errorf("store: create bucket %q: %w", e.Bucket, err)
	}
	s.knownBuckets.Store(e.Bucket, struct{}{})
	return nil
}

// purgePage bounds the objects one purge batch deletes, so deleting a
// bucket that still holds many local objects does not build one huge batch.
var purgePage = 1024

// deleteBucket removes a bucket record and every local object of the
// bucket. Full pages of objects are deleted in unsynced batches; the last
// batch, with the record and the log entry, is synced. A crash part-way
// leaves the bucket with fewer objects, and the unacknowledged delete is
// retried. Apply (record != nil) requires the bucket; install does not.
func (s *Store) deleteBucket(ctx context.Context, bucket string, record recordFn) error {
	if err := checkName(bucket, "", false); err != nil {
		return fmt.Errorf("store: delete bucket: %w", err)
	}
	s.bucketMu.Lock()
	defer s.bucketMu.Unlock()
	// Whatever happens below, the record may be gone.
	defer s.knownBuckets.Delete(bucket)
	var exists bool
	if err := s.withView(func(v *view) (err error) { exists, err = s.bucketExists(v, bucket); return err }); err != nil {
		return err
	}
	if !exists && record != nil {
		return fmt.Errorf("store: delete bucket %q: %w", bucket, ErrNoSuchBucket)
	}
	lo := headPrefix(bucket)
	hi := prefixEnd(lo)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := s.db.NewBatch()
		more := false
		var files []uint64
		err := s.withView(func(v *view) error {
			var d counters
			pgd := map[uint32]counters{} // a corrupt head's PG is unknown: store total only
			n := 0
			ok := v.scan(lo, hi)
			for ; ok && n < purgePage; ok = v.it.Next() {
				k := v.it.Key()
				key := string(k[len(lo):])
				val, err := v.it.ValueAndErr()
				if err != nil {
					return err
				}
				h, err := decodeHead(val)
				if err != nil {
					s.opts.Logger.Warn("store: purging a corrupt head; its chunks are leaked", "bucket", bucket, "key", key, "err", err)
				} else {
					if err := dropData(b, h); err != nil {
						return err
					}
					files = append(files, fileOf(h)...)
					if err := b.Delete(pgIndexKey(h.pg, bucket, key), nil); err != nil {
						return err
					}
				}
				if err := b.Delete(k, nil); err != nil {
					return err
				}
				d.add(headCounters(h).neg())
				if h != nil {
					c := pgd[h.pg]
					c.add(headCounters(h).neg())
					pgd[h.pg] = c
				}
				n++
			}
			if err := v.it.Error(); err != nil {
				return err
			}
			more = ok
			for pg, c := range pgd {
				if err := b.Merge(pgCountersKey(pg), appendCounters(nil, c), nil); err != nil {
					return err
				}
			}
			if n > 0 {
				return b.Merge(keyCounters, appendCounters(nil, d), nil)
			}
			return nil
		})
		if err == nil {
			if more {
				err = b.Commit(pebble.NoSync)
			} else {
				err = b.Delete(bucketKey(bucket), nil)
				if err == nil && record != nil {
					err = record(b, nil)
				}
				if err == nil {
					err = b.Commit(pebble.Sync)
				}
			}
		}
		b.Close()
		if err != nil {
			return fmt.Errorf("store: delete bucket %q: %w", bucket, err)
		}
		s.killDataFiles(files...)
		if !more {
			return nil
		}
	}
}
