package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr/auth"
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
	// --json names the op as rb --force does for the uploads it aborts.
	var j struct {
		Op, Bucket, Key, UploadID string
		DryRun                    bool `json:"dry_run"`
	}
	out := rm("--older-than", "0s", "--dry-run", "--json", "inc/dir/")
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Op != "abort_upload" || j.Bucket != "inc" || j.Key != "dir/mp" || !j.DryRun {
		t.Fatalf("--dry-run --json: %q (%v), want op abort_upload of inc/dir/mp", out, err)
	}
	if out := rm("--older-than", "0s", "inc/dir/"); !strings.HasPrefix(out, want) || left() != 0 {
		t.Fatalf("rm --incomplete --older-than 0s: %q, %d uploads left; want %q..., none left", out, left(), want)
	}
	if _, _, err := run(t, "rm", "--internal", "inc", "--seeds", seeds); exitCode(err) != exitUsage {
		t.Fatalf("--internal without --incomplete: %v (exit %d), want a usage error", err, exitCode(err))
	}
	if _, _, err := run(t, "rm", "--incomplete", "nosuchbucket", "--seeds", seeds); exitCode(err) != exitNotFound || !strings.Contains(fmt.Sprint(err), "NoSuchBucket") {
		t.Fatalf("rm --incomplete of a missing bucket: %v (exit %d), want NoSuchBucket", err, exitCode(err))
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

// TestGC drives a user whose caps name its buckets (bucket_prefix=gc)
// through multipart as such a user may, and gc after it:
//   - an object above 64 MiB (in pieces) puts and reads back whole;
//   - an upload lists, with its parts; an abort succeeds, its part left
//     for gc (the user may not delete hidden objects);
//   - another entity, which may write the bucket but not read it, deletes
//     it with an upload in progress, which then stays (it could not list
//     the bucket's uploads to remove them).
//
// gc, run by an admin, removes that upload and both parts after
// --min-age, never the object's pieces; --dry-run only reports.
func TestGC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx := t.Context()
	c, admin := monCluster(t, 1, 1)
	user := func(name, caps string) *client.Client {
		t.Helper()
		path := filepath.Join(t.TempDir(), name+".keyring")
		if _, _, err := run(t, append([]string{"auth", "get-or-create", name, "mon", "allow r", "osd", caps, "-o", path}, admin...)...); err != nil {
			t.Fatal(err)
		}
		k, err := auth.LoadKeyring(path)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.New(ctx, client.Options{Mon: []string{c.Mon.Addr()}, Keyring: k, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	cl, wo := user("client.gc", "allow rw bucket_prefix=gc"), user("client.gcw", "allow w bucket=gcd")
	for _, b := range []string{"gcb", "gcd"} {
		if err := cl.MakeBucket(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	data := osdtest.Payload(65<<20+7, 3)
	if _, err := cl.PutObject(ctx, "gcb", "big", bytes.NewReader(data), int64(len(data)), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	o, err := cl.GetObject(ctx, "gcb", "big", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(o)
	o.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the user's object of 65 MiB read back: %d bytes, %v", len(got), err)
	}
	upload := func(key string) string {
		t.Helper()
		id, err := cl.NewMultipartUpload(ctx, "gcd", key, client.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.PutObjectPart(ctx, "gcd", key, id, 1, bytes.NewReader([]byte("part")), 4); err != nil {
			t.Fatal(err)
		}
		return id
	}
	id, aborted := upload("mp"), upload("ab")
	if ups, err := cl.ListMultipartUploads(ctx, "gcd", ""); err != nil || len(ups) != 2 {
		t.Fatalf("the user's uploads: %v %v", ups, err)
	}
	if parts, err := cl.ListObjectParts(ctx, "gcd", "mp", id); err != nil || len(parts) != 1 || parts[0].Size != 4 {
		t.Fatalf("the user's parts: %v %v", parts, err)
	}
	if err := cl.AbortMultipartUpload(ctx, "gcd", "ab", aborted); err != nil {
		t.Fatalf("the user's abort: %v", err)
	}
	if err := wo.RemoveBucket(ctx, "gcd"); err != nil {
		t.Fatal(err)
	}

	gc := func(args ...string) string {
		t.Helper()
		out, errOut, err := run(t, append(append([]string{"gc"}, args...), admin...)...)
		if err != nil {
			t.Fatalf("gc %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	summary := func(out string) (uploads, parts, bytes int) {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var v struct{ Uploads, Parts, Bytes int }
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
			t.Fatalf("gc --json: %q: %v", out, err)
		}
		return v.Uploads, v.Parts, v.Bytes
	}
	if u, p, _ := summary(gc("--json")); u != 0 || p != 0 {
		t.Fatalf("gc within --min-age removed %d uploads, %d parts", u, p)
	}
	want := "remove: upload " + id + " of osprey://gcd/mp (initiated "
	for _, dry := range []bool{true, false} {
		args, prefix := []string{"--min-age", "1ns"}, ""
		if dry {
			args, prefix = append(args, "--dry-run"), "(dryrun) "
		}
		out := gc(args...)
		if lines := strings.Split(out, "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], prefix+want) ||
			!strings.HasPrefix(lines[1], prefix+"remove: 1 uploads of deleted buckets, 2 parts and pieces of nothing (8 B); kept ") {
			t.Fatalf("gc %s: %q, want %q... and 1 upload, 2 parts", strings.Join(args, " "), out, prefix+want)
		}
	}
	if u, p, _ := summary(gc("--min-age", "1ns", "--json")); u != 0 || p != 0 {
		t.Fatalf("a second gc removed %d uploads, %d parts", u, p)
	}
	if o, err = cl.GetObject(ctx, "gcb", "big", client.GetOptions{}); err == nil {
		got, err = io.ReadAll(o)
		o.Close()
	}
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the object after gc: %d bytes, %v", len(got), err)
	}
	// An entity limited to some buckets may not sweep: it gets the
	// refusal and no summary, which a script reading stdout would take
	// for "nothing to remove".
	ro := filepath.Join(t.TempDir(), "ro.keyring")
	if _, _, err := run(t, append([]string{"auth", "get-or-create", "client.gcro", "mon", "allow r", "osd", "allow rw bucket_prefix=zz", "-o", ro}, admin...)...); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(t, "gc", "--json", "--mon", c.Mon.Addr(), "--keyring", ro); err == nil || strings.Contains(out, `"op":"gc"`) {
		t.Fatalf("gc as an entity of some buckets: %v, printing %q; want the refusal alone", err, out)
	}
	if _, _, err := run(t, append([]string{"gc", "--min-age", "0s"}, admin...)...); exitCode(err) != exitUsage {
		t.Fatalf("--min-age 0s: %v (exit %d), want a usage error", err, exitCode(err))
	}
}
