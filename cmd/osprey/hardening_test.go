package main

// What using osprey as a new user would showed: downloads that replaced
// devices, FIFOs and symbolic links and ignored the umask, bench obj
// leaving its objects behind, error lines that showed the store's
// wording, multipart objects without a CRC32C, no --version.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// startTestCluster starts a one-OSD cluster in this process, stopped by
// t.Cleanup, and returns its seeds, comma-separated.
func startTestCluster(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc := osdtest.StartLocal(t, local.Options{OSDs: 1, PGs: 8, Logger: slog.New(slog.DiscardHandler)})
	return strings.Join(lc.Seeds(), ",")
}

// testClient is an SDK client of the cluster at seeds, closed by t.Cleanup.
func testClient(t *testing.T, seeds string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Options{Seeds: []string{seeds}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// charDevice makes a character device in dir like the one at real
// (major:minor 1:3 is /dev/null, 1:7 /dev/full), so that a download that
// replaced it would not damage the machine. Where device nodes cannot be
// made or opened here (not root, a nodev mount), it returns real itself
// when this process could not replace it anyway (not root), else "".
func charDevice(t *testing.T, dir, real string, minor int) string {
	t.Helper()
	name := filepath.Join(dir, filepath.Base(real))
	if err := syscall.Mknod(name, syscall.S_IFCHR|0o666, 1<<8|minor); err == nil {
		if f, err := os.OpenFile(name, os.O_WRONLY, 0); err == nil {
			f.Close()
			return name
		}
	}
	if os.Geteuid() != 0 {
		return real
	}
	return ""
}

func isCharDevice(t *testing.T, name string) bool {
	t.Helper()
	fi, err := os.Lstat(name)
	return err == nil && fi.Mode()&fs.ModeCharDevice != 0
}

// TestDownloadTargets runs get and cp from the binary into what may be a
// download's target: each is written into as cp would, and only a new or
// regular file is replaced, through a temporary file.
func TestDownloadTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a cluster; skipped with -short")
	}
	bin := buildCLI(t)
	seeds := startTestCluster(t)
	work := t.TempDir()
	cli := &cliRunner{t: t, bin: bin, dir: work, env: []string{envMon + "=", envMap + "=", envSeeds + "=" + seeds}}

	data := make([]byte, 300<<10) // more than a pipe holds
	for i := range data {
		data[i] = byte(i*7 + i>>9)
	}
	src := filepath.Join(work, "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cli.ok("mb", "tgt")
	cli.ok("put", src, "tgt/obj")

	// /dev/full fails every write (ENOSPC): the download must fail; into
	// /dev/null it succeeds. Both stay devices.
	for _, dev := range []struct {
		real  string
		minor int
		fails bool
	}{{"/dev/full", 7, true}, {"/dev/null", 3, false}} {
		t.Run(filepath.Base(dev.real), func(t *testing.T) {
			name := charDevice(t, t.TempDir(), dev.real, dev.minor)
			if name == "" {
				t.Skip("cannot make a device node here, and as root the test will not risk " + dev.real)
			}
			cli.t = t
			for _, args := range [][]string{{"get", "tgt/obj", name}, {"cp", "osprey://tgt/obj", name}} {
				if dev.fails {
					cli.expect(1, "no space left on device", args...)
				} else {
					cli.ok(args...)
				}
			}
			if !isCharDevice(t, name) {
				t.Errorf("%s is no longer a device", name)
			}
		})
	}
	t.Run("fifo", func(t *testing.T) {
		cli.t = t
		fifo := filepath.Join(t.TempDir(), "fifo")
		if err := syscall.Mkfifo(fifo, 0o644); err != nil {
			t.Fatal(err)
		}
		// Opened read-write, the FIFO does not wait for a writer, and the
		// read has a deadline: a download that replaced the FIFO fails the
		// test instead of hanging it.
		r, err := os.OpenFile(fifo, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		r.SetReadDeadline(time.Now().Add(2 * time.Minute))
		got := make(chan []byte, 1)
		go func() {
			b := make([]byte, len(data))
			n, _ := io.ReadFull(r, b)
			got <- b[:n]
		}()
		cli.ok("get", "tgt/obj", fifo)
		r.SetReadDeadline(time.Now().Add(10 * time.Second)) // all written by now
		if b := <-got; !bytes.Equal(b, data) {
			t.Errorf("the FIFO's reader got %d bytes, want the object's %d", len(b), len(data))
		}
		if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
			t.Errorf("%s is no longer a FIFO: %v %v", fifo, fi.Mode(), err)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		cli.t = t
		dir := t.TempDir()
		target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
		if err := os.WriteFile(target, []byte("old"), 0o640); err != nil {
			t.Fatal(err)
		}
		os.Chmod(target, 0o640) // whatever the umask
		if err := os.Symlink("target", link); err != nil {
			t.Fatal(err)
		}
		cli.ok("cp", "osprey://tgt/obj", link)
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("the link was replaced: %v %v", fi.Mode(), err)
		}
		if b, _ := os.ReadFile(target); !bytes.Equal(b, data) {
			t.Errorf("the link's target holds %d bytes, want the object's %d", len(b), len(data))
		}
		if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o640 {
			t.Errorf("the link's target has mode %v (%v), want 0640", fi.Mode(), err)
		}
		// A link to nothing is not written through, as in cp.
		dangling := filepath.Join(dir, "dangling")
		os.Symlink("nothing", dangling)
		cli.expect(1, "dangling", "get", "tgt/obj", dangling)
		if _, err := os.Lstat(filepath.Join(dir, "nothing")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a download through a dangling link made its target: %v", err)
		}
	})
	t.Run("modes", func(t *testing.T) {
		cli.t = t
		dir := t.TempDir()
		secret := filepath.Join(dir, "secret")
		if err := os.WriteFile(secret, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		cli.ok("get", "tgt/obj", secret)
		if fi, err := os.Stat(secret); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("an existing 0600 file became %v (%v)", fi.Mode(), err)
		}
		if b, _ := os.ReadFile(secret); !bytes.Equal(b, data) {
			t.Errorf("the existing file holds %d bytes, want %d", len(b), len(data))
		}
		// A new file is 0666 less the umask, which the binary inherits.
		for _, umask := range []int{0o027, 0o002} {
			old := syscall.Umask(umask)
			name := filepath.Join(dir, fmt.Sprintf("new-%03o", umask))
			cli.ok("get", "tgt/obj", name)
			syscall.Umask(old)
			if fi, err := os.Stat(name); err != nil || fi.Mode().Perm() != fs.FileMode(0o666&^umask) {
				t.Errorf("umask %03o: a new file has mode %v (%v), want %v", umask, fi.Mode(), err, fs.FileMode(0o666&^umask))
			}
		}
		// No temporary file is left behind.
		ents, _ := os.ReadDir(dir)
		if len(ents) != 3 {
			t.Errorf("%d files in the directory, want 3", len(ents))
		}
	})
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, _, err := run(t, args...)
		if err != nil || out != version()+"\n" || !strings.HasPrefix(out, "osprey ") || !strings.Contains(out, runtime.Version()) {
			t.Errorf("osprey %s: %q, %v", args[0], out, err)
		}
	}
}

// TestNotFoundAndMultipartStat: error lines name what was not found, not
// the layers below; stat shows a multipart object's real CRC32C.
func TestNotFoundAndMultipartStat(t *testing.T) {
	seeds := startTestCluster(t)
	t.Chdir(t.TempDir())
	for _, c := range []struct {
		args []string
		line string
		is   error
	}{
		{[]string{"stat", "nobucket/k"}, "osprey: NoSuchBucket: osprey://nobucket/k", client.ErrNoSuchBucket},
		{[]string{"ls", "nobucket"}, "osprey: NoSuchBucket: osprey://nobucket", client.ErrNoSuchBucket},
		{[]string{"mb", "bkt"}, "", nil},
		{[]string{"stat", "bkt/nope"}, "osprey: NoSuchKey: osprey://bkt/nope", client.ErrNoSuchKey},
		{[]string{"get", "bkt/nope", "-"}, "osprey: NoSuchKey: osprey://bkt/nope", client.ErrNoSuchKey},
	} {
		_, errOut, err := run(t, append(c.args, "--seeds", seeds)...)
		if c.is == nil {
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		got := errorLine(err)
		if got == "" { // printed already (several-argument commands)
			got = strings.TrimSpace(errOut)
		}
		if got != c.line || exitCode(err) != exitNotFound || !errors.Is(err, c.is) {
			t.Errorf("osprey %s: %q (exit %d), want %q (exit %d)", strings.Join(c.args, " "), got, exitCode(err), c.line, exitNotFound)
		}
	}

	data := bytes.Repeat([]byte("osprey multipart "), 11<<20/17)
	if err := os.WriteFile("big", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "put", "big", "bkt/big", "--part-size", "5MiB", "--seeds", seeds); err != nil {
		t.Fatal(err)
	}
	crc := fmt.Sprintf("%08x", crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	out, _, err := run(t, "stat", "bkt/big", "--seeds", seeds)
	if err != nil || !strings.Contains(out, "CRC32C   : "+crc+"\n") || !strings.Contains(out, "-3\n") {
		t.Errorf("stat of a 3-part object: %v\n%s\nwant CRC32C %s", err, out, crc)
	}
	out, _, err = run(t, "ls", "--json", "bkt", "--seeds", seeds)
	if err != nil || !strings.Contains(out, `"crc32c":"`+crc+`"`) {
		t.Errorf("ls --json: %v\n%s\nwant crc32c %s", err, out, crc)
	}
}

// TestBenchObjCleanup: bench obj against a running cluster deletes what
// it wrote unless --no-cleanup: the bucket it made, or in a bucket that
// was there only the keys it added.
func TestBenchObjCleanup(t *testing.T) {
	seeds := startTestCluster(t)
	cl := testClient(t, seeds)
	ctx := context.Background()
	// bench runs a short put row. On a loaded machine a 100 ms row can
	// end before its first put does: such a run wrote nothing to clean
	// up or keep, so it runs again, until a deadline.
	bench := func(size string, more ...string) string {
		t.Helper()
		args := append([]string{"bench", "obj", "--seeds", seeds, "--size", size, "--op", "put", "--concurrency", "2",
			"--duration", "100ms", "--segment", "25ms", "--json"}, more...)
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, errOut, err := run(t, args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			rows := parseJSONLines(t, out)
			if len(rows) != 1 {
				t.Fatalf("bench obj printed %d rows: %s", len(rows), out)
			}
			if rows[0]["ops"].(float64) > 0 {
				return errOut
			}
			if time.Now().After(deadline) {
				t.Fatalf("bench obj wrote nothing in any run for 30 s: %s", out)
			}
		}
	}
	keys := func() []string {
		t.Helper()
		var ks []string
		for info, err := range cl.ListObjects(ctx, "osprey-bench", client.ListOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			ks = append(ks, info.Key)
		}
		return ks
	}

	bench("4KiB")
	if ok, err := cl.BucketExists(ctx, "osprey-bench"); ok || err != nil {
		t.Fatalf("after a run the bucket exists (%v, %v)", ok, err)
	}

	if errOut := bench("4KiB", "--no-cleanup"); !strings.Contains(errOut, "kept the benchmark's objects in osprey://osprey-bench") {
		t.Errorf("--no-cleanup says %q", errOut)
	}
	if ok, err := cl.BucketExists(ctx, "osprey-bench"); !ok || err != nil || len(keys()) == 0 {
		t.Fatalf("--no-cleanup left no objects (%v, %v)", ok, err)
	}
	if _, err := cl.PutObject(ctx, "osprey-bench", "mine", strings.NewReader("x"), 1, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before := keys()
	bench("8KiB") // keys of their own, beside the 4 KiB ones
	if after := keys(); !slices.Equal(after, before) {
		t.Errorf("in a bucket that existed, a run left %d keys, want the %d there before", len(after), len(before))
	}
}

// TestBenchQuietByDefault: the bench's own cluster, and its rows, log
// warnings only unless --log-level is given.
func TestBenchQuietByDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	args := []string{"bench", "obj", "--osds", "1", "--size", "4KiB", "--op", "put", "--concurrency", "2",
		"--duration", "50ms", "--segment", "25ms"}
	out, errOut, err := run(t, args...)
	if err != nil || !strings.Contains(out, "put") || strings.Contains(errOut, "level=INFO") {
		t.Errorf("bench obj: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	_, errOut, err = run(t, append(args, "--log-level", "info")...)
	if err != nil || !strings.Contains(errOut, "bench: row done") {
		t.Errorf("bench obj --log-level info: %v, stderr lacks the rows' info lines:\n%s", err, errOut)
	}
}
