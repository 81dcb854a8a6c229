package main

// Recursive transfers: `cp --recursive` and `sync` (sync.go) move every
// file under a local directory or every object under a bucket prefix, as
// `aws s3 cp --recursive` and `aws s3 sync` do. A job lists its source
// (and, for sync, its destination) first, so that one progress bar can
// show the whole job's bytes, then runs --parallel transfers at a time
// through the same single-object steps as put, get and cp (at the end of
// this file). A failed transfer prints one error line and the job goes
// on; the command then exits 1.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/spf13/cobra"
)

// recursiveFlags are cp's --recursive and what goes with it, and sync's.
type recursiveFlags struct {
	recursive bool
	parallel  int
	dryRun    bool // sync only
	delete    bool // sync only
}

func (r *recursiveFlags) addParallel(cmd *cobra.Command) {
	cmd.Flags().IntVar(&r.parallel, "parallel", 4, "files or objects in flight with --recursive and in sync")
}

// side is one end of a recursive job: a local directory, or a bucket and
// a key prefix that is empty or ends in '/'.
type side struct {
	remote bool
	dir    string     // local
	rp     remotePath // remote
}

// parseSide reads a cp --recursive or sync argument: an object prefix
// exactly when it starts with osprey://, as in cp. As with aws s3, the
// prefix names a "directory": osprey://b/photos is the keys under
// "photos/", not every key that starts with "photos".
func parseSide(arg string) (side, error) {
	if !isRemote(arg) {
		if arg == "-" {
			return side{}, usageErrorf("stdin and stdout cannot take a recursive transfer")
		}
		return side{dir: arg}, nil
	}
	rp, err := parseRemote(arg)
	if err != nil {
		return side{}, err
	}
	if rp.Key != "" && !strings.HasSuffix(rp.Key, "/") {
		rp.Key += "/"
	}
	return side{remote: true, rp: rp}, nil
}

// name is how output lines show the file or object at rel under s.
func (s side) name(rel string) string {
	if s.remote {
		return s.object(rel).String()
	}
	return filepath.Join(s.dir, filepath.FromSlash(rel))
}

func (s side) object(rel string) remotePath {
	return remotePath{Bucket: s.rp.Bucket, Key: s.rp.Key + rel}
}

// entry is a file or an object under a side, by its path relative to the
// side with '/' separators: the key suffix it has (or would have) under a
// prefix.
type entry struct {
	rel   string
	size  int64
	mtime time.Time
	path  string            // local: the file to open (through any links)
	info  client.ObjectInfo // remote
	// viaLink: local, under a symbolic link to a directory, which
	// sync --delete deletes nothing through.
	viaLink bool
}

// walkLocal lists the regular files under root in byte order of their
// relative paths. A source's walk follows symbolic links, to files and
// to directories, as aws s3 does, and skips the temporary files of a
// download that was killed (writeViaTemp's, which would be uploaded as
// objects of garbage); a destination's (dst) lists those files, so that
// --delete removes them, and marks what lies under a link to a directory
// (entry.viaLink), which --delete leaves. A link back to a directory
// being walked (a loop), a dangling link and anything that is not a
// regular file (a FIFO, a socket, a device) are skipped with a warning,
// and a directory that cannot be read goes to unreadable. A destination
// that does not exist is an empty listing.
func walkLocal(root string, dst bool, warn func(string), unreadable func(error)) ([]entry, error) {
	fi, err := os.Stat(root)
	if errors.Is(err, os.ErrNotExist) && dst {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, usageErrorf("%s is not a directory", root)
	}
	var out []entry
	var walk func(dir, rel string, ancestors []os.FileInfo, viaLink bool)
	walk = func(dir, rel string, ancestors []os.FileInfo, viaLink bool) {
		des, err := os.ReadDir(dir)
		if err != nil {
			unreadable(err)
			return
		}
		for _, de := range des {
			p, r := filepath.Join(dir, de.Name()), path.Join(rel, de.Name())
			fi, err := os.Stat(p) // follows links
			switch {
			case err != nil:
				warn(fmt.Sprintf("skipping %s: %v", p, err))
			case !dst && fi.Mode().IsRegular() && isTempName(de.Name()):
				warn(fmt.Sprintf("skipping %s: the partial file of a download that did not finish (remove it)", p))
			case fi.IsDir() && slices.ContainsFunc(ancestors, func(a os.FileInfo) bool { return os.SameFile(a, fi) }):
				warn(fmt.Sprintf("skipping %s: a symbolic link loop", p))
			case fi.IsDir():
				walk(p, r, append(slices.Clip(ancestors), fi), viaLink || de.Type()&fs.ModeSymlink != 0)
			case fi.Mode().IsRegular():
				out = append(out, entry{rel: r, size: fi.Size(), mtime: fi.ModTime(), path: p, viaLink: viaLink})
			default:
				warn(fmt.Sprintf("skipping %s: not a regular file (%s)", p, fi.Mode().Type()))
			}
		}
	}
	walk(root, "", []os.FileInfo{fi}, false)
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.rel, b.rel) })
	return out, nil
}

// listRemote lists the objects under rp's prefix, in byte order of key.
func listRemote(ctx context.Context, cl *client.Client, rp remotePath) ([]entry, error) {
	var out []entry
	for info, err := range cl.ListObjects(ctx, rp.Bucket, client.ListOptions{Prefix: rp.Key}) {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", remoteScheme+rp.Bucket+"/"+rp.Key, err)
		}
		out = append(out, entry{rel: strings.TrimPrefix(info.Key, rp.Key), size: info.Size, mtime: info.LastModified, info: info})
	}
	return out, nil
}

// errDirMarker: a key that ends in '/' (an empty "directory" some tools
// make) names no file; a download skips it.
var errDirMarker = errors.New("a directory marker")

// localRel is the relative file path that key suffix rel maps to under a
// local directory. A rel that would name no file inside it ("../x",
// "a//b", "./a") is an error: a key must never write outside the
// directory it is downloaded into.
func localRel(rel string) (string, error) {
	if rel == "" || strings.HasSuffix(rel, "/") {
		return "", errDirMarker
	}
	for seg := range strings.SplitSeq(rel, "/") {
		if seg == "" || seg == "." || seg == ".." || filepath.Separator != '/' && strings.ContainsRune(seg, filepath.Separator) {
			return "", fmt.Errorf("key suffix %q names no file inside the destination", rel)
		}
	}
	return filepath.FromSlash(rel), nil
}

// job is one cp --recursive or sync run.
type job struct {
	cmd      *cobra.Command
	t        *transferFlags
	r        *recursiveFlags
	cl       *client.Client
	src, dst side
	op       string // upload, download, copy
	p        *printer
	bar      *progress // the whole job's; nil without one

	incomplete bool // the source's listing missed a directory it could not read

	attempted, failed atomic.Int64
}

// newJob parses the arguments, checks what can be checked before the
// network, and connects. Close the job's client when done.
func newJob(cmd *cobra.Command, t *transferFlags, r *recursiveFlags, srcArg, dstArg string) (*job, error) {
	src, err := parseSide(srcArg)
	if err != nil {
		return nil, err
	}
	dst, err := parseSide(dstArg)
	if err != nil {
		return nil, err
	}
	j := &job{cmd: cmd, t: t, r: r, src: src, dst: dst}
	switch {
	case !src.remote && !dst.remote:
		return nil, usageErrorf("%s %s %s: neither is an object; name objects %sBUCKET/PREFIX", cmd.Name(), srcArg, dstArg, remoteScheme)
	case !src.remote:
		j.op = "upload"
	case !dst.remote:
		j.op = "download"
	case src.rp == dst.rp:
		return nil, usageErrorf("%s %s %s: source and destination are the same prefix", cmd.Name(), srcArg, dstArg)
	case r.delete && src.rp.Bucket == dst.rp.Bucket && (strings.HasPrefix(src.rp.Key, dst.rp.Key) || strings.HasPrefix(dst.rp.Key, src.rp.Key)):
		return nil, usageErrorf("%s --delete %s %s: one prefix holds the other, so what --delete removes would include the source, or what is copied", cmd.Name(), srcArg, dstArg)
	default:
		j.op = "copy"
	}
	if r.parallel < 1 {
		return nil, usageErrorf("--parallel %d: want at least 1", r.parallel)
	}
	if _, err := t.putOptions(""); err != nil { // a bad --part-size fails once, not per file
		return nil, err
	}
	if !dst.remote {
		if fi, err := os.Stat(dst.dir); err == nil && !fi.IsDir() {
			return nil, usageErrorf("%s is not a directory", dst.dir)
		}
	}
	if j.cl, err = connect(cmd.Context(), cmd, t.target); err != nil {
		return nil, err
	}
	if dst.remote {
		if _, err := j.cl.StatBucket(cmd.Context(), dst.rp.Bucket); err != nil {
			j.cl.Close()
			return nil, fmt.Errorf("%s: %w", remoteScheme+dst.rp.Bucket, err)
		}
	}
	j.p = t.printer(cmd)
	return j, nil
}

// list lists a side: the source must exist, a local destination need
// not. A source directory that cannot be read is a failure, and makes
// the listing incomplete: sync --delete then deletes nothing.
func (j *job) list(s side) ([]entry, error) {
	if s.remote {
		return listRemote(j.cmd.Context(), j.cl, s.rp)
	}
	unreadable := func(err error) { j.warn(fmt.Sprintf("skipping %v", err)) }
	if s == j.src {
		unreadable = func(err error) {
			j.incomplete = true
			j.attempted.Add(1)
			j.fail(fmt.Errorf("%s failed: %w", j.op, err))
		}
	}
	return walkLocal(s.dir, s == j.dst, j.warn, unreadable)
}

// sources lists the source, less what the destination cannot hold: a
// download skips directory markers, and a key that would land outside
// the destination directory fails.
func (j *job) sources() ([]entry, error) {
	all, err := j.list(j.src)
	if err != nil || j.dst.remote {
		return all, err
	}
	var out []entry
	for _, e := range all {
		_, err := localRel(e.rel)
		switch {
		case errors.Is(err, errDirMarker):
		case err != nil:
			j.attempted.Add(1)
			j.fail(fmt.Errorf("download failed: %s: %w", j.src.name(e.rel), err))
		default:
			out = append(out, e)
		}
	}
	return out, nil
}

// warn prints a warning line on stderr, above the bar.
func (j *job) warn(msg string) {
	j.bar.above(func() { fmt.Fprintln(j.cmd.ErrOrStderr(), "osprey: warning: "+printable(msg)) })
}

// fail prints a failure's error line and counts it; a job that is being
// interrupted says so once, at the end, instead.
func (j *job) fail(err error) {
	j.failed.Add(1)
	if j.cmd.Context().Err() == nil {
		j.bar.above(func() { fmt.Fprintln(j.cmd.ErrOrStderr(), errorLine(err)) })
	}
}

// run transfers todo and then deletes del from the destination, --parallel
// at a time, with one progress bar for the transfers' bytes. Nothing
// changes with --dry-run: each step prints its "(dryrun) " line instead.
func (j *job) run(todo, del []entry) error {
	ctx := j.cmd.Context()
	var total int64
	for _, e := range todo {
		total += e.size
	}
	out := j.p.w
	if !j.r.dryRun && len(todo) > 0 {
		j.bar = newProgress(j.cmd.ErrOrStderr(), j.t.showProgress(j.cmd), fmt.Sprintf("%d %s", len(todo), plural[j.op]), total)
		if f, ok := out.(*os.File); ok && j.bar != nil && isTerminal(f) {
			j.p.w = aboveBar{j.bar, out} // result lines and the bar share a terminal
		}
	}
	forEach(ctx, j.r.parallel, todo, func(e entry) {
		j.attempted.Add(1)
		if err := j.transfer(ctx, e); err != nil {
			j.fail(fmt.Errorf("%s failed: %w", j.op, err))
		}
	})
	j.bar.done()
	j.bar, j.p.w = nil, out
	forEach(ctx, j.r.parallel, del, func(e entry) {
		j.attempted.Add(1)
		if err := j.remove(ctx, e); err != nil {
			j.fail(fmt.Errorf("delete failed: %w", err))
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	if n := j.failed.Load(); n > 0 {
		return fmt.Errorf("%d of %d transfers and deletes failed", n, j.attempted.Load())
	}
	return nil
}

// plural names a job's transfers on its progress bar ("12 uploads").
var plural = map[string]string{"upload": "uploads", "download": "downloads", "copy": "copies"}

// forEach calls fn on each item, n at a time, and stops handing out
// items once ctx ends.
func forEach[T any](ctx context.Context, n int, items []T, fn func(T)) {
	ch := make(chan T)
	var wg sync.WaitGroup
	for range min(n, len(items)) {
		wg.Go(func() {
			for it := range ch {
				fn(it)
			}
		})
	}
feed:
	for _, it := range items {
		select {
		case ch <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
}

// transfer copies one entry from the source to the destination.
func (j *job) transfer(ctx context.Context, e entry) error {
	srcName, dstName := j.src.name(e.rel), j.dst.name(e.rel)
	if j.r.dryRun {
		j.p.result(fmt.Sprintf("(dryrun) %s: %s to %s", j.op, srcName, dstName),
			map[string]any{"op": j.op, "source": srcName, "target": dstName, "size": e.size, "dry_run": true})
		return nil
	}
	start := time.Now()
	shared := func(int64) *progress { return j.bar }
	var (
		info client.ObjectInfo
		err  error
	)
	switch j.op {
	case "upload":
		var f *os.File
		if f, err = os.Open(e.path); err != nil {
			return err
		}
		defer f.Close()
		info, err = j.t.upload(ctx, j.cl, f, e.size, j.dst.object(e.rel), j.bar)
	case "download":
		rel, _ := localRel(e.rel) // sources() dropped the rest
		name := filepath.Join(j.dst.dir, rel)
		if err = os.MkdirAll(filepath.Dir(name), 0o777); err != nil {
			return err
		}
		if info, err = downloadTo(ctx, j.cl, j.src.object(e.rel), name, shared, false); err == nil {
			// The object's time, as aws s3 does: sync compares times
			// where there is no checksum to compare.
			os.Chtimes(name, info.LastModified, info.LastModified)
		}
	case "copy":
		info, err = j.t.copyObject(ctx, j.cl, j.src.object(e.rel), j.dst.object(e.rel), shared)
	}
	if err != nil {
		return err
	}
	j.t.report(j.p, j.op, srcName, dstName, info.Size, info.ETag, time.Since(start))
	return nil
}

// remove deletes one entry from the destination (sync --delete).
func (j *job) remove(ctx context.Context, e entry) error {
	if j.dst.remote {
		rp := j.dst.object(e.rel)
		if !j.r.dryRun {
			if err := j.cl.RemoveObject(ctx, rp.Bucket, rp.Key); err != nil {
				return fmt.Errorf("%s: %w", rp, err)
			}
		}
		reportDelete(j.p, rp, j.r.dryRun)
		return nil
	}
	if !j.r.dryRun {
		if err := os.Remove(e.path); err != nil {
			return err
		}
	}
	op := "delete"
	if j.r.dryRun {
		op = "(dryrun) delete"
	}
	j.p.result(op+": "+e.path, map[string]any{"op": "delete", "path": e.path, "dry_run": j.r.dryRun})
	return nil
}

// runJob runs cp --recursive (plan nil: every source entry) or sync
// (plan: what to copy and delete).
func runJob(cmd *cobra.Command, t *transferFlags, r *recursiveFlags, src, dst string, plan func(j *job, srcs []entry) (todo, del []entry, err error)) error {
	j, err := newJob(cmd, t, r, src, dst)
	if err != nil {
		return err
	}
	defer j.cl.Close()
	todo, err := j.sources()
	if err != nil {
		return err
	}
	if len(todo) == 0 && j.src.remote {
		// The prefix names a directory: one naming an object instead
		// finds nothing under it, and the user meant the object.
		if obj := strings.TrimSuffix(j.src.rp.Key, "/"); obj != "" {
			if _, err := j.cl.StatObject(cmd.Context(), j.src.rp.Bucket, obj); err == nil {
				j.warn(fmt.Sprintf("no objects under %s, which is an object: copy it without --recursive", j.src.rp))
			}
		}
	}
	var del []entry
	if plan != nil {
		if todo, del, err = plan(j, todo); err != nil {
			return err
		}
	}
	return j.run(todo, del)
}

// aboveBar writes a command's result lines above the progress bar when
// both go to the same terminal.
type aboveBar struct {
	bar *progress
	w   io.Writer
}

func (a aboveBar) Write(b []byte) (n int, err error) {
	a.bar.above(func() { n, err = a.w.Write(b) })
	return n, err
}

// The single-object steps, shared by put, get and cp (runTransfer) and by
// the recursive jobs. barFor gives the bar that counts an object's bytes
// once its size is known: a bar of its own for one object, the job's for
// many.

// upload puts size bytes of r (-1: to its end) as dp with the flags'
// content type, metadata and part size, counting them on bar.
func (t *transferFlags) upload(ctx context.Context, cl *client.Client, r io.Reader, size int64, dp remotePath, bar *progress) (client.ObjectInfo, error) {
	opts, err := t.putOptions(dp.Key)
	if err != nil {
		return client.ObjectInfo{}, err
	}
	info, err := cl.PutObject(ctx, dp.Bucket, dp.Key, bar.reader(r), size, opts)
	if err != nil {
		return info, fmt.Errorf("%s: %w", dp, err)
	}
	return info, nil
}

// readObject opens sp and hands its bytes, counted on barFor(its size),
// to consume; it returns the object's info.
func readObject(ctx context.Context, cl *client.Client, sp remotePath, barFor func(int64) *progress, consume func(io.Reader, client.ObjectInfo) error) (client.ObjectInfo, error) {
	obj, err := cl.GetObject(ctx, sp.Bucket, sp.Key, client.GetOptions{})
	if err != nil {
		return client.ObjectInfo{}, fmt.Errorf("%s: %w", sp, err)
	}
	defer obj.Close()
	info, err := obj.Stat()
	if err != nil {
		return info, fmt.Errorf("%s: %w", sp, err)
	}
	return info, consume(barFor(info.Size).reader(obj), info)
}

// downloadTo writes sp into the file name through writeFileAtomic, so a
// failed download leaves name as it was. With makeDir, name's directory is
// made if missing, once the object is found (get into "dir/", as aws s3 cp
// makes it): a missing object leaves no directory behind.
func downloadTo(ctx context.Context, cl *client.Client, sp remotePath, name string, barFor func(int64) *progress, makeDir bool) (client.ObjectInfo, error) {
	return readObject(ctx, cl, sp, barFor, func(r io.Reader, _ client.ObjectInfo) error {
		if makeDir {
			if err := os.MkdirAll(filepath.Dir(name), 0o777); err != nil {
				return err
			}
		}
		err := writeFileAtomic(name, func(w io.Writer) error {
			_, err := io.Copy(w, r)
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", sp, err)
		}
		return nil
	})
}

// copyObject streams sp into dp through this client (there is no
// server-side copy), keeping sp's content type and metadata unless the
// flags give others.
func (t *transferFlags) copyObject(ctx context.Context, cl *client.Client, sp, dp remotePath, barFor func(int64) *progress) (client.ObjectInfo, error) {
	var out client.ObjectInfo
	_, err := readObject(ctx, cl, sp, barFor, func(r io.Reader, info client.ObjectInfo) error {
		opts, err := t.putOptions(dp.Key)
		if err != nil {
			return err
		}
		if t.contentType == "" {
			opts.ContentType = info.ContentType
		}
		if t.meta.m == nil {
			opts.UserMetadata = info.UserMetadata
		}
		if out, err = cl.PutObject(ctx, dp.Bucket, dp.Key, r, info.Size, opts); err != nil {
			return fmt.Errorf("%s: %w", dp, err)
		}
		return nil
	})
	return out, err
}
