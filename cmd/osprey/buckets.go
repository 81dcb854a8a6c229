package main

// mb and rb: making and removing buckets.

import (
	"context"
	"errors"
	"fmt"

	"github.com/ospreystore/osprey/client"
	"github.com/spf13/cobra"
)

func newMbCmd() *cobra.Command {
	var (
		c              commonFlags
		ignoreExisting bool
	)
	cmd := &cobra.Command{
		Use:   "mb BUCKET...",
		Short: "Make buckets",
		Long: `Makes each bucket. Names follow S3's rules: 3 to 63 characters of a-z,
0-9, '.' and '-', starting and ending with a letter or digit. A bucket
that exists already is BucketAlreadyExists (exit 1) unless
--ignore-existing.`,
		Example: `  osprey mb photos
  osprey mb -p logs backups`,
		Args: argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return forBuckets(cmd, &c, args, "", func(ctx context.Context, cl *client.Client, p *printer, b string) error {
				err := cl.MakeBucket(ctx, b)
				existed := errors.Is(err, client.ErrBucketAlreadyExists) && ignoreExisting
				if err != nil && !existed {
					return fmt.Errorf("%s: %w", remoteScheme+b, err)
				}
				p.result("make_bucket: "+b, map[string]any{"op": "make_bucket", "bucket": b, "existed": existed})
				return nil
			})
		},
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	c.add(cmd)
	cmd.Flags().BoolVarP(&ignoreExisting, "ignore-existing", "p", false, "a bucket that exists already is not an error")
	return cmd
}

// forBuckets does do to each bucket args name, in order, over one
// connection, every one of them whatever fails (eachArg). Every argument
// is checked first (bucketArgs, hint included), so a bad one changes
// nothing.
func forBuckets(cmd *cobra.Command, c *commonFlags, args []string, hint string, do func(ctx context.Context, cl *client.Client, p *printer, bucket string) error) error {
	ctx := cmd.Context()
	buckets, err := bucketArgs(args, hint)
	if err != nil {
		return err
	}
	cl, err := connect(ctx, cmd, c.target)
	if err != nil {
		return err
	}
	defer cl.Close()
	p := c.printer(cmd)
	return eachArg(cmd, buckets, func(b string) error { return do(ctx, cl, p, b) })
}

// eachArg runs fn for each of a command's arguments, all of them, as rm
// and mc do: a failure is printed as main prints one and the rest go on;
// the first failure comes back (already printed) for the exit code. An
// interrupt stops at once.
func eachArg[T any](cmd *cobra.Command, items []T, fn func(T) error) error {
	var first error
	for _, it := range items {
		err := fn(it)
		if err == nil {
			continue
		}
		if errors.Is(err, context.Canceled) {
			return err
		}
		fmt.Fprintln(cmd.ErrOrStderr(), errorLine(err))
		if first == nil {
			first = err
		}
	}
	if first != nil {
		return &reportedError{first}
	}
	return nil
}

// reportedError is an error already printed: main prints it no more, and
// exits with its exit code.
type reportedError struct{ err error }

func (e *reportedError) Error() string { return e.err.Error() }
func (e *reportedError) Unwrap() error { return e.err }

// bucketArgs checks that every argument names a bucket alone, before
// anything is done to any of them.
func bucketArgs(args []string, hint string) ([]string, error) {
	var out []string
	for _, a := range args {
		rp, err := parseRemote(a)
		if err != nil {
			return nil, err
		}
		if rp.Key != "" {
			return nil, usageErrorf("%q: a bucket name has no '/'%s", a, hint)
		}
		out = append(out, rp.Bucket)
	}
	return out, nil
}

func newRbCmd() *cobra.Command {
	var (
		c     commonFlags
		force bool
		jobs  int
	)
	cmd := &cobra.Command{
		Use:   "rb BUCKET...",
		Short: "Remove buckets",
		Long: `Removes each bucket, which must be empty (else BucketNotEmpty, exit 1).
--force first deletes every object in it and aborts its multipart uploads
in progress, as aws s3 rb --force does.`,
		Example: `  osprey rb photos
  osprey rb --force scratch`,
		Args: argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return forBuckets(cmd, &c, args, "; to delete objects use rm", func(ctx context.Context, cl *client.Client, p *printer, b string) error {
				return removeBucket(ctx, cl, p, b, force, jobs)
			})
		},
	}
	c.add(cmd)
	cmd.ValidArgsFunction = completeRemote(&c.target, false, true)
	cmd.Flags().BoolVar(&force, "force", false, "delete the bucket's objects and uploads first")
	cmd.Flags().IntVar(&jobs, "jobs", 16, "deletes in flight with --force")
	markPositive(cmd.Flags(), "jobs")
	return cmd
}

// removeBucket removes bucket; with force it first deletes its objects
// (jobs at a time) and aborts its multipart uploads, as aws s3 rb --force
// does.
func removeBucket(ctx context.Context, cl *client.Client, p *printer, bucket string, force bool, jobs int) error {
	if force {
		if _, err := removePrefix(ctx, cl, p, bucket, "", jobs, false); err != nil {
			return err
		}
		// Every upload, an S3 gateway's internal ones too (which
		// ListMultipartUploads does not show).
		ups, err := cl.AbortStaleUploads(ctx, bucket, client.StaleUploadOptions{Age: -1, All: true})
		for _, u := range ups {
			p.result("abort_upload: "+remotePath{bucket, u.Key}.String()+" "+u.UploadID,
				map[string]any{"op": "abort_upload", "bucket": bucket, "key": u.Key, "upload_id": u.UploadID})
		}
		if err != nil {
			return fmt.Errorf("%s: %w", remoteScheme+bucket, err)
		}
	}
	if err := cl.RemoveBucket(ctx, bucket); err != nil {
		return fmt.Errorf("%s: %w", remoteScheme+bucket, err)
	}
	p.result("remove_bucket: "+bucket, map[string]any{"op": "remove_bucket", "bucket": bucket})
	return nil
}
