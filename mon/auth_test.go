package mon

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

func authCmd(prefix, entity string, caps map[string]string) *osdpb.MonCommand {
	return &osdpb.MonCommand{Prefix: prefix, Entity: entity, Caps: caps}
}

func mustKeyring(t *testing.T, rep *osdpb.MonCommandReply) *auth.Keyring {
	t.Helper()
	k, err := auth.ParseKeyring(rep.Keyring)
	if err != nil {
		t.Fatalf("the keyring the mon gave: %v", err)
	}
	return k
}

// TestAuthCommands drives every auth command through a mon, on a leader
// and a standby sharing one etcd, as "osprey auth" does.
func TestAuthCommands(t *testing.T) {
	e := startTestEtcd(t)
	a := startTestMon(t, testConfig(e, "a"))
	b := startTestMon(t, testConfig(e, "b"))
	ca, cb := newTestClient(t, nil, a.Addr()), newTestClient(t, nil, b.Addr())
	rw := map[string]string{"mon": "allow r", "osd": "allow rw bucket=photos"}

	// Two mons issue at once on an empty store: they must agree on one CA.
	var wg sync.WaitGroup
	reps := make([]*osdpb.MonCommandReply, 2)
	for i, name := range []string{"client.x", "client.y"} {
		cl := []*monclient.Client{ca, cb}[i]
		wg.Go(func() {
			rep, err := cl.Command(ctxFor(t, 20*time.Second), authCmd("auth get-or-create", name, rw))
			if err != nil {
				t.Errorf("get-or-create %s: %v", name, err)
			}
			reps[i] = rep
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	kx, ky := mustKeyring(t, reps[0]), mustKeyring(t, reps[1])
	if !kx.CA.Equal(ky.CA) {
		t.Fatal("two mons issued keyrings under two CAs")
	}
	if kx.Entity != "client.x" || ky.Entity != "client.y" {
		t.Fatalf("keyrings of %s and %s", kx.Entity, ky.Entity)
	}
	if _, err := auth.Verify(ky.CA, kx.Cert, time.Now()); err != nil {
		t.Fatal(err)
	}

	// get-or-create again: the same keyring, not a new one.
	again := mustKeyring(t, mustCommand(t, cb, authCmd("auth get-or-create", "client.x", rw)))
	if !again.Cert.Equal(kx.Cert) {
		t.Fatal("get-or-create of an existing entity issued a new certificate")
	}
	got := mustCommand(t, ca, authCmd("auth get", "client.x", nil))
	if !mustKeyring(t, got).Cert.Equal(kx.Cert) {
		t.Fatal("auth get returned another certificate")
	}
	var entry AuthEntry
	if err := json.Unmarshal([]byte(got.Output), &entry); err != nil {
		t.Fatal(err)
	}
	if entry.Serial != auth.Serial(kx.Cert) || entry.Caps["osd"] != "allow rw bucket=photos" {
		t.Fatalf("auth get: %+v", entry)
	}

	for _, tc := range []struct {
		cmd  *osdpb.MonCommand
		want osdpb.Status
	}{
		{authCmd("auth add", "client.x", rw), osdpb.Status_ENTITY_EXISTS},
		{authCmd("auth get-or-create", "client.x", map[string]string{"osd": "allow *"}), osdpb.Status_ENTITY_EXISTS},
		{authCmd("auth get", "client.nobody", nil), osdpb.Status_NO_SUCH_ENTITY},
		{authCmd("auth rm", "client.nobody", nil), osdpb.Status_NO_SUCH_ENTITY},
		{authCmd("auth caps", "client.nobody", rw), osdpb.Status_NO_SUCH_ENTITY},
		{authCmd("auth get", "x", nil), osdpb.Status_INVALID_ARGUMENT},
		{authCmd("auth add", "client.z", map[string]string{"osd": "allow q"}), osdpb.Status_INVALID_ARGUMENT},
		{authCmd("auth add", "client.z", map[string]string{"mgr": "allow r"}), osdpb.Status_INVALID_ARGUMENT},
	} {
		_, err := ca.Command(ctxFor(t, 20*time.Second), tc.cmd)
		if got := statusOf(err); got != tc.want {
			t.Errorf("%s %s %v: %v (%v), want %v", tc.cmd.Prefix, tc.cmd.Entity, tc.cmd.Caps, got, err, tc.want)
		}
	}

	// caps replaces them; ls shows every entity, sorted, with no key.
	mustCommand(t, cb, authCmd("auth caps", "client.y", map[string]string{"osd": "allow r"}))
	ls := mustCommand(t, ca, authCmd("auth ls", "", nil))
	if strings.Contains(ls.Output, "PRIVATE KEY") || len(ls.Keyring) != 0 {
		t.Fatal("auth ls hands out keys")
	}
	var entries []AuthEntry
	if err := json.Unmarshal([]byte(ls.Output), &entries); err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[0].Entity != "client.x" || entries[1].Entity != "client.y" ||
		len(entries[1].Caps) != 1 || entries[1].Caps["osd"] != "allow r" {
		t.Fatalf("auth ls: %+v", entries)
	}

	// rm: gone, and made again it gets a new certificate.
	mustCommand(t, ca, authCmd("auth rm", "client.x", nil))
	if _, err := cb.Command(ctxFor(t, 20*time.Second), authCmd("auth get", "client.x", nil)); statusOf(err) != osdpb.Status_NO_SUCH_ENTITY {
		t.Fatalf("auth get after rm: %v", err)
	}
	fresh := mustKeyring(t, mustCommand(t, cb, authCmd("auth add", "client.x", rw)))
	if fresh.Cert.Equal(kx.Cert) {
		t.Fatal("an entity made again got its old certificate back")
	}
}

// TestAuthTablePushed: a subscriber that asks for the auth table gets it
// at once and again after every change, from whichever mon made it; the
// table never carries keys.
func TestAuthTablePushed(t *testing.T) {
	e := startTestEtcd(t)
	a := startTestMon(t, testConfig(e, "a"))
	b := startTestMon(t, testConfig(e, "b"))
	tables := make(chan *osdpb.AuthTable, 16)
	o := monclient.Options{Addrs: []string{a.Addr()}, Name: "client.sub", Logger: testLogger(), Timeout: 2 * time.Second,
		OnAuth: func(t *osdpb.AuthTable) { tables <- t }}
	sub, err := monclient.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := sub.Subscribe(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	next := func(what string, ok func(*osdpb.AuthTable) bool) *osdpb.AuthTable {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case tb := <-tables:
				if ok(tb) {
					return tb
				}
			case <-deadline:
				t.Fatalf("no auth table with %s", what)
			}
		}
	}
	first := next("no entities", func(tb *osdpb.AuthTable) bool { return len(tb.Entries) == 0 })

	// A change at the other mon reaches this subscriber.
	cb := newTestClient(t, nil, b.Addr())
	rep := mustCommand(t, cb, authCmd("auth add", "client.x", map[string]string{"osd": "allow r"}))
	k := mustKeyring(t, rep)
	tb := next("client.x", func(tb *osdpb.AuthTable) bool { return len(tb.Entries) == 1 })
	if e := tb.Entries[0]; e.Entity != "client.x" || e.Serial != auth.Serial(k.Cert) || e.Caps["osd"] != "allow r" || tb.Revision <= first.Revision {
		t.Fatalf("table after auth add: %v", tb)
	}
	if strings.Contains(tb.String(), "PRIVATE KEY") {
		t.Fatal("the auth table carries a key")
	}
	mustCommand(t, cb, authCmd("auth caps", "client.x", map[string]string{"osd": "allow rw"}))
	next("new caps", func(tb *osdpb.AuthTable) bool { return len(tb.Entries) == 1 && tb.Entries[0].Caps["osd"] == "allow rw" })
	mustCommand(t, cb, authCmd("auth rm", "client.x", nil))
	next("client.x removed", func(tb *osdpb.AuthTable) bool { return len(tb.Entries) == 0 })
}
