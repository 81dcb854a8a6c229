package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
)

// DefaultGCMinAge is how old a hidden object must be for CollectGarbage to
// remove it by default: far above the time between an upload's record and
// its parts, and above any clock skew between OSDs worth running with.
const DefaultGCMinAge = time.Hour

// GCOptions choose what CollectGarbage removes.
type GCOptions struct {
	// MinAge: only hidden objects written longer ago than this are
	// removed; default DefaultGCMinAge.
	MinAge time.Duration
	// DryRun removes nothing, only reports what it would remove.
	DryRun bool
	// Now is the clock; default time.Now (tests).
	Now func() time.Time
}

// GCUpload is an upload CollectGarbage removed: its bucket was deleted
// after it began (or deleted and made again).
type GCUpload struct {
	Bucket string
	MultipartUpload
}

// GCReport is what CollectGarbage found.
type GCReport struct {
	// Uploads are the upload records removed, of buckets deleted since.
	Uploads []GCUpload
	// Parts are the hidden parts and pieces removed: of no upload in
	// progress and of no object (an abort or a replaced object whose
	// deletes failed, an upload of a deleted bucket).
	Parts []string
	// Bytes the removed parts held.
	Bytes int64
	// Kept counts the hidden objects looked at and kept: of uploads in
	// progress, of objects, or too young.
	Kept int
}

// gcDeletesAtOnce bounds CollectGarbage's deletes in flight.
const gcDeletesAtOnce = 16

// CollectGarbage removes what the multipart bucket holds for nothing, as
// RGW's garbage collection does:
//   - the records of uploads whose bucket was deleted since they began,
//     which no listing shows and nobody can complete or abort;
//   - parts and pieces that belong neither to an upload in progress nor
//     to an object (S3 clients' aborts and overwrites whose part deletes
//     were lost, and the parts of the uploads above).
//
// It reads the multipart bucket first, then the buckets, then every
// object's parts, so that an upload completed or begun meanwhile keeps
// its parts; and it takes nothing younger than opts.MinAge. It needs
// read and write on every bucket (an admin). A remove that fails is
// returned joined with the others; the rest go on.
func (c *Client) CollectGarbage(ctx context.Context, opts GCOptions) (GCReport, error) {
	var rep GCReport
	if opts.MinAge <= 0 {
		opts.MinAge = DefaultGCMinAge
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	cutoff := now().Add(-opts.MinAge)
	type record struct {
		key, bucket string
		up          MultipartUpload
	}
	type part struct {
		key, uploadID string
		size          int64
		written       time.Time
	}
	var (
		records []record
		parts   []part
	)
	for o, err := range c.list(ctx, ops.MultipartBucket, ListOptions{}) {
		if err != nil {
			return rep, fmt.Errorf("client: gc: listing uploads: %w", err)
		}
		if b, k, id, ok := ops.ParseUploadKey(o.Key); ok {
			records = append(records, record{o.Key, b, MultipartUpload{Key: k, UploadID: id, Initiated: o.LastModified, Internal: o.internal}})
			continue
		}
		id, _, ok := ops.ParsePartKey(o.Key)
		if !ok {
			id, _, _, _, ok = ops.ParsePieceKey(o.Key)
		}
		if ok {
			parts = append(parts, part{o.Key, id, o.Size, o.LastModified})
		}
	}
	// Every bucket: only caps that read every bucket read the multipart
	// bucket listed above, so no bucket is left out of this list for the
	// caps (and with it the parts its objects name).
	buckets, err := c.ListBuckets(ctx)
	if err != nil {
		return rep, fmt.Errorf("client: gc: %w", err)
	}
	created := make(map[string]time.Time, len(buckets))
	for _, b := range buckets {
		created[b.Name] = b.Created
	}
	// An upload outlives its bucket when the bucket is gone, or was made
	// again after the upload began (by more than MinAge, so that the
	// OSDs' clocks, which stamp both, cannot disagree on the order).
	live := map[string]bool{}
	var orphans []record
	for _, r := range records {
		b, ok := created[r.bucket]
		if ok && !b.After(r.up.Initiated.Add(opts.MinAge)) || r.up.Initiated.After(cutoff) {
			live[r.up.UploadID] = true
			continue
		}
		orphans = append(orphans, r)
	}
	// The parts every object names.
	named := map[string]bool{}
	for _, b := range buckets {
		for o, err := range c.list(ctx, b.Name, ListOptions{}) {
			if errors.Is(err, ErrNoSuchBucket) {
				break // deleted meanwhile: it names nothing now
			}
			if err != nil {
				return rep, fmt.Errorf("client: gc: listing %s: %w", b.Name, err)
			}
			for _, p := range o.meta.GetParts() {
				named[p.GetKey()] = true
			}
		}
	}
	var (
		mu   sync.Mutex
		errs []error
	)
	remove := func(k string) bool {
		if opts.DryRun {
			return true
		}
		err := c.removeHidden(ctx, k)
		if err != nil && !errors.Is(err, ErrNoSuchKey) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
			mu.Unlock()
			return false
		}
		return true
	}
	// Records first: once one is gone its upload cannot be completed, so
	// its parts are garbage for certain.
	for _, r := range orphans {
		if remove(r.key) {
			rep.Uploads = append(rep.Uploads, GCUpload{Bucket: r.bucket, MultipartUpload: r.up})
		} else {
			live[r.up.UploadID] = true
		}
	}
	var garbage []part
	for _, p := range parts {
		if live[p.uploadID] || named[p.key] || p.written.After(cutoff) {
			rep.Kept++
			continue
		}
		garbage = append(garbage, p)
	}
	removed := make([]bool, len(garbage))
	ops.Parallel(len(garbage), gcDeletesAtOnce, func(i int) { removed[i] = remove(garbage[i].key) })
	for i, p := range garbage {
		if removed[i] {
			rep.Parts = append(rep.Parts, p.key)
			rep.Bytes += p.size
		}
	}
	return rep, errors.Join(errs...)
}

// dropBucketUploads turns off RemoveBucket's removal of the bucket's
// uploads, for tests that leave what a cleanup cut short would.
var dropBucketUploads = true

// dropUploads removes the uploads of a bucket RemoveBucket just deleted,
// with their parts, as S3 does: nobody could complete or abort them any
// more, and a bucket made again under the name would list them. The
// records are listed first and removed only if the bucket is still gone
// after, so that each was of the deleted bucket, never of one made again
// meanwhile (whose uploads CollectGarbage judges by their times). Best
// effort, past ctx's end for a while as other cleanups: what it misses,
// CollectGarbage removes.
func (c *Client) dropUploads(ctx context.Context, bucket string) {
	if !dropBucketUploads {
		return
	}
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	type upload struct{ record, id string }
	var ups []upload
	for o, err := range c.list(ctx, ops.MultipartBucket, ListOptions{Prefix: bucket + "/"}) {
		if err != nil {
			c.log.Warn("client: listing the uploads of a deleted bucket (osprey gc removes them)", "bucket", bucket, "err", err)
			return
		}
		if b, _, id, ok := ops.ParseUploadKey(o.Key); ok && b == bucket {
			ups = append(ups, upload{o.Key, id})
		}
	}
	if len(ups) == 0 {
		return
	}
	if _, err := c.StatBucket(ctx, bucket); !errors.Is(err, ErrNoSuchBucket) {
		return
	}
	for _, u := range ups {
		err := c.removeHidden(ctx, u.record)
		if err == nil {
			err = c.removeParts(ctx, u.id)
		}
		if err != nil {
			c.log.Warn("client: removing an upload of a deleted bucket (osprey gc removes what is left)", "bucket", bucket, "upload", u.id, "err", err)
		}
	}
}
