package mon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// authClient is a monclient of the mon at addr, authenticated as k.
func authClient(t *testing.T, addr string, k *auth.Keyring) *monclient.Client {
	t.Helper()
	c, err := monclient.New(context.Background(), monclient.Options{Addrs: []string{addr}, Keyring: k,
		Logger: testLogger().With("test", "monclient"), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func keyringOf(t *testing.T, m *Mon, entity string, caps map[string]string) *auth.Keyring {
	t.Helper()
	pem, err := m.GetOrCreateKeyring(ctxFor(t, 10*time.Second), entity, caps)
	if err != nil {
		t.Fatal(err)
	}
	k, err := auth.ParseKeyring(pem)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func wantDenied(t *testing.T, err error, msg string) {
	t.Helper()
	if statusOf(err) != osdpb.Status_ACCESS_DENIED || !strings.Contains(err.Error(), msg) {
		t.Fatalf("got %v, want ACCESS_DENIED saying %q", err, msg)
	}
}

// TestMonAccess runs a mon with auth on (the default) and checks who may
// do what: sessions need a credential the mon's records name, and every
// request needs the caps for it.
func TestMonAccess(t *testing.T) {
	m := startAuthMon(t)
	admin := authClient(t, m.Addr(), keyringOf(t, m, "client.admin", AdminCaps))
	ro := authClient(t, m.Addr(), keyringOf(t, m, "client.ro", map[string]string{"mon": "allow r"}))
	ctx := ctxFor(t, 30*time.Second)

	// Reads need r; map changes w; auth commands x.
	for _, prefix := range monclient.ReadCommands {
		// The maintenance checks need an OSD, and this map has none: refused
		// as such, not for the caps.
		if _, err := ro.Command(ctx, &osdpb.MonCommand{Prefix: prefix}); err != nil &&
			!(strings.HasPrefix(prefix, "osd ") && statusOf(err) == osdpb.Status_INVALID_ARGUMENT) {
			t.Fatalf("%s with mon 'allow r': %v", prefix, err)
		}
	}
	if _, err := ro.Subscribe(ctx); err != nil {
		t.Fatalf("subscribe with mon 'allow r': %v", err)
	}
	// Every command that changes the map needs w: none may be a read.
	for _, prefix := range mutatingCommands {
		if slices.Contains(monclient.ReadCommands, prefix) {
			t.Errorf("%s is both a read and a map change", prefix)
		}
		c := &osdpb.MonCommand{Prefix: prefix, Ids: []uint32{0}, Ratio: 0.9, Weight: 1, Pool: "default", Var: "size", Val: "2"}
		if slices.Contains(flagCommands, prefix) {
			c.Var = "noout"
		}
		_, err := ro.Command(ctx, c)
		wantDenied(t, err, "client.ro may not run "+prefix)
	}
	_, err := ro.Command(ctx, &osdpb.MonCommand{Prefix: "osd set-full-ratio", Ratio: 0.9})
	wantDenied(t, err, "client.ro may not run osd set-full-ratio")
	_, err = ro.Command(ctx, authCmd("auth ls", "", nil))
	wantDenied(t, err, "client.ro may not run auth ls")
	if _, err := admin.Command(ctx, &osdpb.MonCommand{Prefix: "osd set-full-ratio", Ratio: 0.9}); err != nil {
		t.Fatalf("admin: %v", err)
	}

	// A client with no credential, one from another cluster's CA, and one
	// whose entity was removed are refused at the handshake, at once.
	none, err := monclient.New(ctx, monclient.Options{Addrs: []string{m.Addr()}, Logger: testLogger(), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	if _, err := none.Command(ctx, &osdpb.MonCommand{Prefix: "status"}); !errors.Is(err, msgr.ErrAuth) {
		t.Fatalf("no keyring: %v", err)
	}
	otherCA, err := auth.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := otherCA.Issue("client.admin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := authClient(t, m.Addr(), forged).Command(ctx, &osdpb.MonCommand{Prefix: "status"}); !errors.Is(err, msgr.ErrAuth) {
		t.Fatalf("another CA's client.admin: %v", err)
	}
	gone := keyringOf(t, m, "client.gone", map[string]string{"mon": "allow r"})
	mustCommand(t, admin, authCmd("auth rm", "client.gone", nil))
	if _, err := authClient(t, m.Addr(), gone).Command(ctx, &osdpb.MonCommand{Prefix: "status"}); !errors.Is(err, msgr.ErrAuth) || !strings.Contains(err.Error(), "no auth record") {
		t.Fatalf("removed entity: %v", err)
	}

	// A rotated key: the old keyring is refused from its next session on,
	// the new one works.
	rotating := keyringOf(t, m, "client.rot", map[string]string{"mon": "allow r"})
	held := authClient(t, m.Addr(), rotating)
	if _, err := held.Command(ctx, &osdpb.MonCommand{Prefix: "status"}); err != nil {
		t.Fatal(err)
	}
	rep, err := admin.Command(ctx, authCmd("auth rotate", "client.rot", nil))
	if err != nil {
		t.Fatal(err)
	}
	if fresh := mustKeyring(t, rep); fresh.Cert.Equal(rotating.Cert) {
		t.Fatal("auth rotate gave the same certificate")
	} else if _, err := authClient(t, m.Addr(), fresh).Command(ctx, &osdpb.MonCommand{Prefix: "status"}); err != nil {
		t.Fatalf("the rotated keyring: %v", err)
	}
	if _, err := authClient(t, m.Addr(), rotating).Command(ctx, &osdpb.MonCommand{Prefix: "status"}); !errors.Is(err, msgr.ErrAuth) || !strings.Contains(err.Error(), "reissued or removed") {
		t.Fatalf("the keyring before rotate: %v", err)
	}
	// The session it had up ends too: its next command authenticates
	// again, and cannot.
	eventually(t, 10*time.Second, "the rotated keyring's session ended", func() bool {
		_, err := held.Command(ctx, &osdpb.MonCommand{Prefix: "status"})
		return err != nil && strings.Contains(err.Error(), "reissued or removed")
	})
	// An admin that rotates its own key gets the new keyring: the session
	// its command came on ends only after the reply.
	self := authClient(t, m.Addr(), keyringOf(t, m, "client.self", map[string]string{"mon": "allow *"}))
	rep, err = self.Command(ctx, authCmd("auth rotate", "client.self", nil))
	if err != nil {
		t.Fatalf("auth rotate of its own key: %v", err)
	}
	if _, err := authClient(t, m.Addr(), mustKeyring(t, rep)).Command(ctx, &osdpb.MonCommand{Prefix: "status"}); err != nil {
		t.Fatalf("the keyring its own rotate gave: %v", err)
	}

	// A new OSD: its bootstrap key gets an id and the OSD's own keyring,
	// and nothing else.
	boot := authClient(t, m.Addr(), keyringOf(t, m, "client.bootstrap-osd", BootstrapOSDCaps))
	_, err = boot.Command(ctx, &osdpb.MonCommand{Prefix: "status"})
	wantDenied(t, err, "client.bootstrap-osd may not run status")
	rep, err = boot.Command(ctx, &osdpb.MonCommand{Prefix: "osd create", Uuid: "uuid-0"})
	if err != nil {
		t.Fatal(err)
	}
	k := mustKeyring(t, rep)
	if want := fmt.Sprintf("osd.%d", rep.Ids[0]); k.Entity != want {
		t.Fatalf("osd create gave %s's keyring, want %s", k.Entity, want)
	}
	// Map changes (w) do not make keys: osd create issues the OSD's key,
	// which reads and writes every object, so it needs x or the
	// bootstrap profile.
	operator := authClient(t, m.Addr(), keyringOf(t, m, "client.operator", map[string]string{"mon": "allow rw"}))
	_, err = operator.Command(ctx, &osdpb.MonCommand{Prefix: "osd create", Uuid: "uuid-operator"})
	wantDenied(t, err, "client.operator may not run osd create")
	// The OSD boots as itself, and not as another.
	osd0 := authClient(t, m.Addr(), k)
	b := bootOf(0)
	b.HasId, b.Id = true, rep.Ids[0]
	mustBoot(t, osd0, b)
	// Booted, its key is its own: a create of its uuid (no secret: the
	// map shows it) no longer hands the key out, to the bootstrap key nor
	// to an admin.
	for _, c := range []*monclient.Client{boot, admin} {
		rep, err := c.Command(ctx, &osdpb.MonCommand{Prefix: "osd create", Uuid: "uuid-0"})
		if statusOf(err) != osdpb.Status_ENTITY_EXISTS || len(rep.GetKeyring()) != 0 || !strings.Contains(err.Error(), "auth get osd.0") {
			t.Fatalf("osd create of a booted OSD's uuid: %v, %d bytes of keyring", err, len(rep.GetKeyring()))
		}
	}
	b1 := bootOf(1)
	b1.HasId, b1.Id = true, rep.Ids[0]+1
	_, err = osd0.Boot(ctx, b1)
	wantDenied(t, err, "osd.0 may not boot for osd.1")
	// A client may not boot an OSD at all.
	_, err = admin.Boot(ctx, b)
	wantDenied(t, err, "client.admin may not boot (needs mon 'allow profile osd')")
	// The OSD may read the auth table; a plain reader may not.
	if _, err := osd0.FetchAuth(ctx); err != nil {
		t.Fatalf("osd.0 fetching the auth table: %v", err)
	}
	_, err = ro.FetchAuth(ctx)
	wantDenied(t, err, "client.ro may not subscribe to the auth table")
}
