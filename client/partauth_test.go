package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestPartsAreTheirBuckets: a multipart object's parts, and an upload's in
// progress, are read only by readers of their bucket, through real OSDs
// with auth on. Another tenant that holds the upload id reads, heads and
// lists none of them, nor reaches them through a manifest of its own; a
// reader whose caps on the bucket are taken away reads none any more,
// though the object's head named them.
func TestPartsAreTheirBuckets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := osdtest.StartLocal(t, local.Options{OSDs: 2, Replicas: 2, PGs: 8, WithMon: true, Dir: t.TempDir(), Logger: quiet})
	connect := func(k *auth.Keyring) *client.Client {
		t.Helper()
		cl, err := client.New(ctx, client.Options{Mon: []string{c.Mon.Addr()}, Keyring: k, Logger: quiet, RetryFor: 2 * time.Second, OpTimeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("%s: %v", k.Entity, err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	user := func(entity, osdCaps string) *client.Client {
		t.Helper()
		return connect(osdtest.Keyring(t, c, entity, map[string]string{"mon": "allow r", "osd": osdCaps}))
	}
	admin := connect(c.AdminKeyring)
	for _, b := range []string{"photos", "other"} {
		if err := admin.MakeBucket(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	owner := user("client.owner", "allow rw bucket=photos")
	reader := user("client.reader", "allow r bucket=photos")
	tenant := user("client.tenant", "allow rw bucket=other")

	body := bytes.Repeat([]byte("part"), 256)
	upload := func(key string, complete bool) string {
		t.Helper()
		id, err := owner.NewMultipartUpload(ctx, "photos", key, client.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := owner.PutObjectPart(ctx, "photos", key, id, 1, bytes.NewReader(body), int64(len(body)))
		if err != nil {
			t.Fatal(err)
		}
		if complete {
			if _, err := owner.CompleteMultipartUpload(ctx, "photos", key, id, []client.CompletePart{{PartNumber: 1, ETag: p.ETag}}); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	done, wip := upload("big", true), upload("wip", false)

	readable := func(cl *client.Client, id string) error {
		got, err := client.GetHidden(ctx, cl, ops.PartKey(id, 1))
		if err == nil && !bytes.Equal(got, body) {
			t.Fatalf("part of %s: %d bytes, not the %d put", id, len(got), len(body))
		}
		return err
	}
	list := func(cl *client.Client, id string) (n int, err error) {
		for _, err := range client.ListHiddenUnder(ctx, cl, id+"/") {
			if err != nil {
				return n, err
			}
			n++
		}
		return n, nil
	}
	listed := func(cl *client.Client, id string) int {
		t.Helper()
		n, err := list(cl, id)
		if err != nil {
			t.Fatalf("listing %s/: %v", id, err)
		}
		return n
	}
	for _, id := range []string{done, wip} {
		for _, cl := range []*client.Client{owner, reader} {
			if err := readable(cl, id); err != nil {
				t.Fatalf("a reader of photos reads part 1 of %s: %v", id, err)
			}
			if n := listed(cl, id); n != 1 {
				t.Fatalf("a reader of photos lists %d parts of %s, want 1", n, id)
			}
		}
		if err := readable(tenant, id); !errors.Is(err, ops.ErrAccessDenied) {
			t.Fatalf("another tenant reads part 1 of %s by its id: %v, want AccessDenied", id, err)
		}
		if err := client.HeadHidden(ctx, tenant, ops.PartKey(id, 1)); !errors.Is(err, ops.ErrAccessDenied) {
			t.Fatalf("another tenant heads part 1 of %s by its id: %v, want AccessDenied", id, err)
		}
		if n, err := list(tenant, id); n != 0 || !errors.Is(err, ops.ErrAccessDenied) {
			t.Fatalf("another tenant lists %d parts of %s (%v), want AccessDenied", n, id, err)
		}
	}

	// An upload id is a valid bucket name: caps on buckets whose names
	// it matches let a listing of "ID/" through as a bucket's, and its
	// parts must still be filtered out.
	lookalike := user("client.lookalike", "allow r bucket_prefix="+done[:1])
	if n := listed(lookalike, done); n != 0 {
		t.Fatalf("a reader of buckets named %s… lists %d parts of upload %s", done[:1], n, done)
	}

	// A manifest made by hand in the tenant's own bucket, naming the
	// owner's parts, is refused: it would serve them to the tenant, and
	// its overwrite would delete them. An admin may put one.
	parts := []string{ops.PartKey(done, 1)}
	if err := client.PutManifest(ctx, tenant, "other", "stolen", parts); !errors.Is(err, ops.ErrAccessDenied) {
		t.Fatalf("another tenant's manifest of photos' parts: %v, want AccessDenied", err)
	}
	if _, err := admin.StatObject(ctx, "other", "stolen"); !errors.Is(err, ops.ErrNoSuchKey) {
		t.Fatalf("other/stolen after the refusal: %v", err)
	}
	if err := client.PutManifest(ctx, admin, "other", "admins", parts); err != nil {
		t.Fatalf("an admin's manifest: %v", err)
	}

	// Revoked: client.reader's caps move to another bucket; once the
	// mon's push reaches the OSDs it reads no part of photos/big,
	// whose head it had.
	mc, err := monclient.New(ctx, monclient.Options{Addrs: []string{c.Mon.Addr()}, Keyring: c.AdminKeyring, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, err := mc.Command(ctx, &osdpb.MonCommand{Prefix: "auth caps", Entity: "client.reader",
		Caps: map[string]string{"mon": "allow r", "osd": "allow r bucket=other"}}); err != nil {
		t.Fatal(err)
	}
	for {
		err := readable(reader, done)
		if errors.Is(err, ops.ErrAccessDenied) {
			break
		}
		if err != nil {
			t.Fatalf("client.reader after its caps changed: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("client.reader still reads the parts of photos/big after losing its caps on photos")
		case <-time.After(20 * time.Millisecond): // polling interval
		}
	}
	// The owner still reads the object, and lists its upload's parts.
	o, err := owner.GetObject(ctx, "photos", "big", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(o)
	o.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("photos/big: %d bytes, %v", len(got), err)
	}
	if parts, err := owner.ListObjectParts(ctx, "photos", "wip", wip); err != nil || len(parts) != 1 {
		t.Fatalf("the owner's parts of wip: %v, %v", parts, err)
	}
}
