package main

// The bucket and object commands, in the style of `aws s3` and MinIO's
// `mc`: mb, rb, ls, put, get, cp, rm, stat. Each one connects, does its
// work through the SDK and exits; output lines follow aws s3's wording
// ("upload: a to osprey://b/a") so that people and scripts that know it
// know this, and --json prints one object per result instead.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ospreystore/osprey/bench"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/osd/ops"
	"github.com/spf13/cobra"
)

// Argument validators that make a miscount a usage error (exit 2).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

func argsBetween(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || hi >= 0 && len(args) > hi {
			return usageErrorf("%s: wrong number of arguments (%d); usage: %s", cmd.CommandPath(), len(args), cmd.UseLine())
		}
		return nil
	}
}

// printer writes a command's results: a line of text per result, or with
// --json one JSON object per line. --quiet drops the text, never JSON.
type printer struct {
	w      io.Writer
	asJSON bool
	quiet  bool
	mu     sync.Mutex // results may come from concurrent workers (rm)
}

func (p *printer) result(text string, v any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.asJSON {
		json.NewEncoder(p.w).Encode(v)
		return
	}
	if !p.quiet {
		fmt.Fprintln(p.w, text)
	}
}

// objectJSON is an object (or a common prefix) in --json output.
type objectJSON struct {
	Bucket       string            `json:"bucket"`
	Key          string            `json:"key,omitempty"`
	Prefix       string            `json:"prefix,omitempty"` // a common prefix of ls without --recursive
	Size         *int64            `json:"size,omitempty"`
	ETag         string            `json:"etag,omitempty"`
	CRC32C       string            `json:"crc32c,omitempty"`
	LastModified *time.Time        `json:"last_modified,omitempty"`
	ContentType  string            `json:"content_type,omitempty"`
	UserMetadata map[string]string `json:"metadata,omitempty"`
}

func toJSON(bucket string, o client.ObjectInfo) objectJSON {
	if o.IsPrefix {
		return objectJSON{Bucket: bucket, Prefix: o.Key}
	}
	size, mod := o.Size, o.LastModified
	return objectJSON{Bucket: bucket, Key: o.Key, Size: &size, ETag: o.ETag, CRC32C: fmt.Sprintf("%08x", o.CRC32C),
		LastModified: &mod, ContentType: o.ContentType, UserMetadata: o.UserMetadata}
}

// commonFlags are what every object command has.
type commonFlags struct {
	target targetFlags
	asJSON bool
}

func (c *commonFlags) add(cmd *cobra.Command) {
	addTargetFlags(cmd.Flags(), &c.target)
	cmd.Flags().BoolVar(&c.asJSON, "json", false, "print one JSON object per result")
}

func (c *commonFlags) printer(cmd *cobra.Command) *printer {
	return &printer{w: cmd.OutOrStdout(), asJSON: c.asJSON}
}

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
			ctx := cmd.Context()
			buckets, err := bucketArgs(args, "")
			if err != nil {
				return err
			}
			cl, err := connect(ctx, cmd, c.target)
			if err != nil {
				return err
			}
			defer cl.Close()
			p := c.printer(cmd)
			for _, b := range buckets {
				err = cl.MakeBucket(ctx, b)
				existed := errors.Is(err, client.ErrBucketAlreadyExists) && ignoreExisting
				if err != nil && !existed {
					return fmt.Errorf("%s: %w", remoteScheme+b, err)
				}
				p.result("make_bucket: "+b, map[string]any{"op": "make_bucket", "bucket": b, "existed": existed})
			}
			return nil
		},
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	c.add(cmd)
	cmd.Flags().BoolVarP(&ignoreExisting, "ignore-existing", "p", false, "a bucket that exists already is not an error")
	return cmd
}

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
			ctx := cmd.Context()
			buckets, err := bucketArgs(args, "; to delete objects use rm")
			if err != nil {
				return err
			}
			cl, err := connect(ctx, cmd, c.target)
			if err != nil {
				return err
			}
			defer cl.Close()
			p := c.printer(cmd)
			for _, b := range buckets {
				if err := removeBucket(ctx, cl, p, b, force, jobs); err != nil {
					return err
				}
			}
			return nil
		},
	}
	c.add(cmd)
	cmd.ValidArgsFunction = completeRemote(&c.target, false, true)
	cmd.Flags().BoolVar(&force, "force", false, "delete the bucket's objects and uploads first")
	cmd.Flags().IntVar(&jobs, "jobs", 16, "deletes in flight with --force")
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
		ups, err := cl.ListMultipartUploads(ctx, bucket, "")
		if err != nil {
			return fmt.Errorf("%s: %w", remoteScheme+bucket, err)
		}
		for _, u := range ups {
			if err := cl.AbortMultipartUpload(ctx, bucket, u.Key, u.UploadID); err != nil && !errors.Is(err, client.ErrNoSuchUpload) {
				return fmt.Errorf("%s: abort upload %s: %w", remotePath{bucket, u.Key}, u.UploadID, err)
			}
			p.result("abort_upload: "+remotePath{bucket, u.Key}.String()+" "+u.UploadID,
				map[string]any{"op": "abort_upload", "bucket": bucket, "key": u.Key, "upload_id": u.UploadID})
		}
	}
	if err := cl.RemoveBucket(ctx, bucket); err != nil {
		return fmt.Errorf("%s: %w", remoteScheme+bucket, err)
	}
	p.result("remove_bucket: "+bucket, map[string]any{"op": "remove_bucket", "bucket": bucket})
	return nil
}

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

// lsTime is aws s3 ls's timestamp format, in local time.
const lsTime = "2006-01-02 15:04:05"

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
			fmt.Fprintf(w, "%30s %s\n", "PRE", strings.TrimPrefix(info.Key, dir))
		} else {
			size := fmt.Sprint(info.Size)
			if o.human {
				size = humanBytes(info.Size)
			}
			fmt.Fprintf(w, "%s %10s %s\n", info.LastModified.Local().Format(lsTime), size, strings.TrimPrefix(info.Key, dir))
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

// transferFlags are put's, get's and cp's.
type transferFlags struct {
	commonFlags
	quiet       bool
	noProgress  bool
	contentType string
	meta        map[string]string
	partSize    partSizeValue
	concurrency int
}

func (t *transferFlags) add(cmd *cobra.Command, upload bool) {
	t.commonFlags.add(cmd)
	f := cmd.Flags()
	f.BoolVarP(&t.quiet, "quiet", "q", false, "print nothing on success (errors still go to stderr)")
	f.BoolVar(&t.noProgress, "no-progress", false, "no progress bar, even on a terminal")
	if upload {
		f.StringVar(&t.contentType, "content-type", "", "Content-Type to store (default: from the key's extension)")
		f.StringToStringVar(&t.meta, "meta", nil, "user metadata, KEY=VALUE[,KEY=VALUE]")
		t.partSize = partSizeValue{16 << 20}
		f.Var(&t.partSize, "part-size", "objects larger than this, or of unknown size, go by multipart upload in parts of this size (5MiB..64MiB)")
		f.IntVar(&t.concurrency, "concurrency", 4, "parts in flight in a multipart upload")
	}
}

func (t *transferFlags) printer(cmd *cobra.Command) *printer {
	return &printer{w: cmd.OutOrStdout(), asJSON: t.asJSON, quiet: t.quiet}
}

// showProgress: a bar on stderr only for people watching a terminal.
func (t *transferFlags) showProgress(cmd *cobra.Command) bool {
	f, ok := cmd.ErrOrStderr().(*os.File)
	return ok && !t.noProgress && !t.quiet && isTerminal(f)
}

func (t *transferFlags) putOptions(key string) (client.PutOptions, error) {
	ct := t.contentType
	if ct == "" {
		ct = mime.TypeByExtension(path.Ext(key))
	}
	return client.PutOptions{ContentType: ct, UserMetadata: t.meta, PartSize: int64(t.partSize.byteSize), Concurrency: t.concurrency}, nil
}

// partSizeValue is --part-size: a byteSize within the multipart limits,
// checked as the flag is parsed so that a bad one is a usage error (exit
// 2) before anything runs.
type partSizeValue struct{ byteSize }

func (v *partSizeValue) Set(s string) error {
	var n byteSize
	if err := n.Set(s); err != nil {
		return err
	}
	if lo, hi := byteSize(ops.MinPartSize), byteSize(ops.MaxPutSize); n < lo || n > hi {
		return fmt.Errorf("want %s to %s", &lo, &hi)
	}
	v.byteSize = n
	return nil
}

// transferJSON is put's, get's and cp's --json result.
type transferJSON struct {
	Op          string  `json:"op"` // upload, download, copy
	Source      string  `json:"source"`
	Target      string  `json:"target"`
	Size        int64   `json:"size"`
	ETag        string  `json:"etag,omitempty"`
	Seconds     float64 `json:"seconds"`
	BytesPerSec float64 `json:"bytes_per_sec"`
}

func (t *transferFlags) report(p *printer, op, src, dst string, size int64, etag string, took time.Duration) {
	r := transferJSON{Op: op, Source: src, Target: dst, Size: size, ETag: etag, Seconds: took.Seconds()}
	if took > 0 {
		r.BytesPerSec = float64(size) / took.Seconds()
	}
	p.result(fmt.Sprintf("%s: %s to %s (%s in %v, %s)", op, src, dst, humanBytes(size), roundDur(took), bench.FormatRate(r.BytesPerSec)), r)
}

func newPutCmd() *cobra.Command {
	var t transferFlags
	cmd := &cobra.Command{
		Use:   "put FILE BUCKET[/KEY]",
		Short: "Upload a file (or stdin) as an object",
		Long: `Uploads FILE as BUCKET/KEY, replacing any object there. FILE "-" reads
stdin to its end (the size need not be known). A KEY that is empty or
ends in '/' gets FILE's base name appended. Objects larger than
--part-size go by multipart upload, so any size up to 10000 parts works.`,
		Example: `  osprey put photo.jpg photos/2024/photo.jpg
  osprey put photo.jpg photos/2024/            # key 2024/photo.jpg
  tar c dir | osprey put - backups/dir.tar`,
		Args: argsBetween(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dst, err := parseRemote(args[1])
			if err != nil {
				return err
			}
			return runTransfer(cmd, &t, args[0], dst.String())
		},
	}
	t.add(cmd, true)
	cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveDefault // a local file
		}
		return completeRemote(&t.target, false, false)(cmd, args[1:], toComplete)
	}
	return cmd
}

func newGetCmd() *cobra.Command {
	var t transferFlags
	cmd := &cobra.Command{
		Use:   "get BUCKET/KEY [FILE]",
		Short: "Download an object to a file (or stdout)",
		Long: `Downloads BUCKET/KEY into FILE ("-": stdout). Without FILE, or when FILE
is a directory or ends in '/', the file is named after the key's base
name. FILE is written as cp writes its target: a new or regular file
through a temporary file next to it, renamed into place once all the
bytes arrived without error (the SDK checks the object's CRC32C at the
end of a whole read), so a failed get never leaves a partial file under
FILE's name; a new file gets 0666 less the umask, an existing one keeps
its mode. A device or FIFO is written into, never replaced, and a
symbolic link is followed. A write error (ENOSPC) fails the get.`,
		Example: `  osprey get photos/2024/photo.jpg
  osprey get photos/2024/photo.jpg /tmp/
  osprey get backups/dir.tar - | tar x`,
		Args: argsBetween(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := parseObject(args[0])
			if err != nil {
				return err
			}
			dst := "."
			if len(args) == 2 {
				dst = args[1]
			}
			return runTransfer(cmd, &t, src.String(), dst)
		},
	}
	t.add(cmd, false)
	cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) == 1 {
			return nil, cobra.ShellCompDirectiveDefault
		}
		return completeRemote(&t.target, false, false)(cmd, args, toComplete)
	}
	return cmd
}

func newCpCmd() *cobra.Command {
	var (
		t transferFlags
		r recursiveFlags
	)
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy between local files and objects, or between objects",
		Long: `Copies SRC to DST, where each is a local path or an object named
osprey://BUCKET/KEY (the scheme is required here, since "photos/a.jpg"
could be either). At least one side must be an object:

  cp FILE osprey://BUCKET/KEY       upload (as put)
  cp osprey://BUCKET/KEY FILE       download (as get)
  cp osprey://B1/K1 osprey://B2/K2  copy: the bytes stream through this
                                    client, metadata and content type kept

"-" is stdin or stdout. A destination key that is empty or ends in '/'
gets the source's base name, and so does a destination directory.

With --recursive (-r), SRC and DST are a local directory and a prefix
osprey://BUCKET[/PREFIX], or two prefixes: every file or object under
SRC goes to the same relative path under DST (DIR/a/b.txt is PREFIX/a/b.txt
and the reverse; directories are made as needed), --parallel at a time
under one progress bar. Symbolic links are followed; link loops and
files that are not regular are skipped with a warning. A transfer that
fails prints one error line and the others go on; the command then
exits 1.`,
		Example: `  osprey cp report.pdf osprey://docs/2024/
  osprey cp osprey://docs/2024/report.pdf .
  osprey cp osprey://docs/2024/report.pdf osprey://archive/report.pdf
  osprey cp -r ./photos osprey://photos/2024/
  osprey cp -r osprey://photos/2024/ ./photos --parallel 16`,
		Args: argsBetween(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !isRemote(args[0]) && !isRemote(args[1]) {
				return usageErrorf("cp %s %s: neither is an object; name objects %sBUCKET/KEY", args[0], args[1], remoteScheme)
			}
			if r.recursive {
				return runJob(cmd, &t, &r, args[0], args[1], nil)
			}
			return runTransfer(cmd, &t, args[0], args[1])
		},
	}
	t.add(cmd, true)
	cmd.Flags().BoolVarP(&r.recursive, "recursive", "r", false, "copy every file or object under SRC (a directory or a prefix) to DST")
	r.addParallel(cmd)
	cmd.ValidArgsFunction = completeRemote(&t.target, true, false)
	return cmd
}

// runTransfer copies src to dst; whichever starts with osprey:// is an
// object, the other a local path.
func runTransfer(cmd *cobra.Command, t *transferFlags, src, dst string) error {
	ctx := cmd.Context()
	srcRemote, dstRemote := isRemote(src), isRemote(dst)
	var (
		sp, dp remotePath
		err    error
	)
	if srcRemote {
		if sp, err = parseObject(src); err != nil {
			return err
		}
	}
	if dstRemote {
		if dp, err = parseRemote(dst); err != nil {
			return err
		}
	}
	// Check the local side before connecting: a typo in a file name
	// should not wait for the network.
	var in io.Reader
	size := int64(-1)
	if !srcRemote {
		if src == "-" {
			in = cmd.InOrStdin()
			if dp.Key == "" || strings.HasSuffix(dp.Key, "/") {
				return usageErrorf("an upload from stdin needs a destination key, not %s", dp)
			}
		} else {
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			if fi.IsDir() {
				return usageErrorf("%s is a directory; upload files one at a time", src)
			}
			size = fi.Size()
		}
	}
	if dstRemote && (dp.Key == "" || strings.HasSuffix(dp.Key, "/")) {
		base := path.Base(sp.Key)
		if !srcRemote {
			base = filepath.Base(src)
		}
		dp.Key += base
	}

	cl, err := connect(ctx, cmd, t.target)
	if err != nil {
		return err
	}
	defer cl.Close()
	p := t.printer(cmd)
	start := time.Now()

	// Each case starts its bar once the object's size is known
	// (recursive.go has the steps, shared with cp --recursive and sync).
	var bar *progress
	barFor := func(label string) func(int64) *progress {
		return func(size int64) *progress {
			bar = newProgress(cmd.ErrOrStderr(), t.showProgress(cmd), label, size)
			return bar
		}
	}
	switch {
	case !srcRemote: // upload
		info, err := t.upload(ctx, cl, in, size, dp, barFor("put "+dp.Bucket+"/"+dp.Key)(size))
		bar.done()
		if err != nil {
			return err
		}
		t.report(p, "upload", src, dp.String(), info.Size, info.ETag, time.Since(start))
		return nil

	case dst == "-": // download to stdout, which carries the bytes: no report line there
		_, err := readObject(ctx, cl, sp, barFor("get "+sp.Bucket+"/"+sp.Key), func(r io.Reader, _ client.ObjectInfo) error {
			if _, err := io.Copy(cmd.OutOrStdout(), r); err != nil {
				return fmt.Errorf("%s: %w", sp, err)
			}
			return nil
		})
		bar.done()
		return err

	case !dstRemote: // download
		name, err := downloadPath(dst, sp.Key)
		if err != nil {
			return err
		}
		info, err := downloadTo(ctx, cl, sp, name, barFor("get "+sp.Bucket+"/"+sp.Key))
		bar.done()
		if err != nil {
			return err
		}
		t.report(p, "download", sp.String(), name, info.Size, info.ETag, time.Since(start))
		return nil

	default: // copy: stream through this client
		out, err := t.copyObject(ctx, cl, sp, dp, barFor("copy "+dp.Bucket+"/"+dp.Key))
		bar.done()
		if err != nil {
			return err
		}
		t.report(p, "copy", sp.String(), dp.String(), out.Size, out.ETag, time.Since(start))
		return nil
	}
}

// downloadPath is the file a download of key to dst writes: dst itself,
// or key's base name inside dst when dst is a directory or ends in '/'.
func downloadPath(dst, key string) (string, error) {
	intoDir := strings.HasSuffix(dst, "/") || strings.HasSuffix(dst, string(filepath.Separator))
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		intoDir = true
	}
	if !intoDir {
		return dst, nil
	}
	// The base name must be a plain file name: a key "a/../.." must not
	// write outside dst, and "dir/" names no file.
	base := path.Base(key)
	if strings.HasSuffix(key, "/") || base == "." || base == ".." || base == "/" {
		return "", usageErrorf("key %q has no file name; give the file to write", key)
	}
	return filepath.Join(dst, base), nil
}

func newRmCmd() *cobra.Command {
	var (
		c                 commonFlags
		recursive, dryRun bool
		quiet             bool
		jobs              int
	)
	cmd := &cobra.Command{
		Use:   "rm BUCKET/KEY...",
		Short: "Delete objects",
		Long: `Deletes each object. Deleting a key that does not exist succeeds, as in
S3; a missing bucket is NoSuchBucket (exit 3). With --recursive each
argument is BUCKET[/PREFIX] and every object whose key starts with PREFIX
is deleted (--jobs at a time); --dry-run lists them without deleting.`,
		Example: `  osprey rm photos/2024/a.jpg photos/2024/b.jpg
  osprey rm --recursive photos/2023/
  osprey rm --recursive --dry-run osprey://photos`,
		Args: argsBetween(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			var paths []remotePath
			for _, a := range args {
				rp, err := parseRemote(a)
				if err != nil {
					return err
				}
				if rp.Key == "" && !recursive {
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
			for _, rp := range paths {
				if recursive {
					if _, err := removePrefix(ctx, cl, p, rp.Bucket, rp.Key, jobs, dryRun); err != nil {
						return err
					}
					continue
				}
				if !dryRun {
					if err := cl.RemoveObject(ctx, rp.Bucket, rp.Key); err != nil {
						return fmt.Errorf("%s: %w", rp, err)
					}
				}
				reportDelete(p, rp, dryRun)
			}
			return nil
		},
	}
	c.add(cmd)
	cmd.ValidArgsFunction = completeRemote(&c.target, false, false)
	f := cmd.Flags()
	f.BoolVarP(&recursive, "recursive", "r", false, "delete every object under each BUCKET[/PREFIX]")
	f.BoolVar(&dryRun, "dry-run", false, "print what would be deleted, delete nothing")
	f.BoolVarP(&quiet, "quiet", "q", false, "print nothing on success")
	f.IntVar(&jobs, "jobs", 16, "deletes in flight with --recursive")
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
			for i, rp := range paths {
				if i > 0 && !c.asJSON {
					fmt.Fprintln(w)
				}
				if rp.Key == "" {
					b, err := cl.StatBucket(ctx, rp.Bucket)
					if err != nil {
						return fmt.Errorf("%s: %w", remoteScheme+rp.Bucket, err)
					}
					if c.asJSON {
						json.NewEncoder(w).Encode(map[string]any{"bucket": b.Name, "created": b.Created})
						continue
					}
					fmt.Fprintf(w, "Name      : %s%s\nCreated   : %s\n", remoteScheme, b.Name, b.Created.Local().Format(time.RFC3339))
					continue
				}
				info, err := cl.StatObject(ctx, rp.Bucket, rp.Key)
				if err != nil {
					return fmt.Errorf("%s: %w", rp, err)
				}
				if c.asJSON {
					json.NewEncoder(w).Encode(toJSON(rp.Bucket, info))
					continue
				}
				writeObjectInfo(w, rp, info)
			}
			return nil
		},
	}
	c.add(cmd)
	cmd.ValidArgsFunction = completeRemote(&c.target, false, false)
	return cmd
}

// writeObjectInfo prints an object's metadata as mc stat does.
func writeObjectInfo(w io.Writer, rp remotePath, info client.ObjectInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "Name\t: %s\n", rp)
	fmt.Fprintf(tw, "Size\t: %s (%d bytes)\n", humanBytes(info.Size), info.Size)
	fmt.Fprintf(tw, "ETag\t: %s\n", info.ETag)
	fmt.Fprintf(tw, "CRC32C\t: %08x\n", info.CRC32C)
	fmt.Fprintf(tw, "Modified\t: %s\n", info.LastModified.Local().Format(time.RFC3339Nano))
	if info.ContentType != "" {
		fmt.Fprintf(tw, "Type\t: %s\n", info.ContentType)
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
			fmt.Fprintf(tw, "%s\t: %s=%s\n", label, k, info.UserMetadata[k])
		}
	}
	tw.Flush()
}

// completeRemote completes bucket names, then keys one '/' level at a
// time, from the cluster the command's flags name. needScheme is cp's
// convention: only words starting with osprey:// are objects, others
// complete as local files. bucketsOnly stops at bucket names (rb).
// Completion must never hang a shell, so the cluster gets two seconds.
func completeRemote(t *targetFlags, needScheme, bucketsOnly bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		scheme := ""
		switch {
		case strings.HasPrefix(toComplete, remoteScheme):
			scheme = remoteScheme
		case needScheme && strings.HasPrefix(remoteScheme, toComplete) && toComplete != "":
			return []string{remoteScheme}, cobra.ShellCompDirectiveNoSpace
		case needScheme:
			return nil, cobra.ShellCompDirectiveDefault
		}
		word := strings.TrimPrefix(toComplete, scheme)
		parent := cmd.Context()
		if parent == nil {
			parent = context.Background()
		}
		ctx, cancel := context.WithTimeout(parent, 2*time.Second)
		defer cancel()
		tf := *t
		tf.timeout = 2 * time.Second
		cl, err := connect(ctx, cmd, tf)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer cl.Close()
		bucket, prefix, hasSlash := strings.Cut(word, "/")
		var out []string
		if !hasSlash {
			bs, err := cl.ListBuckets(ctx)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			for _, b := range bs {
				if strings.HasPrefix(b.Name, bucket) {
					if bucketsOnly {
						out = append(out, scheme+b.Name)
					} else {
						out = append(out, scheme+b.Name+"/")
					}
				}
			}
			if bucketsOnly {
				return out, cobra.ShellCompDirectiveNoFileComp
			}
			return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		}
		if bucketsOnly {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		for info, err := range cl.ListObjects(ctx, bucket, client.ListOptions{Prefix: prefix, Delimiter: "/", MaxKeys: 1000}) {
			if err != nil {
				break
			}
			out = append(out, scheme+bucket+"/"+info.Key)
		}
		// A prefix completes without a space after it, so the user can
		// go on typing into it; a lone key with one.
		if len(out) == 1 && !strings.HasSuffix(out[0], "/") {
			return out, cobra.ShellCompDirectiveNoFileComp
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
}
