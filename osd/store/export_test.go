package store

// Test hooks: reach under the API to damage or inspect stored bytes. They
// are compiled only into this package's tests.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// SetPurgePageForTest shrinks the bucket purge page and returns a restore.
func SetPurgePageForTest(n int) func() {
	old := purgePage
	purgePage = n
	return func() { purgePage = old }
}

func (s *Store) rawHead(bucket, key string) (*head, error) {
	v, closer, err := s.db.Get(headKey(bucket, key))
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return decodeHead(v)
}

// CorruptChunkForTest flips one byte of a stored chunk, leaving its CRC.
func (s *Store) CorruptChunkForTest(bucket, key string, chunk uint32) error {
	h, err := s.rawHead(bucket, key)
	if err != nil {
		return err
	}
	k := chunkKey(h.dataID, chunk)
	v, closer, err := s.db.Get(k)
	if err != nil {
		return err
	}
	bad := bytes.Clone(v)
	closer.Close()
	bad[len(bad)-1] ^= 0x5a
	return s.db.Set(k, bad, pebble.Sync)
}

// CorruptHeadForTest flips one byte inside an object's head.
func (s *Store) CorruptHeadForTest(bucket, key string) error {
	k := headKey(bucket, key)
	v, closer, err := s.db.Get(k)
	if err != nil {
		return err
	}
	bad := bytes.Clone(v)
	closer.Close()
	bad[len(bad)/2] ^= 0x01
	return s.db.Set(k, bad, pebble.Sync)
}

// WritePendingForTest writes the chunks of a put and its pending record but
// no head: the state a crash between the two phases leaves.
func (s *Store) WritePendingForTest(ctx context.Context, size int) (uint64, error) {
	id, err := s.newDataID()
	if err != nil {
		return 0, err
	}
	body := bytes.Repeat([]byte{0xab}, size)
	h := &head{dataID: id, chunkSize: uint32(s.opts.ChunkSize)}
	h.chunks = uint32(chunkCount(uint64(size), h.chunkSize))
	return id, s.writeChunks(ctx, h, body)
}

// FlushForTest flushes memtables and compacts everything, so reads go
// through sstables and blob files.
func (s *Store) FlushForTest(ctx context.Context) error {
	if err := s.db.Flush(); err != nil {
		return err
	}
	return s.db.Compact(ctx, []byte{0}, []byte{0xff}, false)
}

// CheckIntegrityForTest walks the whole store: every head decodes, its
// chunks exist and verify, it has its PG index entry; no chunk belongs to a
// data id no head references; no pending record remains; the counters
// match the heads.
func (s *Store) CheckIntegrityForTest() error {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return err
	}
	defer it.Close()
	referenced := map[uint64]bool{}
	var objects, size int64
	var errs []error
	lo := []byte{nsHead}
	it.SetBounds(lo, prefixEnd(lo))
	type obj struct {
		bucket, key string
		h           *head
	}
	var heads []obj
	for ok := it.First(); ok; ok = it.Next() {
		k := bytes.Clone(it.Key()[1:])
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			errs = append(errs, fmt.Errorf("head key %q without separator", k))
			continue
		}
		h, err := decodeHead(it.Value())
		if err != nil {
			errs = append(errs, fmt.Errorf("head %q: %w", k, err))
			continue
		}
		heads = append(heads, obj{string(k[:i]), string(k[i+1:]), h})
		objects++
		size += dataBytes(h)
		if h.dataID != 0 {
			referenced[h.dataID] = true
		}
	}
	for _, o := range heads {
		if _, c, err := s.db.Get(pgIndexKey(o.h.pg, o.bucket, o.key)); err != nil {
			errs = append(errs, fmt.Errorf("%q/%q: pg index: %w", o.bucket, o.key, err))
		} else {
			c.Close()
		}
		for n := range o.h.chunks {
			v, c, err := s.db.Get(chunkKey(o.h.dataID, n))
			if err != nil {
				errs = append(errs, fmt.Errorf("%q/%q chunk %d: %w", o.bucket, o.key, n, err))
				continue
			}
			b, err := decodeChunk(v)
			if err == nil && len(b) != o.h.chunkLen(n) {
				err = fmt.Errorf("length %d, want %d", len(b), o.h.chunkLen(n))
			}
			c.Close()
			if err != nil {
				errs = append(errs, fmt.Errorf("%q/%q chunk %d: %w", o.bucket, o.key, n, err))
			}
		}
	}
	lo = []byte{nsData}
	it.SetBounds(lo, prefixEnd(lo))
	for ok := it.First(); ok; ok = it.Next() {
		if id := binary.BigEndian.Uint64(it.Key()[1:]); !referenced[id] {
			errs = append(errs, fmt.Errorf("chunk %x of unreferenced data id %d", it.Key(), id))
		}
	}
	lo = []byte{nsPending}
	it.SetBounds(lo, prefixEnd(lo))
	for ok := it.First(); ok; ok = it.Next() {
		errs = append(errs, fmt.Errorf("pending record %x remains", it.Key()))
	}
	v, c, err := s.db.Get(keyCounters)
	var cnt counters
	if err == nil {
		cnt, err = decodeCounters(v)
		c.Close()
	} else if errors.Is(err, pebble.ErrNotFound) {
		err = nil
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("counters: %w", err))
	} else if cnt.objects != objects || cnt.bytes != size {
		errs = append(errs, fmt.Errorf("counters say %d objects, %d bytes; heads say %d, %d", cnt.objects, cnt.bytes, objects, size))
	}
	return errors.Join(append(errs, it.Error())...)
}

// SetChunkBatchBytesForTest bounds the unsynced chunk batches of a put, so
// a test can make a put span many of them.
func (s *Store) SetChunkBatchBytesForTest(n int) { s.chunkBatchBytes = n }

// WithFSForTest makes the store use fs instead of the OS filesystem.
func WithFSForTest(o Options, fs vfs.FS) Options {
	o.fs = fs
	return o
}
