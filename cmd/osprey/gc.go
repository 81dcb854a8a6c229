package main

// gc: removing what the multipart bucket holds for nothing, as
// `radosgw-admin gc process` does for RGW.

import (
	"fmt"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/spf13/cobra"
)

func newGCCmd() *cobra.Command {
	var (
		c      commonFlags
		minAge time.Duration
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove the parts and uploads nothing uses any more",
		Long: `Removes what multipart uploads leave behind that nothing uses any more, and
that no other command can reach:
  - the uploads of buckets deleted since they began (or deleted and made
    again), which no listing shows and nobody can complete or abort;
  - parts and pieces of no upload in progress and of no object: those of
    aborted uploads and of overwritten or deleted multipart objects whose
    deletes were lost (an OSD down at the time), and those of the uploads
    above.
It reads every upload, bucket and object, so it costs a listing of the whole
cluster; nothing written within --min-age (default 1h) is removed, so that
uploads in flight are left alone. --dry-run only reports. Prints each upload
removed and a summary line. Needs an admin keyring (read and write on every
bucket).`,
		Example: `  osprey gc --dry-run
  osprey gc --min-age 24h`,
		Args: argsBetween(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if minAge <= 0 {
				return usageErrorf("--min-age must be positive (it keeps uploads in flight safe)")
			}
			ctx := cmd.Context()
			cl, err := connect(ctx, cmd, c.target)
			if err != nil {
				return err
			}
			defer cl.Close()
			p := c.printer(cmd)
			rep, err := cl.CollectGarbage(ctx, client.GCOptions{MinAge: minAge, DryRun: dryRun})
			op := "remove"
			if dryRun {
				op = "(dryrun) remove"
			}
			for _, u := range rep.Uploads {
				p.result(fmt.Sprintf("%s: upload %s of %s (initiated %s; its bucket was deleted)", op, u.UploadID, remotePath{u.Bucket, u.Key},
					u.Initiated.UTC().Format(time.RFC3339)),
					map[string]any{"op": "remove_upload", "bucket": u.Bucket, "key": u.Key, "upload_id": u.UploadID, "initiated": u.Initiated, "dry_run": dryRun})
			}
			if err != nil {
				// What was removed is listed above; a summary of a sweep
				// that failed part-way (or never ran: AccessDenied) would
				// tell a script that nothing more is there.
				return err
			}
			p.result(fmt.Sprintf("%s: %d uploads of deleted buckets, %d parts and pieces of nothing (%s); kept %d parts and pieces",
				op, len(rep.Uploads), len(rep.Parts), humanBytes(rep.Bytes), rep.Kept),
				map[string]any{"op": "gc", "uploads": len(rep.Uploads), "parts": len(rep.Parts), "bytes": rep.Bytes, "kept": rep.Kept, "dry_run": dryRun})
			return nil
		},
	}
	c.add(cmd)
	cmd.Flags().DurationVar(&minAge, "min-age", client.DefaultGCMinAge, "remove nothing written more recently than this")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be removed, remove nothing")
	return cmd
}
