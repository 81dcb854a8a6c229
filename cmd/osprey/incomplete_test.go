package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestRmIncomplete: rm --incomplete aborts the multipart uploads older
// than --older-than (24h by default, so a fresh one stays), the users'
// unless --internal; --dry-run only lists them.
func TestRmIncomplete(t *testing.T) {
	seeds := startTestCluster(t)
	cl := testClient(t, seeds)
	ctx := t.Context()
	if err := cl.MakeBucket(ctx, "inc"); err != nil {
		t.Fatal(err)
	}
	id, err := cl.NewMultipartUpload(ctx, "inc", "dir/mp", client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PutObjectPart(ctx, "inc", "dir/mp", id, 1, bytes.NewReader([]byte("part")), 4); err != nil {
		t.Fatal(err)
	}
	rm := func(args ...string) string {
		t.Helper()
		out, errOut, err := run(t, append(append([]string{"rm", "--incomplete"}, args...), "--seeds", seeds)...)
		if err != nil {
			t.Fatalf("rm --incomplete %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	left := func() int {
		t.Helper()
		ups, err := cl.ListMultipartUploads(ctx, "inc", "")
		if err != nil {
			t.Fatal(err)
		}
		return len(ups)
	}
	for _, args := range [][]string{{"inc"}, {"--older-than", "0s", "--internal", "inc"}, {"--older-than", "0s", "inc/other"}} {
		if out := rm(args...); out != "" || left() != 1 {
			t.Fatalf("rm --incomplete %s: aborted %q, %d uploads left; want none aborted", strings.Join(args, " "), out, left())
		}
	}
	want := "abort: osprey://inc/dir/mp (upload " + id
	if out := rm("--older-than", "0s", "--dry-run", "inc/dir/"); !strings.HasPrefix(out, "(dryrun) "+want) || left() != 1 {
		t.Fatalf("--dry-run: %q, %d uploads left; want %q..., 1 left", out, left(), "(dryrun) "+want)
	}
	if out := rm("--older-than", "0s", "inc/dir/"); !strings.HasPrefix(out, want) || left() != 0 {
		t.Fatalf("rm --incomplete --older-than 0s: %q, %d uploads left; want %q..., none left", out, left(), want)
	}
	if _, _, err := run(t, "rm", "--internal", "inc", "--seeds", seeds); exitCode(err) != exitUsage {
		t.Fatalf("--internal without --incomplete: %v (exit %d), want a usage error", err, exitCode(err))
	}

	// A PUT in pieces stalled half-way is an internal upload: --internal
	// takes it, and so does rb --force, though ListMultipartUploads
	// shows neither.
	for _, cmd := range [][]string{{"rm", "--incomplete", "--internal", "--older-than", "0s", "inc"}, {"rb", "--force", "inc"}} {
		pr, pw := io.Pipe()
		put := make(chan error, 1)
		go func() {
			_, err := cl.PutObject(ctx, "inc", "whole", pr, 40<<20, client.PutOptions{PartSize: 5 << 20, WholeETag: true})
			put <- err
		}()
		if _, err := pw.Write(make([]byte, 10<<20)); err != nil {
			t.Fatal(err)
		}
		osdtest.Eventually(t, 30*time.Second, "the stalled PUT's internal upload", func() bool {
			ups, err := cl.AbortStaleUploads(ctx, "inc", client.StaleUploadOptions{Age: -1, All: true, DryRun: true})
			return err == nil && len(ups) == 1 && ups[0].Internal
		})
		out, errOut, err := run(t, append(cmd, "--seeds", seeds)...)
		if err != nil || !strings.Contains(out, "osprey://inc/whole") {
			t.Fatalf("%s: %v %q\n%s; want the internal upload aborted", strings.Join(cmd, " "), err, out, errOut)
		}
		pw.CloseWithError(io.ErrClosedPipe)
		if err := <-put; err == nil {
			t.Fatalf("%s: the stalled PUT succeeded", strings.Join(cmd, " "))
		}
	}
	if _, err := cl.StatBucket(ctx, "inc"); !errors.Is(err, client.ErrNoSuchBucket) {
		t.Fatalf("after rb --force: %v", err)
	}
}

// TestGC: gc removes the upload of a deleted bucket with its part, after
// --min-age, and --dry-run only reports it.
func TestGC(t *testing.T) {
	seeds := startTestCluster(t)
	cl := testClient(t, seeds)
	ctx := t.Context()
	if err := cl.MakeBucket(ctx, "gcd"); err != nil {
		t.Fatal(err)
	}
	id, err := cl.NewMultipartUpload(ctx, "gcd", "mp", client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PutObjectPart(ctx, "gcd", "mp", id, 1, bytes.NewReader([]byte("part")), 4); err != nil {
		t.Fatal(err)
	}
	if err := cl.RemoveBucket(ctx, "gcd"); err != nil {
		t.Fatal(err)
	}
	gc := func(args ...string) string {
		t.Helper()
		out, errOut, err := run(t, append(append([]string{"gc"}, args...), "--seeds", seeds)...)
		if err != nil {
			t.Fatalf("gc %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	none := "remove: 0 uploads of deleted buckets, 0 parts and pieces of nothing (0 B); kept 1 parts and pieces\n"
	if out := gc(); out != none {
		t.Fatalf("gc within --min-age: %q, want %q", out, none)
	}
	want := "remove: upload " + id + " of osprey://gcd/mp (initiated "
	sum := "remove: 1 uploads of deleted buckets, 1 parts and pieces of nothing (4 B); kept 0 parts and pieces\n"
	for _, dry := range []bool{true, false} {
		args, prefix := []string{"--min-age", "1ns"}, ""
		if dry {
			args, prefix = append(args, "--dry-run"), "(dryrun) "
		}
		out := gc(args...)
		if lines := strings.SplitAfter(out, "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], prefix+want) || lines[1] != prefix+sum {
			t.Fatalf("gc %s: %q, want %q... and %q", strings.Join(args, " "), out, prefix+want, prefix+sum)
		}
	}
	if out := gc("--min-age", "1ns", "--json"); !strings.Contains(out, `"op":"gc"`) || !strings.Contains(out, `"uploads":0`) {
		t.Fatalf("a second gc --json: %q, want nothing removed", out)
	}
	if _, _, err := run(t, "gc", "--min-age", "0s", "--seeds", seeds); exitCode(err) != exitUsage {
		t.Fatalf("--min-age 0s: %v (exit %d), want a usage error", err, exitCode(err))
	}
}
