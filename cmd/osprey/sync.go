package main

// sync, as aws s3 sync: copy what is missing or differs at the
// destination, and with --delete remove what the source lacks. The job
// itself (listing, parallel transfers, the bar, failures) is recursive.go's.

import (
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/spf13/cobra"
)

func newSyncCmd() *cobra.Command {
	var (
		t transferFlags
		r recursiveFlags
	)
	cmd := &cobra.Command{
		Use:   "sync SRC DST",
		Short: "Copy what is missing or differs, between a directory and a prefix or two prefixes",
		Long: `Makes DST hold every file or object under SRC, as aws s3 sync does: each
side is a local directory or an object prefix osprey://BUCKET[/PREFIX]
(the scheme is required, as in cp), and at least one is a prefix. A file
at DIR/a/b.txt is the object PREFIX/a/b.txt, and the reverse. A prefix
names a "directory": osprey://b/photos is the keys under photos/.

An entry is copied when DST lacks it, when the sizes differ, or when the
CRC32C checksums differ: a file's is computed, an object's is in its
metadata. A multipart object has no CRC32C of its whole content; where a
side is one, the entry is copied when the source is newer than the
destination instead (to the second where a file system keeps no finer
times). Downloads set the file's time to
the object's, so that a second sync finds them current.

--delete removes what is under DST but not under SRC. --dry-run prints
what would be done ("(dryrun) upload: ...") and changes nothing.
--parallel transfers run at a time under one progress bar. A transfer
that fails prints one error line and the others go on; the command then
exits 1.`,
		Example: `  osprey sync ./photos osprey://photos/2024/
  osprey sync osprey://photos/2024/ ./photos --delete
  osprey sync osprey://photos osprey://backup/photos --dry-run`,
		Args: argsBetween(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runJob(cmd, &t, &r, args[0], args[1], syncPlan)
		},
	}
	t.add(cmd, true)
	r.addParallel(cmd)
	f := cmd.Flags()
	f.BoolVar(&r.delete, "delete", false, "delete what is under DST but not under SRC")
	f.BoolVar(&r.dryRun, "dry-run", false, "print what would be copied and deleted, change nothing")
	cmd.ValidArgsFunction = completeRemote(&t.target, true, false)
	return cmd
}

// syncPlan compares the source's entries with the destination's: those
// missing there or different are to copy, and with --delete those there
// that the source lacks are to delete.
func syncPlan(j *job, srcs []entry) (todo, del []entry, err error) {
	dsts, err := j.list(j.dst)
	if err != nil {
		return nil, nil, err
	}
	have := make(map[string]entry, len(dsts))
	for _, d := range dsts {
		have[d.rel] = d
	}
	// Comparing may read local files: --parallel at a time, before the
	// transfers start so that their total is known.
	type item struct {
		src  entry
		copy bool
	}
	items := make([]*item, len(srcs))
	for i, s := range srcs {
		items[i] = &item{src: s}
	}
	forEach(j.cmd.Context(), j.r.parallel, items, func(it *item) {
		d, ok := have[it.src.rel]
		if !ok {
			it.copy = true
			return
		}
		same, err := j.inSync(it.src, d)
		if err != nil {
			j.attempted.Add(1)
			j.fail(fmt.Errorf("compare failed: %w", err))
			return
		}
		it.copy = !same
	})
	inSrc := make(map[string]bool, len(srcs))
	for _, it := range items {
		inSrc[it.src.rel] = true
		if it.copy {
			todo = append(todo, it.src)
		}
	}
	if j.r.delete && j.incomplete {
		j.warn("not deleting anything: the source could not be listed in full")
	} else if j.r.delete {
		for _, d := range dsts {
			switch {
			case inSrc[d.rel]:
			case d.viaLink:
				// Outside the destination, as far as anyone knows.
				j.warn(fmt.Sprintf("not deleting %s: it is under a symbolic link to a directory", j.dst.name(d.rel)))
			case !j.src.remote && isTempName(path.Base(d.rel)):
				// Left out of the source, not missing from it.
			default:
				del = append(del, d)
			}
		}
	}
	return todo, del, nil
}

// inSync reports whether d, at the destination, already holds s's bytes:
// the same size, and the same CRC32C where both sides have one; where one
// is a multipart object without a whole-object CRC32C, d no older than s.
// Two objects with the same ETag (MD5) hold the same bytes.
func (j *job) inSync(s, d entry) (bool, error) {
	if s.size != d.size {
		return false, nil
	}
	if j.src.remote && j.dst.remote && s.info.ETag != "" && s.info.ETag == d.info.ETag {
		return true, nil
	}
	if j.src.remote && !hasWholeCRC(s.info) || j.dst.remote && !hasWholeCRC(d.info) {
		return !newer(s.mtime, d.mtime), nil
	}
	sc, err := entryCRC(s)
	if err != nil {
		return false, err
	}
	dc, err := entryCRC(d)
	if err != nil {
		return false, err
	}
	return sc == dc, nil
}

// newer reports whether a is after b, to the second when either has no
// finer part (a file system that keeps whole seconds).
func newer(a, b time.Time) bool {
	if a.Nanosecond() == 0 || b.Nanosecond() == 0 {
		a, b = a.Truncate(time.Second), b.Truncate(time.Second)
	}
	return a.After(b)
}

// hasWholeCRC: an object's CRC32C is its bytes' (zero for no bytes), for
// a multipart one (ETag "MD5-N") combined from its parts' by the SDK; a
// multipart object reporting 0 has none to compare.
func hasWholeCRC(info client.ObjectInfo) bool {
	return info.CRC32C != 0 || !strings.Contains(info.ETag, "-")
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entryCRC is an object's CRC32C from its metadata, or a local file's,
// computed as the SDK computes it for a put (Castagnoli).
func entryCRC(e entry) (uint32, error) {
	if e.path == "" {
		return e.info.CRC32C, nil
	}
	f, err := os.Open(e.path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, f); err != nil {
		return 0, err
	}
	return h.Sum32(), nil
}
