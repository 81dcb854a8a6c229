package main

// rm: removing objects, one by one or a whole prefix.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ospreystore/osprey/client"
	"github.com/spf13/cobra"
)

func newRmCmd() *cobra.Command {
	var (
		c                 commonFlags
		recursive, dryRun bool
		quiet             bool
		jobs              int
		inc               incompleteFlags
	)
	cmd := &cobra.Command{
		Use:   "rm BUCKET/KEY...",
		Short: "Delete objects",
		Long: `Deletes each object. Deleting a key that does not exist succeeds, as in
S3; a missing bucket is NoSuchBucket (exit 3). With --recursive each
argument is BUCKET[/PREFIX] and every object whose key starts with PREFIX
is deleted (--jobs at a time); --dry-run lists them without deleting.

With --incomplete each argument is BUCKET[/PREFIX] and what is removed
is the multipart uploads in progress of keys under PREFIX that were
initiated more than --older-than ago (default 24h; 0s: all of them), with
their parts: the users' uploads, and the internal ones an S3 gateway
makes for a PUT above 64 MiB, which S3 clients never see and which stay
with their pieces if the gateway dies half-way (--internal: those
only). --dry-run lists them without aborting.`,
		Example: `  osprey rm photos/2024/a.jpg photos/2024/b.jpg
  osprey rm --recursive photos/2023/
  osprey rm --recursive --dry-run osprey://photos
  osprey rm --incomplete --older-than 168h photos
  osprey rm --incomplete --internal --dry-run photos`,
		Args: argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if !inc.on && (cmd.Flags().Changed("older-than") || inc.internal) {
				return usageErrorf("--older-than and --internal choose uploads: they go with --incomplete")
			}
			var paths []remotePath
			for _, a := range args {
				rp, err := parseRemote(a)
				if err != nil {
					return err
				}
				if rp.Key == "" && !recursive && !inc.on {
					return usageErrorf("%q names a bucket: use rm --recursive to delete its objects, rb to remove it", a)
				}
				paths = append(paths, rp)
			}
			cl, err := connect(ctx, cmd, c.target)
			if err != nil {
				return err
			}
			defer cl.Close()
			p := c.printer(cmd)
			p.quiet = quiet
			return eachArg(cmd, paths, func(rp remotePath) error {
				if inc.on {
					return abortIncomplete(ctx, cl, p, rp, inc, dryRun)
				}
				if recursive {
					_, err := removePrefix(ctx, cl, p, rp.Bucket, rp.Key, jobs, dryRun)
					return err
				}
				if !dryRun {
					if err := cl.RemoveObject(ctx, rp.Bucket, rp.Key); err != nil {
						return fmt.Errorf("%s: %w", rp, err)
					}
				}
				reportDelete(p, rp, dryRun)
				return nil
			})
		},
	}
	c.add(cmd)
	cmd.ValidArgsFunction = completeRemote(&c.target, false, false)
	f := cmd.Flags()
	f.BoolVarP(&recursive, "recursive", "r", false, "delete every object under each BUCKET[/PREFIX]")
	f.BoolVar(&dryRun, "dry-run", false, "print what would be deleted, delete nothing")
	f.BoolVarP(&quiet, "quiet", "q", false, "print nothing on success")
	f.IntVar(&jobs, "jobs", 16, "deletes in flight with --recursive")
	markPositive(f, "jobs")
	inc.add(f)
	return cmd
}

func reportDelete(p *printer, rp remotePath, dryRun bool) {
	op := "delete"
	if dryRun {
		op = "(dryrun) delete"
	}
	p.result(op+": "+rp.String(), map[string]any{"op": "delete", "bucket": rp.Bucket, "key": rp.Key, "dry_run": dryRun})
}

// removePrefix deletes every object of bucket under prefix, jobs at a
// time, and returns how many it deleted. The listing pages by start-after,
// so deleting what it already returned does not disturb it.
func removePrefix(ctx context.Context, cl *client.Client, p *printer, bucket, prefix string, jobs int, dryRun bool) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	keys := make(chan string)
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		n  int
	)
	for range max(1, jobs) {
		wg.Go(func() {
			for k := range keys {
				rp := remotePath{bucket, k}
				if !dryRun {
					if err := cl.RemoveObject(ctx, bucket, k); err != nil {
						cancel(fmt.Errorf("%s: %w", rp, err))
						continue // drain: the producer stops on ctx
					}
				}
				reportDelete(p, rp, dryRun)
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	var listErr error
list:
	for info, err := range cl.ListObjects(ctx, bucket, client.ListOptions{Prefix: prefix}) {
		if err != nil {
			listErr = fmt.Errorf("%s: %w", remoteScheme+bucket, err)
			break
		}
		select {
		case keys <- info.Key:
		case <-ctx.Done():
			break list
		}
	}
	close(keys)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return n, err // a delete failed: that, not the listing's cancellation
	}
	if listErr != nil {
		return n, listErr
	}
	return n, ctx.Err()
}
