package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestClusterAuth runs a cluster with a mon and auth on (the default) and
// checks, end to end through real OSDs, who may do what: the capability
// matrix of a read-only, a one-bucket and an admin client; a client on
// the cluster network; a key from another CA; and a revoked key, refused
// at the OSD once the mon's push reaches it.
func TestClusterAuth(t *testing.T) {
	ctx, c, quiet := authCluster(t, 2, 2*time.Minute)
	if c.AdminKeyring == nil || c.AdminKeyring.Entity != "client.admin" {
		t.Fatalf("admin keyring: %v", c.AdminKeyring)
	}
	keyring := func(entity string, caps map[string]string) *auth.Keyring {
		t.Helper()
		pem, err := c.Mon.GetOrCreateKeyring(ctx, entity, caps)
		if err != nil {
			t.Fatal(err)
		}
		k, err := auth.ParseKeyring(pem)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	connect := func(k *auth.Keyring, seeds ...string) (*client.Client, error) {
		o := client.Options{Keyring: k, Logger: quiet, RetryFor: 2 * time.Second, OpTimeout: 5 * time.Second}
		if len(seeds) == 0 {
			o.Mon = []string{c.Mon.Addr()}
		} else {
			o.Seeds = seeds
		}
		cl, err := client.New(ctx, o)
		if err == nil {
			t.Cleanup(func() { cl.Close() })
		}
		return cl, err
	}
	mustConnect := func(k *auth.Keyring) *client.Client {
		t.Helper()
		cl, err := connect(k)
		if err != nil {
			t.Fatalf("%s: %v", k.Entity, err)
		}
		return cl
	}
	put := func(cl *client.Client, bucket, key string) error {
		_, err := cl.PutObject(ctx, bucket, key, bytes.NewReader([]byte("x")), 1, client.PutOptions{})
		return err
	}
	get := func(cl *client.Client, bucket, key string) error {
		o, err := cl.GetObject(ctx, bucket, key, client.GetOptions{})
		if err == nil {
			_, err = io.ReadAll(o)
			o.Close()
		}
		return err
	}

	admin := mustConnect(c.AdminKeyring)
	for _, b := range []string{"photos", "other"} {
		if err := admin.MakeBucket(ctx, b); err != nil {
			t.Fatal(err)
		}
		if err := put(admin, b, "a"); err != nil {
			t.Fatal(err)
		}
	}
	ro := mustConnect(keyring("client.ro", map[string]string{"mon": "allow r", "osd": "allow r"}))
	one := mustConnect(keyring("client.photos", map[string]string{"mon": "allow r", "osd": "allow rw bucket=photos"}))

	listBuckets := func(cl *client.Client) error { _, err := cl.ListBuckets(ctx); return err }
	for _, tc := range []struct {
		who  string
		cl   *client.Client
		what string
		op   func(*client.Client) error
		ok   bool
	}{
		{"admin", admin, "list buckets", listBuckets, true},
		{"admin", admin, "make a bucket", func(cl *client.Client) error { return cl.MakeBucket(ctx, "new") }, true},
		{"ro", ro, "list buckets", listBuckets, true},
		{"ro", ro, "get photos/a", func(cl *client.Client) error { return get(cl, "photos", "a") }, true},
		{"ro", ro, "put photos/b", func(cl *client.Client) error { return put(cl, "photos", "b") }, false},
		{"ro", ro, "delete other/a", func(cl *client.Client) error { return cl.RemoveObject(ctx, "other", "a") }, false},
		{"ro", ro, "make a bucket", func(cl *client.Client) error { return cl.MakeBucket(ctx, "ro-new") }, false},
		{"photos", one, "put photos/b", func(cl *client.Client) error { return put(cl, "photos", "b") }, true},
		{"photos", one, "get photos/a", func(cl *client.Client) error { return get(cl, "photos", "a") }, true},
		{"photos", one, "get other/a", func(cl *client.Client) error { return get(cl, "other", "a") }, false},
		{"photos", one, "put other/b", func(cl *client.Client) error { return put(cl, "other", "b") }, false},
		{"photos", one, "list buckets (photos alone)", func(cl *client.Client) error {
			bs, err := cl.ListBuckets(ctx)
			if err == nil && (len(bs) != 1 || bs[0].Name != "photos") {
				return fmt.Errorf("listed %v, want photos alone", bs)
			}
			return err
		}, true},
	} {
		err := tc.op(tc.cl)
		if tc.ok && err != nil {
			t.Errorf("%s may %s: %v", tc.who, tc.what, err)
		}
		if !tc.ok && !errors.Is(err, ops.ErrAccessDenied) {
			t.Errorf("%s may not %s: got %v, want AccessDenied", tc.who, tc.what, err)
		}
	}
	// What a refusal left behind: nothing.
	if err := get(admin, "photos", "b"); err != nil {
		t.Fatalf("photos/b, put by client.photos: %v", err)
	}
	if err := get(admin, "other", "b"); !errors.Is(err, ops.ErrNoSuchKey) {
		t.Fatalf("other/b, refused: %v", err)
	}

	// A client on the cluster network is refused, and says so.
	info, _ := c.Mon.Map().OSD(0)
	if _, err := connect(c.AdminKeyring, info.ClusterAddr); err == nil || !strings.Contains(err.Error(), "not allowed on the cluster network") {
		t.Fatalf("a client on the cluster network: %v", err)
	}
	// A key from another CA, for a name that exists here, is refused.
	other, err := auth.NewCA("elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.Issue("client.admin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := connect(forged, info.PublicAddr); err == nil || !errors.Is(err, msgr.ErrAuth) && !errors.Is(err, ops.ErrAccessDenied) {
		t.Fatalf("another CA's client.admin: %v", err)
	}

	// Revoked: after auth rm, the OSD refuses the key's next session once
	// the mon's push reaches it.
	gone := keyring("client.gone", map[string]string{"mon": "allow r", "osd": "allow r"})
	if cl, err := connect(gone, info.PublicAddr); err != nil {
		t.Fatalf("client.gone before rm: %v", err)
	} else {
		cl.Close()
	}
	mc, err := monclient.New(ctx, monclient.Options{Addrs: []string{c.Mon.Addr()}, Keyring: c.AdminKeyring, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, err := mc.Command(ctx, &osdpb.MonCommand{Prefix: "auth rm", Entity: "client.gone"}); err != nil {
		t.Fatal(err)
	}
	for {
		cl, err := connect(gone, info.PublicAddr)
		if err != nil {
			if !strings.Contains(err.Error(), "client.gone has no auth record") {
				t.Fatalf("client.gone after rm: %v", err)
			}
			break
		}
		cl.Close()
		select {
		case <-ctx.Done():
			t.Fatal("the OSD still takes client.gone's key after auth rm")
		case <-time.After(20 * time.Millisecond): // polling interval
		}
	}

	// Rotated: the sessions that authenticated with the old certificate
	// end (the OSD's and the mon's), so its next op fails, though checked
	// caps would still allow it.
	rot := mustConnect(keyring("client.rot", map[string]string{"mon": "allow r", "osd": "allow rw"}))
	if err := rot.MakeBucket(ctx, "rotated"); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.Command(ctx, &osdpb.MonCommand{Prefix: "auth rotate", Entity: "client.rot"}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := rot.StatObject(ctx, "rotated", "none")
		if err != nil && !errors.Is(err, client.ErrNoSuchKey) {
			if !strings.Contains(err.Error(), "reissued or removed") {
				t.Fatalf("client.rot's old session after auth rotate: %v", err)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("client.rot's session outlived auth rotate")
		case <-time.After(20 * time.Millisecond): // polling interval
		}
	}
}

// TestNewOSDWithoutAddressesTakesNoID: a new OSD (an empty data
// directory, the bootstrap key) started without addresses to listen on
// fails before the mon gives it an id, and leaves no never-booted OSD in
// the map; nor does one whose port another process holds.
func TestNewOSDWithoutAddressesTakesNoID(t *testing.T) {
	ctx, c, quiet := authCluster(t, 1, time.Minute)
	boot, err := auth.LoadKeyring(c.KeyringPath("client.bootstrap-osd"))
	if err != nil {
		t.Fatal(err)
	}
	before := c.Mon.Map()
	_, err = osd.Start(ctx, osd.Config{Mon: []string{c.Mon.Addr()}, Keyring: boot, DataDir: t.TempDir(), Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "a new OSD needs addresses to listen on (--public and --cluster)") {
		t.Fatalf("a new OSD without addresses: %v", err)
	}
	// Its port taken by another process: refused before the id too.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, err = osd.Start(ctx, osd.Config{Mon: []string{c.Mon.Addr()}, Keyring: boot, DataDir: t.TempDir(), Logger: quiet,
		PublicListen: "tcp://" + held.Addr().String(), ClusterListen: "tcp://127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "a new OSD cannot listen on tcp://"+held.Addr().String()) {
		t.Fatalf("a new OSD on a port in use: %v", err)
	}
	if n, m := len(slices.Collect(before.OSDs())), len(slices.Collect(c.Mon.Map().OSDs())); n != m || c.Mon.Map().Epoch() != before.Epoch() {
		t.Fatalf("the map went from %d OSDs (epoch %d) to %d (epoch %d)", n, before.Epoch(), m, c.Mon.Map().Epoch())
	}
}

// TestOSDTakesUpItsRotatedKey: `osprey auth rotate osd.1 -o DATA/keyring`
// on a running OSD. The cluster refuses the old key at once; the OSD reads
// the new file (auth.WatchKeyring) and its beacons, its peer's replication
// and clients' ops go on with the new key, with no restart and without
// being marked down.
func TestOSDTakesUpItsRotatedKey(t *testing.T) {
	ctx, c, quiet := authCluster(t, 2, 2*time.Minute)
	mc, err := monclient.New(ctx, monclient.Options{Addrs: []string{c.Mon.Addr()}, Keyring: c.AdminKeyring, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	cl, err := client.New(ctx, client.Options{Mon: []string{c.Mon.Addr()}, Keyring: c.AdminKeyring, Logger: quiet, OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.MakeBucket(ctx, "rotation"); err != nil {
		t.Fatal(err)
	}
	o := c.OSDs[1]
	before, _ := c.Mon.Map().OSD(o.ID())
	rep, err := mc.Command(ctx, &osdpb.MonCommand{Prefix: "auth rotate", Entity: ops.OSDName(o.ID())})
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.WriteKeyringFile(filepath.Join(c.Dir, fmt.Sprintf("osd.%d", o.ID()), "keyring"), rep.Keyring); err != nil {
		t.Fatal(err)
	}
	// The mon ends the old key's sessions within 2 s of its reply; a
	// beacon taken 3 s after the file was written came on a new session.
	written := time.Now()
	for {
		if age := o.Stats().BeaconAge; age >= 0 && time.Since(written)-age > 3*time.Second {
			break
		}
		select {
		case <-time.After(time.Until(written.Add(30 * time.Second))):
			t.Fatalf("osd.%d took no beacon in with its rotated key (beacon age %v)", o.ID(), o.Stats().BeaconAge)
		case <-time.After(50 * time.Millisecond): // polling interval
		}
	}
	for i := range 16 { // 8 PGs of two replicas: both OSDs lead some
		key := fmt.Sprintf("k%d", i)
		if _, err := cl.PutObject(ctx, "rotation", key, bytes.NewReader([]byte(key)), int64(len(key)), client.PutOptions{}); err != nil {
			t.Fatalf("put %s after osd.%d's key was rotated: %v", key, o.ID(), err)
		}
	}
	if info, _ := c.Mon.Map().OSD(o.ID()); !info.GetUp() || info.GetUpFrom() != before.GetUpFrom() {
		t.Fatalf("osd.%d after its key was rotated: %v (up from epoch %d before)", o.ID(), info, before.GetUpFrom())
	}
}

// authCluster starts a cluster of osds OSDs with a mon and auth on (the
// default), each PG on every OSD, and a context that ends within limit;
// both end with the test, the cluster first. It skips under -short.
func authCluster(t *testing.T, osds int, limit time.Duration) (context.Context, *Cluster, *slog.Logger) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := Start(ctx, Options{OSDs: osds, Replicas: osds, PGs: 8, WithMon: true, Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return ctx, c, quiet
}
