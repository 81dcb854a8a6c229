package main

// stat: the metadata of buckets and objects.

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/spf13/cobra"
)

func newStatCmd() *cobra.Command {
	var c commonFlags
	cmd := &cobra.Command{
		Use:   "stat BUCKET[/KEY]...",
		Short: "Show an object's metadata (or a bucket's)",
		Long: `Shows each object's size, ETag, CRC32C, modification time, content type
and user metadata, without reading its bytes; for a bucket, its creation
time. A missing object or bucket is NoSuchKey or NoSuchBucket (exit 3).`,
		Example: `  osprey stat photos/2024/photo.jpg
  osprey stat photos --json`,
		Args: argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var paths []remotePath
			for _, a := range args {
				rp, err := parseRemote(a)
				if err != nil {
					return err
				}
				paths = append(paths, rp)
			}
			cl, err := connect(ctx, cmd, c.target)
			if err != nil {
				return err
			}
			defer cl.Close()
			w := cmd.OutOrStdout()
			shown := 0
			gap := func() { // a blank line between the objects shown
				if shown++; shown > 1 && !c.asJSON {
					fmt.Fprintln(w)
				}
			}
			return eachArg(cmd, paths, func(rp remotePath) error {
				if rp.Key == "" {
					b, err := cl.StatBucket(ctx, rp.Bucket)
					if err != nil {
						return fmt.Errorf("%s: %w", remoteScheme+rp.Bucket, err)
					}
					gap()
					if c.asJSON {
						json.NewEncoder(w).Encode(map[string]any{"bucket": b.Name, "created": b.Created})
						return nil
					}
					fmt.Fprintf(w, "Name      : %s%s\nCreated   : %s\n", remoteScheme, b.Name, b.Created.Local().Format(time.RFC3339))
					return nil
				}
				info, err := cl.StatObject(ctx, rp.Bucket, rp.Key)
				if err != nil {
					return fmt.Errorf("%s: %w", rp, err)
				}
				gap()
				if c.asJSON {
					json.NewEncoder(w).Encode(toJSON(rp.Bucket, info))
					return nil
				}
				writeObjectInfo(w, rp, info)
				return nil
			})
		},
	}
	c.add(cmd)
	cmd.ValidArgsFunction = completeRemote(&c.target, false, false)
	return cmd
}

// writeObjectInfo prints an object's metadata as mc stat does.
func writeObjectInfo(w io.Writer, rp remotePath, info client.ObjectInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "Name\t: %s\n", printable(rp.String()))
	fmt.Fprintf(tw, "Size\t: %s (%d bytes)\n", humanBytes(info.Size), info.Size)
	fmt.Fprintf(tw, "ETag\t: %s\n", info.ETag)
	fmt.Fprintf(tw, "CRC32C\t: %08x\n", info.CRC32C)
	fmt.Fprintf(tw, "Modified\t: %s\n", info.LastModified.Local().Format(time.RFC3339Nano))
	if info.ContentType != "" {
		fmt.Fprintf(tw, "Type\t: %s\n", printable(info.ContentType))
	}
	if len(info.UserMetadata) > 0 {
		keys := make([]string, 0, len(info.UserMetadata))
		for k := range info.UserMetadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			label := "Metadata"
			if i > 0 {
				label = ""
			}
			fmt.Fprintf(tw, "%s\t: %s=%s\n", label, printable(k), printable(info.UserMetadata[k]))
		}
	}
	tw.Flush()
}
