package main

// rm --incomplete: aborting stale multipart uploads, the S3 gateway's
// internal ones included.

import (
	"context"
	"fmt"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/spf13/pflag"
)

// incompleteFlags are rm's flags for multipart uploads in progress.
type incompleteFlags struct {
	on        bool
	olderThan time.Duration
	internal  bool
}

func (f *incompleteFlags) add(fs *pflag.FlagSet) {
	fs.BoolVar(&f.on, "incomplete", false, "abort the multipart uploads in progress under each BUCKET[/PREFIX], with their parts")
	fs.DurationVar(&f.olderThan, "older-than", client.DefaultStaleUploadAge, "with --incomplete: only uploads initiated longer ago than this (0s: all)")
	fs.BoolVar(&f.internal, "internal", false, "with --incomplete: only the S3 gateway's internal uploads (of PUTs above 64 MiB)")
}

// abortIncomplete aborts the uploads under rp that f chooses, and prints
// each.
func abortIncomplete(ctx context.Context, cl *client.Client, p *printer, rp remotePath, f incompleteFlags, dryRun bool) error {
	// StaleUploadOptions' zero age is its default, a negative one any
	// age: 0s here.
	age := f.olderThan
	if age <= 0 {
		age = -1
	}
	// A bucket that does not exist is NoSuchBucket, as for rm of an
	// object in it, not an empty success. (The uploads a deleted bucket
	// left are osprey gc's.)
	if _, err := cl.StatBucket(ctx, rp.Bucket); err != nil {
		return fmt.Errorf("%s: %w", remoteScheme+rp.Bucket, err)
	}
	ups, err := cl.AbortStaleUploads(ctx, rp.Bucket, client.StaleUploadOptions{Prefix: rp.Key, Age: age, All: !f.internal, DryRun: dryRun})
	for _, u := range ups {
		op := "abort"
		if dryRun {
			op = "(dryrun) abort"
		}
		kind := "upload"
		if u.Internal {
			kind = "internal upload"
		}
		text := fmt.Sprintf("%s: %s (%s %s, initiated %s)", op, remotePath{rp.Bucket, u.Key}, kind, u.UploadID, u.Initiated.UTC().Format(time.RFC3339))
		p.result(text, map[string]any{"op": "abort_upload", "bucket": rp.Bucket, "key": u.Key, "upload_id": u.UploadID,
			"internal": u.Internal, "initiated": u.Initiated, "dry_run": dryRun})
	}
	if err != nil {
		return fmt.Errorf("%s: %w", rp, err)
	}
	return nil
}
