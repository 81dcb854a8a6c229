package main

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestPGRepairCLI: a replica's copy changed under CRCs of its own; the
// PG's deep scrub (osprey pg deep-scrub) finds it inconsistent, the mon's
// health turns HEALTH_ERR (PG_DAMAGED), osprey pg list-inconsistent shows
// each copy, and osprey pg repair makes the copies agree: health returns
// to HEALTH_OK and nothing is listed.
func TestPGRepairCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc, m := monCluster(t, 3, 3)
	cli := mustCLI(t, m)
	body := osdtest.Payload(100_000, 3)
	file := filepath.Join(t.TempDir(), "obj")
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	cli("mb", "scrub")
	cli("put", file, "scrub/obj")
	mp := lc.OSDs[0].Map()
	pool, _ := mp.PoolByName(placement.DefaultPoolName)
	pgid := placement.PGID{Pool: pool.Id, Seed: placement.PGOf(pool, "scrub", "obj")}
	sid, err := pgid.StoreID()
	if err != nil {
		t.Fatal(err)
	}
	acting := mp.ActingSet(pgid.Pool, pgid.Seed)
	replica := lc.OSDs[acting[1]]
	ctx := t.Context()
	meta, v, err := replica.Store().HeadVersion(ctx, "scrub", "obj")
	if err != nil {
		t.Fatal(err)
	}
	changed := slices.Clone(body)
	changed[500] ^= 1
	meta.Crc32C = crc32.Checksum(changed, crc32.MakeTable(crc32.Castagnoli))
	if err := replica.Store().InstallObject(ctx, sid, &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Bucket: "scrub", Key: "obj", Meta: meta, Version: v}, changed); err != nil {
		t.Fatal(err)
	}

	health := func(want, line string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			out := cli("status")
			if strings.Contains(out, want) && strings.Contains(out, line) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("status never showed %s %q:\n%s", want, line, out)
			}
			time.Sleep(100 * time.Millisecond) // polls the mon's view, beaconed every second
		}
	}
	health("HEALTH_OK", "")
	cli("pg", "deep-scrub", pgid.String())
	health("HEALTH_ERR", "Possible data damage: 1 pgs inconsistent")

	var rep inconsistentOut
	if err := json.Unmarshal([]byte(cli("pg", "list-inconsistent", pgid.String(), "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.PG != pgid.String() || len(rep.Inconsistents) != 1 {
		t.Fatalf("list-inconsistent: %+v", rep)
	}
	obj := rep.Inconsistents[0]
	if obj.Bucket != "scrub" || obj.Key != "obj" || !slices.Equal(obj.Errors, []string{"data_digest_mismatch"}) || len(obj.Shards) != 3 {
		t.Fatalf("listed object: %+v", obj)
	}
	for i, sh := range obj.Shards {
		bad := sh.OSD == acting[1]
		if sh.OSD != acting[i] || sh.Authoritative != (i == 0) || (len(sh.Errors) > 0) != bad || sh.Size != uint64(len(body)) ||
			sh.Version != versionString(v) {
			t.Fatalf("shard %d: %+v", i, sh)
		}
	}
	text := cli("pg", "list-inconsistent", pgid.String())
	if !strings.Contains(text, "scrub/obj: data_digest_mismatch") || !strings.Contains(text, "authoritative") {
		t.Fatalf("list-inconsistent text:\n%s", text)
	}

	// Admins only: an entity that may read everything may not list or repair.
	roPath := filepath.Join(t.TempDir(), "ro.keyring")
	cli("auth", "get-or-create", "client.ro", "mon", "allow r", "osd", "allow r", "-o", roPath)
	for _, cmd := range []string{"repair", "list-inconsistent"} {
		_, _, err := run(t, "pg", cmd, pgid.String(), "--mon", lc.Mon.Addr(), "--keyring", roPath)
		if err == nil || !strings.Contains(err.Error(), "admins only") {
			t.Fatalf("pg %s as client.ro: %v; want admins only", cmd, err)
		}
	}

	// A PG or OSD that is not in the map is the caller's mistake, said
	// so, not an outage (exit 4).
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pg", "deep-scrub", fmt.Sprintf("%d.8", pool.Id)}, fmt.Sprintf("no pg %d.8: pool %d has 8 PGs", pool.Id, pool.Id)},
		{[]string{"pg", "repair", fmt.Sprintf("%d.1f", pool.Id)}, fmt.Sprintf("no pg %d.1f", pool.Id)},
		{[]string{"pg", "list-inconsistent", fmt.Sprintf("%d.8", pool.Id)}, fmt.Sprintf("no pg %d.8", pool.Id)},
		{[]string{"osd", "deep-scrub", "9"}, "no osd.9 in the map"},
	} {
		_, _, err := run(t, append(c.args, m...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err) == exitUnavailable {
			t.Fatalf("osprey %s: %v (exit %d); want %q, not unavailable", strings.Join(c.args, " "), err, exitCode(err), c.want)
		}
	}

	if out := cli("pg", "repair", pgid.String()); !strings.Contains(out, "1 inconsistent objects, 1 repaired") {
		t.Fatalf("repair: %s", out)
	}
	health("HEALTH_OK", "")
	// A clean result still says when it was scrubbed: rados tells "never
	// scrubbed" from clean, and so does this.
	if out := cli("pg", "list-inconsistent", pgid.String()); !strings.Contains(out, "no inconsistent objects (scrubbed ") {
		t.Fatalf("list-inconsistent after the repair:\n%s", out)
	}
	if _, got, err := replica.Store().ReadRange(ctx, "scrub", "obj", 0, -1, nil); err != nil || !slices.Equal(got, body) {
		t.Fatalf("the replica's copy after the repair: %v", err)
	}

	// Every copy of an object in data files of its own damaged: nothing
	// to repair it from. The command says so and exits 1, not 0.
	big := osdtest.Payload(300<<10, 9)
	if err := os.WriteFile(file, big, 0o600); err != nil {
		t.Fatal(err)
	}
	cli("put", file, "scrub/big")
	bigPG := placement.PGID{Pool: pool.Id, Seed: placement.PGOf(pool, "scrub", "big")}
	for _, id := range mp.ActingSet(bigPG.Pool, bigPG.Seed) {
		osdtest.DamageDataFiles(t, filepath.Join(lc.Dir, fmt.Sprintf("osd.%d", id)), big, 5000)
	}
	out, _, err := run(t, append([]string{"pg", "repair", bigPG.String()}, m...)...)
	if err == nil || exitCode(err) != exitError || !strings.Contains(err.Error(), "1 inconsistent objects could not be repaired") ||
		!strings.Contains(out, "1 inconsistent objects, 0 repaired") {
		t.Fatalf("repair with every copy damaged: %v (exit %d)\n%s", err, exitCode(err), out)
	}
}

// TestPrintInconsistentDeleted: a copy a logged delete stands for is
// shown as deleted at the delete's version, in text and JSON; a plain
// missing copy as missing, with no version.
func TestPrintInconsistentDeleted(t *testing.T) {
	r := &client.InconsistentPG{Scrubbed: time.Unix(1, 0), Objects: []*osdpb.InconsistentObject{{
		Bucket: "b", Key: "k", Errors: []string{"stale_version"},
		Shards: []*osdpb.ScrubShard{
			{Osd: 4, Missing: true, Authoritative: true, Version: &osdpb.Version{Epoch: 3, Seq: 9}},
			{Osd: 1, Missing: true},
			{Osd: 7, Version: &osdpb.Version{Epoch: 3, Seq: 2}, Size: 10, Errors: []string{"stale_version"}},
		},
	}}}
	pg := placement.PGID{Pool: 1, Seed: 2}
	var sb strings.Builder
	printInconsistent(&sb, pg, r)
	for _, want := range []string{"osd.4   deleted at 3.9  authoritative\n", "osd.1   missing\n", "osd.7   version 3.2  size 10  crc32c 0x00000000  stale_version\n"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, sb.String())
		}
	}
	out := inconsistentJSON(pg, r)
	if sh := out.Inconsistents[0].Shards; sh[0].Version != "3.9" || !sh[0].Missing || sh[1].Version != "" {
		t.Errorf("JSON shards: %+v; want the deleted one at 3.9, the missing one with no version", sh)
	}
}

// TestPrintInconsistentNeverScrubbed: a PG no deep scrub compared yet
// does not read as clean.
func TestPrintInconsistentNeverScrubbed(t *testing.T) {
	pg := placement.PGID{Pool: 1, Seed: 2}
	var never, clean strings.Builder
	printInconsistent(&never, pg, &client.InconsistentPG{})
	printInconsistent(&clean, pg, &client.InconsistentPG{Scrubbed: time.Unix(1, 0), Epoch: 7})
	if !strings.Contains(never.String(), "no deep scrub has compared its copies yet") {
		t.Errorf("never scrubbed: %q", never.String())
	}
	// The meta PG's copies are never compared: no advice to scrub it.
	var meta strings.Builder
	printInconsistent(&meta, placement.PGID{Pool: 1, Seed: placement.MetaPG}, &client.InconsistentPG{})
	if s := meta.String(); strings.Contains(s, "deep-scrub") || !strings.Contains(s, "not compared") {
		t.Errorf("the meta PG: %q", s)
	}
	if want := "pg 1.2: no inconsistent objects (scrubbed 1970-01-01T00:00:01Z, epoch 7)\n"; clean.String() != want {
		t.Errorf("clean: %q, want %q", clean.String(), want)
	}
	if out := inconsistentJSON(pg, &client.InconsistentPG{}); out.Scrubbed != "" || out.Epoch != 0 || out.Inconsistents == nil {
		t.Errorf("never scrubbed, JSON: %+v", out)
	}
}
