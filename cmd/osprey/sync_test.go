package main

import (
	"bytes"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestRecursiveAndSync runs cp --recursive and sync in process against a
// one-OSD cluster, in every direction: a tree with an empty file, a deep
// file, a link to follow, a link loop and a FIFO to skip goes up and
// comes back byte for byte; sync copies only what is new or differs
// (a same-size change that only the checksum shows, a multipart object
// that only the time can show), --dry-run changes nothing, and --delete
// removes extras on both sides.
func TestRecursiveAndSync(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc := osdtest.StartLocal(t, local.Options{OSDs: 1, PGs: 8, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	seeds := strings.Join(lc.Seeds(), ",")
	work := t.TempDir()
	t.Chdir(work) // output lines name local paths as given: relative ones

	// osprey runs a command and returns its stdout, stderr and exit code.
	osprey := func(args ...string) (string, string, int) {
		t.Helper()
		out, errOut, err := run(t, append(args, "--seeds", seeds)...)
		if err != nil { // as main prints it
			errOut += errorLine(err) + "\n"
		}
		return out, errOut, exitCode(err)
	}
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := osprey(args...)
		if code != 0 {
			t.Fatalf("osprey %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
		}
		return out
	}
	// lines are out's lines that start with op+": ", less their
	// "(size in time, rate)" tails, sorted.
	lines := func(out, op string) []string {
		var got []string
		for l := range strings.Lines(out) {
			if rest, found := strings.CutPrefix(l, op+": "); found {
				rest, _, _ = strings.Cut(strings.TrimSpace(rest), " (")
				got = append(got, rest)
			}
		}
		slices.Sort(got)
		return got
	}
	want := func(what string, got []string, want ...string) {
		t.Helper()
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", what, got, want)
		}
	}

	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	tree := map[string][]byte{
		"top.txt":                 []byte("hello"),
		"empty":                   {},
		"a/mid.txt":               []byte("middle"),
		"a/b/c/d/e/f/g/deep.bin":  random(200 << 10),
		"with space/ünïcode.json": []byte(`{"x":1}`),
	}
	writeTree(t, "src", tree)
	if err := os.Symlink("a/mid.txt", "src/link.txt"); err != nil { // followed
		t.Fatal(err)
	}
	tree["link.txt"] = tree["a/mid.txt"]
	if err := os.Symlink("..", "src/a/loop"); err != nil { // a loop: skipped
		t.Fatal(err)
	}
	if err := syscall.Mkfifo("src/fifo", 0o644); err != nil { // not a file: skipped
		t.Fatal(err)
	}
	var rels []string
	for rel := range tree {
		rels = append(rels, rel)
	}
	// names maps the tree's relative paths into a local directory or
	// under a prefix, as output lines show them.
	names := func(fn func(rel string) string, only ...string) []string {
		if len(only) == 0 {
			only = rels
		}
		var out []string
		for _, rel := range only {
			out = append(out, fn(rel))
		}
		return out
	}
	under := func(dir string) func(string) string {
		return func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }
	}
	obj := func(prefix string) func(string) string {
		return func(rel string) string { return "osprey://" + prefix + rel }
	}
	pairs := func(from, to func(string) string, only ...string) []string {
		var out []string
		for _, rel := range names(func(r string) string { return r }, only...) {
			out = append(out, from(rel)+" to "+to(rel))
		}
		return out
	}

	ok("mb", "syn")

	// cp -r up, down, and between prefixes.
	out, errOut, code := osprey("cp", "-r", "src", "osprey://syn/up", "--parallel", "3")
	if code != 0 {
		t.Fatalf("cp -r up: exit %d\n%s", code, errOut)
	}
	want("cp -r up", lines(out, "upload"), pairs(under("src"), obj("syn/up/"))...)
	for _, w := range []string{"osprey: warning: skipping " + filepath.Join("src", "a", "loop") + ": a symbolic link loop",
		"osprey: warning: skipping " + filepath.Join("src", "fifo") + ": not a regular file"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("cp -r up: stderr lacks %q:\n%s", w, errOut)
		}
	}
	out = ok("cp", "--recursive", "osprey://syn/up/", "down")
	want("cp -r down", lines(out, "download"), pairs(obj("syn/up/"), under("down"))...)
	checkTree(t, "down", tree)
	out = ok("cp", "-r", "osprey://syn/up", "osprey://syn/copy/")
	want("cp -r copy", lines(out, "copy"), pairs(obj("syn/up/"), obj("syn/copy/"))...)
	ok("cp", "-r", "osprey://syn/copy/", "down2")
	checkTree(t, "down2", tree)

	// sync up: everything, then nothing.
	out = ok("sync", "src", "osprey://syn/s/")
	want("first sync", lines(out, "upload"), pairs(under("src"), obj("syn/s/"))...)
	if out := ok("sync", "src", "osprey://syn/s/"); out != "" {
		t.Errorf("a sync with nothing to do printed %q", out)
	}
	// A change of the same size with an older time: only the checksum
	// shows it. And a new file.
	writeTree(t, "src", map[string][]byte{"a/mid.txt": []byte("MIDDLE"), "a/new.txt": []byte("new")})
	old := time.Now().Add(-time.Hour)
	os.Chtimes("src/a/mid.txt", old, old)
	changed := []string{"a/mid.txt", "link.txt", "a/new.txt"}
	out = ok("sync", "src", "osprey://syn/s/", "--dry-run")
	want("sync --dry-run", lines(out, "(dryrun) upload"), pairs(under("src"), obj("syn/s/"), changed...)...)
	out = ok("sync", "src", "osprey://syn/s/")
	want("sync after a change", lines(out, "upload"), pairs(under("src"), obj("syn/s/"), changed...)...)
	if out := ok("sync", "src", "osprey://syn/s/"); out != "" {
		t.Errorf("a sync with nothing to do printed %q", out)
	}
	// --delete: --dry-run keeps the object, then it goes.
	os.Remove("src/a/new.txt")
	out = ok("sync", "src", "osprey://syn/s/", "--delete", "--dry-run")
	want("sync --delete --dry-run", lines(out, "(dryrun) delete"), "osprey://syn/s/a/new.txt")
	ok("stat", "syn/s/a/new.txt")
	out = ok("sync", "src", "osprey://syn/s/", "--delete")
	want("sync --delete", lines(out, "delete"), "osprey://syn/s/a/new.txt")
	if _, _, code := osprey("stat", "syn/s/a/new.txt"); code != exitNotFound {
		t.Errorf("stat of a key sync --delete removed: exit %d", code)
	}
	tree["a/mid.txt"], tree["link.txt"] = []byte("MIDDLE"), []byte("MIDDLE")

	// sync down: everything, then nothing; then a changed file and an
	// extra one, with --dry-run and then for real.
	out = ok("sync", "osprey://syn/s", "down3")
	want("sync down", lines(out, "download"), pairs(obj("syn/s/"), under("down3"))...)
	checkTree(t, "down3", tree)
	if out := ok("sync", "osprey://syn/s", "down3"); out != "" {
		t.Errorf("a sync down with nothing to do printed %q", out)
	}
	writeTree(t, "down3", map[string][]byte{"top.txt": []byte("HELLO"), "x/extra": []byte("extra")})
	os.Chtimes("down3/top.txt", old, old)
	out = ok("sync", "osprey://syn/s", "down3", "--delete", "--dry-run")
	want("sync down --dry-run", lines(out, "(dryrun) download"), pairs(obj("syn/s/"), under("down3"), "top.txt")...)
	want("sync down --dry-run", lines(out, "(dryrun) delete"), filepath.Join("down3", "x", "extra"))
	if b, _ := os.ReadFile("down3/top.txt"); string(b) != "HELLO" {
		t.Errorf("sync --dry-run changed a file to %q", b)
	}
	out = ok("sync", "osprey://syn/s", "down3", "--delete")
	want("sync down --delete", lines(out, "download"), pairs(obj("syn/s/"), under("down3"), "top.txt")...)
	want("sync down --delete", lines(out, "delete"), filepath.Join("down3", "x", "extra"))
	checkTree(t, "down3", tree)

	// sync between prefixes, and --delete there.
	out = ok("sync", "osprey://syn/s/", "osprey://syn/s2/")
	want("sync copy", lines(out, "copy"), pairs(obj("syn/s/"), obj("syn/s2/"))...)
	ok("rm", "syn/s/top.txt")
	out = ok("sync", "osprey://syn/s/", "osprey://syn/s2/", "--delete")
	want("sync copy --delete", lines(out, "delete"), "osprey://syn/s2/top.txt")
	if got := lines(out, "copy"); len(got) != 0 {
		t.Errorf("sync copy --delete copied %q", got)
	}

	// A multipart object: found current by a second sync, copied when
	// changed (by its CRC32C combined from its parts', or where it has
	// none by its time: TestInSync).
	writeTree(t, "mp", map[string][]byte{"big": random(6 << 20)})
	os.Chtimes("mp/big", old, old)
	ok("sync", "mp", "osprey://syn/mp/", "--part-size", "5MiB")
	if out := ok("stat", "syn/mp/big"); !strings.Contains(out, "-2\n") {
		t.Fatalf("not a multipart object:\n%s", out)
	}
	if out := ok("sync", "mp", "osprey://syn/mp/"); out != "" {
		t.Errorf("a sync of an unchanged multipart object printed %q", out)
	}
	ok("sync", "osprey://syn/mp/", "mpdown")
	if out := ok("sync", "osprey://syn/mp/", "mpdown"); out != "" {
		t.Errorf("a second sync down of a multipart object printed %q", out)
	}
	big := random(6 << 20)
	writeTree(t, "mp", map[string][]byte{"big": big})
	later := time.Now().Add(time.Hour)
	os.Chtimes("mp/big", later, later)
	out = ok("sync", "mp", "osprey://syn/mp/", "--part-size", "5MiB")
	want("sync of a newer multipart file", lines(out, "upload"), "mp/big to osprey://syn/mp/big")
	out = ok("sync", "osprey://syn/mp/", "mpdown")
	want("sync down of a newer multipart object", lines(out, "download"), "osprey://syn/mp/big to mpdown/big")
	checkTree(t, "mpdown", map[string][]byte{"big": big})

	// Failures: one error line each, the rest go on, exit 1. A
	// directory where a file should go cannot be replaced.
	os.MkdirAll("down4/a/mid.txt/x", 0o755)
	out, errOut, code = osprey("cp", "-r", "osprey://syn/up/", "down4")
	if code != exitError || strings.Count(errOut, "osprey: ") != 2 ||
		!strings.Contains(errOut, "osprey: download failed: osprey://syn/up/a/mid.txt: ") ||
		!strings.Contains(errOut, "osprey: 1 of 6 transfers and deletes failed") {
		t.Errorf("cp -r with one failure: exit %d, stderr:\n%s", code, errOut)
	}
	if n := len(lines(out, "download")); n != len(tree)-1 {
		t.Errorf("cp -r with one failure: %d downloads, want %d", n, len(tree)-1)
	}
	if _, _, code := osprey("cp", "-r", "src", "osprey://nobucket/"); code != exitNotFound {
		t.Errorf("cp -r to a missing bucket: exit %d", code)
	}
	if _, _, code := osprey("sync", "nope", "osprey://syn/"); code != exitError {
		t.Errorf("sync of a missing directory: exit %d", code)
	}
	for _, args := range [][]string{
		{"sync", "a", "b"},
		{"cp", "-r", "-", "osprey://syn/"},
		{"sync", "src/top.txt", "osprey://syn/"},
		{"sync", "osprey://syn/s/", "osprey://syn/s"},
		{"sync", "src", "osprey://syn/", "--parallel", "0"},
		// --delete with one prefix holding the other would delete the
		// source (or what it copies).
		{"sync", "--delete", "osprey://syn/s/a/", "osprey://syn/s/"},
		{"sync", "--delete", "osprey://syn/s/", "osprey://syn/s/a/"},
		{"sync", "--delete", "osprey://syn/s/", "osprey://syn/"},
	} {
		if _, _, code := osprey(args...); code != exitUsage {
			t.Errorf("osprey %s: exit %d, want %d", strings.Join(args, " "), code, exitUsage)
		}
	}

	// sync --delete into a directory holding a link to a directory
	// outside it deletes nothing through the link.
	writeTree(t, "outside", map[string][]byte{"deep/keep.txt": []byte("precious")})
	os.MkdirAll("down5", 0o755)
	if err := os.Symlink("../outside", "down5/mnt"); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = osprey("sync", "--delete", "osprey://syn/mp/", "down5")
	if code != 0 || len(lines(out, "delete")) != 0 || !strings.Contains(errOut, "not deleting down5/mnt/deep/keep.txt") {
		t.Errorf("sync --delete beside a link to a directory: exit %d, deleted %q\n%s", code, lines(out, "delete"), errOut)
	}
	checkTree(t, "outside", map[string][]byte{"deep/keep.txt": []byte("precious")})
	// What lies through the link is compared, not copied again.
	ok("cp", "-r", "outside", "osprey://syn/viaLink/mnt/")
	ok("sync", "osprey://syn/viaLink/", "down5")
	if out := ok("sync", "osprey://syn/viaLink/", "down5"); out != "" {
		t.Errorf("a second sync through a link to a directory printed %q", out)
	}

	// A name of 250 bytes comes back (its temporary name is cut to fit),
	// and a killed download's temporary file is never uploaded.
	long := strings.Repeat("x", 250)
	writeTree(t, "longsrc", map[string][]byte{long: []byte("long"), ".f.osprey-2h6r4qrcxa5at": []byte("partial"), ".env.osprey-prod": []byte("mine")})
	out, errOut, code = osprey("cp", "-r", "longsrc", "osprey://syn/long/")
	want("upload beside a partial download", lines(out, "upload"), "longsrc/"+long+" to osprey://syn/long/"+long,
		"longsrc/.env.osprey-prod to osprey://syn/long/.env.osprey-prod")
	if code != 0 || !strings.Contains(errOut, "the partial file of a download") {
		t.Errorf("cp -r with a partial download's file: exit %d\n%s", code, errOut)
	}
	ok("cp", "-r", "osprey://syn/long/", "longdown")
	checkTree(t, "longdown", map[string][]byte{long: []byte("long"), ".env.osprey-prod": []byte("mine")})
	ok("get", "syn/long/"+long, "longget/")
	checkTree(t, "longget", map[string][]byte{long: []byte("long")})
	// A get makes the directories of its target once the object is
	// found; a missing object leaves none.
	if _, _, code := osprey("get", "syn/long/nothing", "nodir/"); code != exitNotFound {
		t.Errorf("get of a missing object: exit %d", code)
	}
	if _, err := os.Stat("nodir"); !os.IsNotExist(err) {
		t.Errorf("get of a missing object left its target directory: %v", err)
	}
	ok("get", "syn/long/"+long, "deep/er/file")
	checkTree(t, "deep/er", map[string][]byte{"file": []byte("long")})

	// A recursive copy of an object's name says it is one.
	writeTree(t, "one", map[string][]byte{"m0": []byte("0")})
	ok("put", "one/m0", "syn/m0")
	_, errOut, code = osprey("cp", "-r", "osprey://syn/m0", "m0down")
	if code != 0 || !strings.Contains(errOut, "which is an object: copy it without --recursive") {
		t.Errorf("cp -r of an object: exit %d\n%s", code, errOut)
	}
	if _, _, code := osprey("rm", "-r", "--jobs", "0", "syn/nothing/"); code != exitUsage {
		t.Errorf("rm -r --jobs 0: exit %d, want %d", code, exitUsage)
	}

	// Several arguments: each is tried whatever fails before it, each
	// failure printed once, the exit code the first failure's.
	writeTree(t, "m", map[string][]byte{"m1": []byte("1"), "m2": []byte("2")})
	ok("cp", "-r", "m", "osprey://syn/m/")
	_, errOut, code = osprey("rm", "syn/m/m1", "nobucket/z", "syn/m/m2")
	if code != exitNotFound || strings.Count(errOut, "NoSuchBucket") != 1 {
		t.Errorf("rm with a missing bucket in the middle: exit %d\n%s", code, errOut)
	}
	for _, k := range []string{"syn/m/m1", "syn/m/m2"} {
		if _, _, code := osprey("stat", k); code != exitNotFound {
			t.Errorf("%s after rm: exit %d, want it deleted", k, code)
		}
	}
	ok("mb", "multi1")
	_, errOut, code = osprey("rb", "multi1", "nobucket", "syn-none")
	if code != exitNotFound || strings.Count(errOut, "NoSuchBucket") != 2 {
		t.Errorf("rb of a bucket and two missing ones: exit %d\n%s", code, errOut)
	}
	if _, _, code := osprey("stat", "multi1"); code != exitNotFound {
		t.Errorf("multi1 after rb: exit %d, want it removed", code)
	}
}

// writeTree writes files (relative paths with '/') under dir.
func writeTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for rel, b := range files {
		name := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkTree wants dir to hold exactly files, byte for byte.
func checkTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	got := map[string][]byte{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			got[filepath.ToSlash(rel)], _ = os.ReadFile(p)
		}
		return nil
	})
	for rel, b := range files {
		if g, ok := got[rel]; !ok || !bytes.Equal(g, b) {
			t.Errorf("%s/%s: missing, or not the %d bytes wanted (%d there)", dir, rel, len(b), len(g))
		}
		delete(got, rel)
	}
	for rel := range got {
		t.Errorf("%s/%s: not expected", dir, rel)
	}
}

func TestLocalRel(t *testing.T) {
	for rel, want := range map[string]string{"a": "a", "a/b/c.txt": filepath.Join("a", "b", "c.txt"), "with space": "with space"} {
		if got, err := localRel(rel); err != nil || got != want {
			t.Errorf("localRel(%q) = %q, %v; want %q", rel, got, err, want)
		}
	}
	for _, rel := range []string{"", "dir/"} {
		if _, err := localRel(rel); err != errDirMarker {
			t.Errorf("localRel(%q): %v, want a directory marker", rel, err)
		}
	}
	for _, rel := range []string{"../x", "a/../../x", "a//b", "./a", "a/..", "/abs"} {
		if got, err := localRel(rel); err == nil {
			t.Errorf("localRel(%q) = %q, want an error", rel, got)
		}
	}
}

// TestInSync checks sync's comparison on its own: sizes, then CRC32Cs
// (a local file's computed), and times where a multipart object has no
// whole-object CRC32C.
func TestInSync(t *testing.T) {
	name := filepath.Join(t.TempDir(), "f")
	os.WriteFile(name, []byte("hello"), 0o644)
	crc := crc32.Checksum([]byte("hello"), crc32.MakeTable(crc32.Castagnoli))
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	file := entry{rel: "f", size: 5, mtime: t0, path: name}
	object := func(size int64, etag string, crc uint32, mtime time.Time) entry {
		return entry{rel: "f", size: size, mtime: mtime, info: client.ObjectInfo{Key: "f", Size: size, ETag: etag, CRC32C: crc}}
	}
	up := &job{src: side{dir: "d"}, dst: side{remote: true}}
	down := &job{src: side{remote: true}, dst: side{dir: "d"}}
	between := &job{src: side{remote: true}, dst: side{remote: true}}
	for _, c := range []struct {
		what string
		j    *job
		s, d entry
		same bool
	}{
		{"same bytes", up, file, object(5, "5d41402abc4b2a76b9719d911017c592", crc, t0.Add(-time.Hour)), true},
		{"other bytes, same size, dst newer", up, file, object(5, "x", crc+1, t0.Add(time.Hour)), false},
		{"other size", up, file, object(6, "x", crc, t0), false},
		{"down, same bytes", down, object(5, "x", crc, t0.Add(time.Hour)), file, true},
		{"down, other bytes", down, object(5, "x", crc^1, t0.Add(-time.Hour)), file, false},
		{"multipart, no CRC, dst newer", up, file, object(5, "abc-2", 0, t0.Add(time.Second)), true},
		{"multipart, no CRC, same time", down, object(5, "abc-2", 0, t0), file, true},
		{"multipart, no CRC, src newer", up, file, object(5, "abc-2", 0, t0.Add(-time.Nanosecond)), false},
		{"multipart, no CRC, src newer within the second, dst in whole seconds", down,
			object(5, "abc-2", 0, t0), entry{rel: "f", size: 5, mtime: t0.Truncate(time.Second), path: name}, true},
		{"multipart with a whole CRC", up, file, object(5, "abc-2", crc, t0.Add(-time.Hour)), true},
		{"objects, same ETag", between, object(5, "abc-2", 0, t0.Add(time.Hour)), object(5, "abc-2", 0, t0), true},
		{"objects, CRCs", between, object(5, "a", crc, t0.Add(time.Hour)), object(5, "b", crc, t0), true},
		{"objects, other CRCs", between, object(5, "a", crc, t0), object(5, "b", crc^1, t0.Add(time.Hour)), false},
	} {
		if same, err := c.j.inSync(c.s, c.d); err != nil || same != c.same {
			t.Errorf("%s: inSync = %v, %v; want %v", c.what, same, err, c.same)
		}
	}
	missing := entry{rel: "f", size: 5, path: filepath.Join(t.TempDir(), "gone")}
	if _, err := up.inSync(missing, object(5, "x", crc, t0)); err == nil {
		t.Error("an unreadable file compared without an error")
	}
}
