package main

// put, get and cp: transfers between files and objects.

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ospreystore/osprey/bench"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/spf13/cobra"
)

// transferFlags are put's, get's and cp's.
type transferFlags struct {
	commonFlags
	quiet       bool
	noProgress  bool
	contentType string
	meta        metaValue
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
		f.Var(&t.meta, "meta", "user metadata, KEY=VALUE[,KEY=VALUE] (repeatable; quote a pair whose value holds a comma: '\"k=a,b\"')")
		t.partSize = partSizeValue{16 << 20}
		f.Var(&t.partSize, "part-size", "objects larger than this, or of unknown size, go by multipart upload in parts of this size (5MiB..64MiB)")
		f.IntVar(&t.concurrency, "concurrency", 4, "parts in flight in a multipart upload")
		markPositive(f, "concurrency")
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
	return client.PutOptions{ContentType: ct, UserMetadata: t.meta.m, PartSize: int64(t.partSize.byteSize), Concurrency: t.concurrency}, nil
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

// metaValue is --meta: KEY=VALUE pairs, one taken whole or several
// comma-separated as CSV (a quoted pair may hold a comma in its value),
// repeatable, as pflag's stringToString, except that a line break is
// refused: it ended the CSV record, and the pairs after it were dropped
// unread. Keys go to the SDK,
// which checks them (HTTP header names) and lower-cases them, as S3.
type metaValue struct{ m map[string]string }

func (v *metaValue) Set(s string) error {
	if strings.ContainsAny(s, "\r\n") {
		return errors.New("a metadata value cannot hold a line break (S3 sends it in an HTTP header)")
	}
	// As pflag's stringToString: one pair is taken whole (a value may
	// hold a comma or a quote), several are read as CSV.
	one := s
	if len(one) >= 2 && one[0] == '"' && one[len(one)-1] == '"' {
		one = one[1 : len(one)-1] // the pair quoted whole
	}
	fields := []string{one}
	if strings.Count(s, "=") > 1 {
		r := csv.NewReader(strings.NewReader(s))
		r.LazyQuotes = true
		var err error
		if fields, err = r.Read(); err != nil {
			return err
		}
	}
	if v.m == nil {
		v.m = map[string]string{}
	}
	for _, f := range fields {
		k, val, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q: want KEY=VALUE", f)
		}
		v.m[k] = val
	}
	return nil
}

func (v *metaValue) Type() string { return "KEY=VALUE" }

func (v *metaValue) String() string {
	pairs := make([]string, 0, len(v.m))
	for _, k := range slices.Sorted(maps.Keys(v.m)) {
		pairs = append(pairs, k+"="+v.m[k])
	}
	return strings.Join(pairs, ",")
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
		info, err := downloadTo(ctx, cl, sp, name, barFor("get "+sp.Bucket+"/"+sp.Key), true)
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
// or key's base name inside dst when dst is a directory or ends in '/'
// (which the download makes if missing, once the object is found).
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
