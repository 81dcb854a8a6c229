package main

// ls: buckets, and the objects of a bucket or prefix.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ospreystore/osprey/client"
	"github.com/spf13/cobra"
)

func newLsCmd() *cobra.Command {
	var (
		c                           commonFlags
		recursive, human, summarize bool
	)
	cmd := &cobra.Command{
		Use:   "ls [BUCKET[/PREFIX]]",
		Short: "List buckets, or objects and prefixes in a bucket",
		Long: `Without an argument, lists the buckets. With one, lists the objects whose
keys start with PREFIX, as aws s3 ls does: without --recursive, keys are
grouped at the next '/' into "PRE name/" lines and names are shown
relative to the last '/' of PREFIX; with --recursive, every key is shown
whole. Listings are in ascending byte order of key.

A missing bucket is NoSuchBucket (exit 3); an empty listing is not an
error.`,
		Example: `  osprey ls
  osprey ls photos
  osprey ls photos/2024/ --recursive --human-readable --summarize
  osprey ls osprey://photos/2024/ --json | jq -r .key`,
		Args: argsBetween(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cl, err := connect(ctx, cmd, c.target)
			if err != nil {
				return err
			}
			defer cl.Close()
			out := cmd.OutOrStdout()
			if len(args) == 0 {
				return listBuckets(ctx, cl, out, c.asJSON)
			}
			rp, err := parseRemote(args[0])
			if err != nil {
				return err
			}
			return listObjects(ctx, cl, out, rp, lsOptions{json: c.asJSON, recursive: recursive, human: human, summarize: summarize})
		},
	}
	c.add(cmd)
	cmd.ValidArgsFunction = completeRemote(&c.target, false, false)
	f := cmd.Flags()
	f.BoolVarP(&recursive, "recursive", "r", false, "list every key under the prefix, not one level")
	f.BoolVarP(&human, "human-readable", "H", false, "sizes in KiB, MiB, GiB")
	f.BoolVar(&summarize, "summarize", false, "end with the number of objects and their total size")
	return cmd
}

func listBuckets(ctx context.Context, cl *client.Client, w io.Writer, asJSON bool) error {
	bs, err := cl.ListBuckets(ctx)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	for _, b := range bs {
		if asJSON {
			enc.Encode(map[string]any{"bucket": b.Name, "created": b.Created})
			continue
		}
		fmt.Fprintf(w, "%s %s\n", b.Created.Local().Format(lsTime), b.Name)
	}
	return nil
}

type lsOptions struct {
	json, recursive, human, summarize bool
}

func listObjects(ctx context.Context, cl *client.Client, w io.Writer, rp remotePath, o lsOptions) error {
	lo := client.ListOptions{Prefix: rp.Key}
	if !o.recursive {
		lo.Delimiter = "/"
	}
	// Names show relative to the "directory" the prefix names, as in aws
	// s3 ls: `ls b/photos/20` shows "PRE 2024/", not "PRE photos/2024/".
	dir := ""
	if i := strings.LastIndex(rp.Key, "/"); i >= 0 && !o.recursive {
		dir = rp.Key[:i+1]
	}
	enc := json.NewEncoder(w)
	var count, total int64
	for info, err := range cl.ListObjects(ctx, rp.Bucket, lo) {
		if err != nil {
			return fmt.Errorf("%s: %w", remoteScheme+rp.Bucket, err)
		}
		if o.json {
			enc.Encode(toJSON(rp.Bucket, info))
		} else if info.IsPrefix {
			fmt.Fprintf(w, "%30s %s\n", "PRE", printable(strings.TrimPrefix(info.Key, dir)))
		} else {
			size := fmt.Sprint(info.Size)
			if o.human {
				size = humanBytes(info.Size)
			}
			fmt.Fprintf(w, "%s %10s %s\n", info.LastModified.Local().Format(lsTime), size, printable(strings.TrimPrefix(info.Key, dir)))
		}
		if !info.IsPrefix {
			count++
			total += info.Size
		}
	}
	if o.summarize {
		if o.json {
			enc.Encode(map[string]any{"total_objects": count, "total_size": total})
			return nil
		}
		size := fmt.Sprint(total)
		if o.human {
			size = humanBytes(total)
		}
		fmt.Fprintf(w, "\nTotal Objects: %d\n   Total Size: %s\n", count, size)
	}
	return nil
}
