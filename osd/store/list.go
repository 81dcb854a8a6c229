package store

import (
	"bytes"
	"context"
	"fmt"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// ListOptions selects the objects List returns.
type ListOptions struct {
	// Prefix limits the listing to keys that start with it.
	Prefix string
	// Delimiter, when set, rolls keys whose remainder after Prefix contains
	// it up to one common prefix each (Prefix + remainder up to and
	// including the first Delimiter).
	Delimiter string
	// StartAfter: only keys greater than it are listed. When it is itself a
	// common prefix (as a continuation that ended on a common prefix passes
	// it), everything under it is skipped too, so a page never repeats it.
	StartAfter string
	// MaxKeys bounds objects plus common prefixes returned; 0 means 1000.
	MaxKeys int
	// Include, when set, is asked about every key, and only keys it accepts
	// are listed or rolled up. The OSD passes a filter for the PGs it is
	// primary for, since the store holds the objects of every PG it hosts.
	Include func(key string) bool
}

// ListResult is one page of a listing.
type ListResult struct {
	// Objects in ascending byte order of key.
	Objects []*osdpb.ObjectEntry
	// CommonPrefixes in ascending byte order.
	CommonPrefixes []string
	// Truncated: more objects or common prefixes follow; continue with
	// StartAfter set to the last key or common prefix of this page.
	Truncated bool
}

const defaultMaxKeys = 1000

// List lists a bucket's local objects with S3 ListObjectsV2 semantics (see
// ListOptions), in ascending byte order of key, from one point-in-time view.
// A common prefix counts once toward MaxKeys, and the iterator seeks past
// all of its keys instead of walking them (unless Include rejected the
// first ones, in which case it walks until an included key shows that the
// prefix is listed). ErrNoSuchBucket if the bucket record is missing.
func (s *Store) List(ctx context.Context, bucket string, opts ListOptions) (ListResult, error) {
	var res ListResult
	if err := s.enter(ctx); err != nil {
		return res, err
	}
	defer s.leave()
	if err := checkName(bucket, "", false); err != nil {
		return res, fmt.Errorf("store: list: %w", err)
	}
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = defaultMaxKeys
	}
	base := headPrefix(bucket)
	lo := append(bytes.Clone(base), opts.Prefix...)
	hi := prefixEnd(lo)
	if opts.StartAfter != "" {
		after := append(bytes.Clone(base), opts.StartAfter...)
		var from []byte
		if ops.IsCommonPrefix(opts.StartAfter, opts.Prefix, opts.Delimiter) {
			from = prefixEnd(after)
		} else {
			from = keyAfter(after)
		}
		if bytes.Compare(from, lo) > 0 {
			lo = from
		}
	}

	err := s.withView(func(v *view) error {
		if err := s.needBucket(v, bucket); err != nil {
			return err
		}
		if bytes.Compare(lo, hi) >= 0 {
			return nil
		}
		count, steps := 0, 0
		for ok := v.scan(lo, hi); ok; {
			if steps++; steps%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			key := string(v.it.Key()[len(base):])
			if opts.Include != nil && !opts.Include(key) {
				ok = v.it.Next()
				continue
			}
			if count == maxKeys {
				res.Truncated = true
				return nil
			}
			count++
			if cp, isCP := ops.CommonPrefix(key, opts.Prefix, opts.Delimiter); isCP {
				res.CommonPrefixes = append(res.CommonPrefixes, cp)
				ok = v.it.SeekGE(prefixEnd(append(bytes.Clone(base), cp...)))
				continue
			}
			val, err := v.it.ValueAndErr()
			if err != nil {
				return err
			}
			h, err := decodeHead(val)
			if err != nil {
				s.counters.corruptions.Add(1)
				return corrupt(bucket, key, "head: %v", err)
			}
			res.Objects = append(res.Objects, &osdpb.ObjectEntry{Key: key, Meta: h.meta})
			ok = v.it.Next()
		}
		return v.it.Error()
	})
	if err != nil {
		return ListResult{}, fmt.Errorf("store: list %q: %w", bucket, err)
	}
	return res, nil
}
