package mon

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

func numOSDs(mp *placement.Map) int { return len(mp.Proto().Osds) }

// TestOSDCreateLeavesNoGhost: an auth command never puts an OSD in the
// map, and "osd create" adds the OSD and its entity osd.N together or not
// at all, as Ceph's "osd new" refuses an osd.N that exists with another
// key. An operator's "auth add osd.0" with caps that are not an OSD's
// makes the next new OSD's create fail with EntityAlreadyExists and leave
// the map as it was (it once left a down, out osd.0 at the placeholder
// address that no daemon could boot as); once the entity is gone the
// create works. An osd.N made ahead with an OSD's caps is the new OSD's
// keyring. A created OSD that never booted shows so in "osd tree", "osd
// rm" removes it, and its daemon started again boots as it.
func TestOSDCreateLeavesNoGhost(t *testing.T) {
	m := startAuthMon(t)
	ctx := ctxFor(t, 30*time.Second)
	admin := authClient(t, m.Addr(), keyringOf(t, m, "client.admin", AdminCaps))
	bootstrap := authClient(t, m.Addr(), keyringOf(t, m, "client.bootstrap-osd", BootstrapOSDCaps))

	tree := func() []OSDTreeEntry {
		t.Helper()
		var out []OSDTreeEntry
		if err := json.Unmarshal([]byte(mustCommand(t, admin, &osdpb.MonCommand{Prefix: "osd tree"}).Output), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}

	// auth add of osd.0, the id the next OSD would get: the map is
	// untouched.
	epoch := m.Map().Epoch()
	mustCommand(t, admin, authCmd("auth add", "osd.0", map[string]string{"osd": "allow *"}))
	if got := m.Map().Epoch(); got != epoch || numOSDs(m.Map()) != 0 {
		t.Fatalf("auth add osd.0 changed the map: epoch %d (was %d), %d OSDs", got, epoch, numOSDs(m.Map()))
	}

	// A new OSD's create is refused, and writes nothing: no osd.0 in the
	// map, at the mon or in etcd; a retry (the OSD started again) too.
	for try := range 2 {
		_, err := bootstrap.Command(ctx, &osdpb.MonCommand{Prefix: "osd create", Uuid: "uuid-0"})
		cur, _, cerr := m.store.current(ctx)
		if cerr != nil {
			t.Fatal(cerr)
		}
		if got := m.Map().Epoch(); got != epoch || cur.Epoch() != epoch || numOSDs(cur) != 0 || len(tree()) != 0 {
			t.Fatalf("try %d: a refused osd create (%v) changed the map: epoch %d (etcd %d, was %d), tree %+v", try, err, got, cur.Epoch(), epoch, tree())
		}
		if statusOf(err) != osdpb.Status_ENTITY_EXISTS || !strings.Contains(err.Error(), "osprey auth rm osd.0") {
			t.Fatalf("try %d: osd create with a foreign osd.0 in auth: %v, want EntityAlreadyExists naming auth rm osd.0", try, err)
		}
	}
	rec, _, err := m.auth.get(ctx, "osd.0")
	if err != nil || rec == nil || rec.Caps["osd"] != "allow *" {
		t.Fatalf("the operator's osd.0 after the refused create: %v %v", rec, err)
	}

	// Once the operator removes it, the OSD gets id 0 and a keyring of
	// its own.
	mustCommand(t, admin, authCmd("auth rm", "osd.0", nil))
	rep0 := mustCommand(t, bootstrap, &osdpb.MonCommand{Prefix: "osd create", Uuid: "uuid-0"})
	if k := mustKeyring(t, rep0); rep0.Ids[0] != 0 || k.Entity != "osd.0" {
		t.Fatalf("osd create after auth rm osd.0: id %v, %s's keyring", rep0.Ids, k.Entity)
	}

	// osd.1 made ahead with an OSD's caps is what the next OSD gets.
	ahead := mustKeyring(t, mustCommand(t, admin, authCmd("auth get-or-create", "osd.1", OSDCaps)))
	rep := mustCommand(t, bootstrap, &osdpb.MonCommand{Prefix: "osd create", Uuid: "uuid-1"})
	if k := mustKeyring(t, rep); rep.Ids[0] != 1 || !k.Cert.Equal(ahead.Cert) {
		t.Fatalf("osd create with osd.1 made ahead: id %v, %s's keyring (the one made ahead: %v)", rep.Ids, k.Entity, k.Cert.Equal(ahead.Cert))
	}
	// A data directory of another cluster, its keyring lost, started with
	// this cluster's bootstrap key: refused before anything is made.
	epoch = m.Map().Epoch()
	if _, err := bootstrap.Command(ctx, &osdpb.MonCommand{Prefix: "osd create", Uuid: "uuid-other", Fsid: "another-fsid"}); statusOf(err) != osdpb.Status_WRONG_CLUSTER || !strings.Contains(err.Error(), "another-fsid") {
		t.Fatalf("osd create of another cluster's OSD: %v, want WrongCluster", err)
	}
	if got := m.Map().Epoch(); got != epoch || numOSDs(m.Map()) != 2 {
		t.Fatalf("a refused osd create of another cluster's OSD changed the map: epoch %d (was %d), %d OSDs", got, epoch, numOSDs(m.Map()))
	}
	// Its own fsid is this cluster's: as before.
	if rep := mustCommand(t, bootstrap, &osdpb.MonCommand{Prefix: "osd create", Uuid: "uuid-1", Fsid: m.Map().FSID()}); rep.Ids[0] != 1 {
		t.Fatalf("osd create with this cluster's fsid: id %v", rep.Ids)
	}
	// A repeat of a create (the OSD crashed before keeping its id) gets
	// the same id and keyring.
	again := mustCommand(t, bootstrap, &osdpb.MonCommand{Prefix: "osd create", Uuid: "uuid-1"})
	if again.Ids[0] != 1 || !bytes.Equal(again.Keyring, rep.Keyring) {
		t.Fatalf("a repeated osd create: id %v, same keyring %v", again.Ids, bytes.Equal(again.Keyring, rep.Keyring))
	}

	// Neither booted: osd tree says so rather than show an address, and
	// osd rm removes them.
	got := tree()
	if len(got) != 2 {
		t.Fatalf("osd tree: %+v, want osd.0 and osd.1", got)
	}
	for _, o := range got {
		if !o.NeverBooted || o.Up || o.In || o.PublicAddr != "" || o.ClusterAddr != "" {
			t.Fatalf("osd tree entry of a never-booted OSD: %+v", o)
		}
	}
	mustCommand(t, admin, &osdpb.MonCommand{Prefix: "osd rm", Ids: []uint32{0}})
	if got := tree(); len(got) != 1 || got[0].ID != 1 {
		t.Fatalf("osd tree after osd rm 0: %+v", got)
	}
	// Its entity went with it (Ceph's osd purge): the next OSD to get id 0
	// gets a key of its own, not the removed one's.
	if rec, _, err := m.auth.get(ctx, "osd.0"); err != nil || rec != nil {
		t.Fatalf("osd.0 entity after osd rm 0: %v %v", rec.GetEntity(), err)
	}
	removed := rep0
	rep0 = mustCommand(t, bootstrap, &osdpb.MonCommand{Prefix: "osd create", Uuid: "uuid-0b"})
	if k := mustKeyring(t, rep0); rep0.Ids[0] != 0 || k.Cert.Equal(mustKeyring(t, removed).Cert) {
		t.Fatalf("osd create after osd rm 0: id %v, the removed OSD's key again: %v", rep0.Ids, k.Cert.Equal(mustKeyring(t, removed).Cert))
	}
	// osd.1's daemon, started again, boots as it: it has addresses now.
	b := bootOf(1)
	b.HasId, b.Id = true, 1
	mustBoot(t, authClient(t, m.Addr(), mustKeyring(t, rep)), b)
	if got := tree(); len(got) != 2 || got[1].NeverBooted || !got[1].Up || got[1].PublicAddr != b.PublicAddr {
		t.Fatalf("osd tree after osd.1 booted: %+v", got)
	}
}
