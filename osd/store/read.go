package store

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// Head returns an object's metadata: ErrNoSuchBucket when the bucket record
// is missing, ErrNoSuchKey when the object is.
func (s *Store) Head(ctx context.Context, bucket, key string) (*osdpb.ObjectMeta, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if err := checkName(bucket, key, true); err != nil {
		return nil, objErr("head", bucket, key, err)
	}
	// A head found by a point read answers alone (cheaper than a view);
	// only a miss needs the view that tells the two "not found" apart.
	h, ok, err := s.headOf(s.latest(), bucket, key)
	if err == nil && !ok {
		err = s.withView(func(v *view) (err error) {
			h, err = s.lookup(v, bucket, key)
			return err
		})
	}
	if err != nil {
		return nil, objErr("head", bucket, key, err)
	}
	return h.meta, nil
}

// lookup finds an object's head, answering ErrNoSuchBucket/ErrNoSuchKey.
func (s *Store) lookup(v *view, bucket, key string) (*head, error) {
	h, ok, err := s.headOf(v, bucket, key)
	if err != nil {
		return nil, err
	}
	if ok {
		// A head implies its bucket: DeleteBucket purges heads in the batch
		// that removes the record, so the bucket lookup is needed only to
		// tell the two "not found" answers apart.
		return h, nil
	}
	if err := s.needBucket(v, bucket); err != nil {
		return nil, err
	}
	return nil, ErrNoSuchKey
}

// ReadRange returns an object's metadata and appends its bytes
// [off, off+length) to dst (length -1: to the end; a range past the end is
// cut at the end, as S3 does). Head and chunks come from one point-in-time
// view (a data file is immutable and kept until the read is done), so a
// concurrent overwrite or delete is seen wholly or not at all. Every chunk
// the range touches is checked against its CRC32C, and a whole-object read
// also against the object's CRC32C: a mismatch returns a *CorruptError
// (errors.Is(err, ErrCorrupt)) and never the bytes. An offset beyond the
// object (other than 0 on an empty object) is ErrInvalidRange. A multipart
// manifest returns its metadata only; its bytes live in its part objects.
//
// A data file is read from the disk (with O_DIRECT where it can be, see
// extent.go), never from the cache ReadShared reads through, so a read
// sees the file as it is now.
func (s *Store) ReadRange(ctx context.Context, bucket, key string, off, length int64, dst []byte) (*osdpb.ObjectMeta, []byte, error) {
	out := dst
	meta, err := s.readRange(ctx, bucket, key, off, length, nil,
		func(v *view, h *head, lo, hi uint64) (err error) {
			out, err = s.readChunks(v, bucket, key, h, lo, hi, dst)
			return err
		},
		func(h *head, lo, hi uint64) error {
			x, err := s.fileExtent(bucket, key, h, lo, hi, false, false)
			if err != nil {
				return err
			}
			out = append(dst, x.b[lo-x.base:hi-x.base]...)
			x.release()
			return nil
		})
	if err != nil {
		return nil, dst, err
	}
	return meta, out, nil
}

// readRange is ReadRange and ReadShared: it finds the object and its range
// [lo, hi) in one view and hands them to chunks, in the view, for an
// object in Pebble, or to file, after the view, for one in a data file
// (neither for a manifest or an empty range of a file). get is a
// ReadShared's options (nil for ReadRange): a get of a data file that
// stops short of its end holds the object, and one that wants a version
// the object no longer is reads it from the kept ones (keep.go).
func (s *Store) readRange(ctx context.Context, bucket, key string, off, length int64, get *ReadOptions,
	chunks func(v *view, h *head, lo, hi uint64) error, file func(h *head, lo, hi uint64) error) (*osdpb.ObjectMeta, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if err := checkName(bucket, key, true); err != nil {
		return nil, objErr("read", bucket, key, err)
	}
	if off < 0 || length < -1 {
		return nil, objErr("read", bucket, key, fmt.Errorf("%w: offset %d, length %d", ErrInvalidRange, off, length))
	}
	// The read epoch keeps a data file the view's head names on disk until
	// this read is done, however soon an overwrite or delete unlinks it.
	epoch := s.enterRead()
	defer s.leaveRead(epoch)
	var meta *osdpb.ObjectMeta
	var inFile *head
	var lo, hi uint64
	err := s.withView(func(v *view) error {
		h, err := s.lookup(v, bucket, key)
		if want := get.want(); want != nil && (err == nil && !sameVersion(h.meta, want) || errors.Is(err, ErrNoSuchKey)) {
			if k := s.keptHead(bucket, key, want); k != nil {
				h, err = k, nil
			}
		}
		if err != nil {
			return err
		}
		meta = h.meta
		if isManifest(h.meta) {
			return nil
		}
		size := h.meta.GetSize()
		if uint64(off) > size || (uint64(off) == size && size > 0) {
			return fmt.Errorf("%w: offset %d, object size %d", ErrInvalidRange, off, size)
		}
		lo, hi = uint64(off), size
		if length >= 0 && uint64(length) < size-lo {
			hi = lo + uint64(length)
		}
		if h.inFile && hi > lo {
			// Read after the view is closed: the file is immutable and
			// the epoch protects it, so the view need not pin Pebble's
			// memtables and tables meanwhile.
			inFile = h
			return nil
		}
		return chunks(v, h, lo, hi)
	})
	if err == nil && inFile != nil {
		if s.files.beforeFileRead != nil {
			s.files.beforeFileRead()
		}
		if get != nil && hi < inFile.meta.GetSize() && s.opts.KeepReplacedFor > 0 {
			// More windows may follow: hold the object for them. A kill
			// since the view is undone (the epoch kept the file).
			s.hold(bucket, key, inFile)
		}
		err = file(inFile, lo, hi)
	}
	if err != nil {
		return nil, objErr("read", bucket, key, err)
	}
	s.counters.readBytes.Add(int64(hi - lo))
	return meta, nil
}

// readChunks appends bytes [off, end) of the object to dst.
func (s *Store) readChunks(v *view, bucket, key string, h *head, off, end uint64, dst []byte) ([]byte, error) {
	if off == end {
		return dst, nil
	}
	cs := uint64(h.chunkSize)
	first, last := uint32(off/cs), uint32((end-1)/cs)
	start := len(dst)
	dst = slices.Grow(dst, int(end-off))
	bad := func(n uint32, format string, args ...any) error {
		s.counters.corruptions.Add(1)
		return &CorruptError{Bucket: bucket, Key: key, Chunk: int64(n), Detail: fmt.Sprintf(format, args...)}
	}
	ok := v.scan(chunkKey(h.dataID, first), chunkKey(h.dataID, last+1))
	for n := first; n <= last; n++ {
		want := chunkKey(h.dataID, n)
		if !ok || string(v.it.Key()) != string(want) {
			if err := v.it.Error(); err != nil {
				return nil, fmt.Errorf("read chunk %d: %w", n, err)
			}
			return nil, bad(n, "chunk missing (data id %d)", h.dataID)
		}
		val, err := v.it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("read chunk %d: %w", n, err)
		}
		b, err := decodeChunk(val)
		if err != nil {
			return nil, bad(n, "%v", err)
		}
		if len(b) != h.chunkLen(n) {
			return nil, bad(n, "chunk of %d bytes, want %d", len(b), h.chunkLen(n))
		}
		lo, hi := uint64(0), uint64(len(b))
		if n == first {
			lo = off - uint64(n)*cs
		}
		if n == last {
			hi = end - uint64(n)*cs
		}
		dst = append(dst, b[lo:hi]...)
		ok = v.it.Next()
	}
	if err := v.it.Error(); err != nil {
		return nil, fmt.Errorf("read chunks: %w", err)
	}
	if err := s.checkWhole(bucket, key, h, off, end, dst[start:]); err != nil {
		return nil, err
	}
	return dst, nil
}

// checkWhole checks a whole-object read against the client's CRC32C: it
// catches what per-chunk CRCs cannot, a chunking bug that stored the wrong
// bytes.
func (s *Store) checkWhole(bucket, key string, h *head, off, end uint64, b []byte) error {
	if off != 0 || end != h.meta.GetSize() {
		return nil
	}
	if got := crc32c(b); got != h.meta.GetCrc32C() {
		s.counters.corruptions.Add(1)
		return &CorruptError{Bucket: bucket, Key: key, Chunk: -1,
			Detail: fmt.Sprintf("object crc32c %08x, meta says %08x", got, h.meta.GetCrc32C())}
	}
	return nil
}

// HeadBucket returns a bucket's record, or ErrNoSuchBucket.
func (s *Store) HeadBucket(ctx context.Context, name string) (*osdpb.BucketInfo, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if err := checkName(name, "", false); err != nil {
		return nil, fmt.Errorf("store: head bucket: %w", err)
	}
	var info *osdpb.BucketInfo
	err := s.withView(func(v *view) error {
		val, ok, err := v.get(bucketKey(name))
		if err != nil {
			return err
		}
		if !ok {
			return ErrNoSuchBucket
		}
		info, err = decodeBucket(val)
		if err != nil {
			s.counters.corruptions.Add(1)
			return corrupt(name, "", "bucket record: %v", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: head bucket %q: %w", name, err)
	}
	return info, nil
}

// bucketPage is how many records Buckets reads per view. The Store is not
// held between pages, so a slow consumer pins no Pebble state.
const bucketPage = 256

// Buckets yields every bucket record in ascending name order. An error is
// yielded once, last.
func (s *Store) Buckets(ctx context.Context) iter.Seq2[*osdpb.BucketInfo, error] {
	lo := []byte{nsBucket}
	hi := prefixEnd(lo)
	return paged(lo, bucketPage, bucketPage, func(lo []byte, size int) ([]*osdpb.BucketInfo, []byte, error) {
		return s.bucketPage(ctx, lo, hi, size)
	})
}

// paged yields the items of the pages read from lo on, in order, until a
// page has no next (where the following page starts) or read fails; the
// error is yielded once, last. Pages grow from first to most items,
// eightfold a page, so that a caller who stops after a few items has
// read few.
func paged[T any](lo []byte, first, most int, read func(lo []byte, size int) (page []T, next []byte, err error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		lo := lo
		for size := first; ; size = min(size*8, most) {
			page, next, err := read(lo, size)
			for _, x := range page {
				if !yield(x, nil) {
					return
				}
			}
			if err != nil {
				yield(zero, err)
				return
			}
			if next == nil {
				return
			}
			lo = next
		}
	}
}

// bucketPage reads up to size records from lo; next is where the
// following page starts, nil at the end.
func (s *Store) bucketPage(ctx context.Context, lo, hi []byte, size int) (page []*osdpb.BucketInfo, next []byte, err error) {
	if err := s.enter(ctx); err != nil {
		return nil, nil, err
	}
	defer s.leave()
	err = s.withView(func(v *view) error {
		for ok := v.scan(lo, hi); ok; ok = v.it.Next() {
			if len(page) == size {
				next = slices.Clone(v.it.Key())
				return nil
			}
			val, err := v.it.ValueAndErr()
			if err != nil {
				return err
			}
			b, err := decodeBucket(val)
			if err != nil {
				s.counters.corruptions.Add(1)
				return corrupt(string(v.it.Key()[1:]), "", "bucket record: %v", err)
			}
			page = append(page, b)
		}
		return v.it.Error()
	})
	if err != nil {
		return page, nil, fmt.Errorf("store: list buckets: %w", err)
	}
	return page, next, nil
}

// BucketEmpty reports whether the bucket holds no local object (in any PG).
// ErrNoSuchBucket if the record is missing.
func (s *Store) BucketEmpty(ctx context.Context, bucket string) (bool, error) {
	if err := s.enter(ctx); err != nil {
		return false, err
	}
	defer s.leave()
	if err := checkName(bucket, "", false); err != nil {
		return false, fmt.Errorf("store: bucket empty: %w", err)
	}
	empty := false
	err := s.withView(func(v *view) error {
		if err := s.needBucket(v, bucket); err != nil {
			return err
		}
		lo := headPrefix(bucket)
		empty = !v.scan(lo, prefixEnd(lo))
		return v.it.Error()
	})
	if err != nil {
		return false, fmt.Errorf("store: bucket empty %q: %w", bucket, err)
	}
	return empty, nil
}
