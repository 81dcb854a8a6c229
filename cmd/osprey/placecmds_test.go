package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/osd"
)

// TestPlacementCommands: osd map names the OSDs that hold an object,
// pg ls lists every PG and filters them, osd df shows each OSD's disk,
// all against one cluster with a mon.
func TestPlacementCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc, monArgs := monCluster(t, 4, 2)
	cli := func(args ...string) (string, error) {
		out, _, err := run(t, append(args, monArgs...)...)
		return out, err
	}
	if _, err := cli("mb", "maps"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("put", "-", "maps/a/b.txt"); err != nil {
		t.Fatal(err)
	}

	// osd map: JSON, text, and Ceph's BUCKET KEY form agree, and the
	// acting set's OSDs hold the object.
	out, err := cli("osd", "map", "maps/a/b.txt", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var loc struct {
		PGID    string   `json:"pgid"`
		Acting  []uint32 `json:"acting"`
		Primary int64    `json:"acting_primary"`
		Key     string   `json:"key"`
	}
	if err := json.Unmarshal([]byte(out), &loc); err != nil || len(loc.Acting) != 2 || loc.Primary != int64(loc.Acting[0]) || loc.Key != "a/b.txt" {
		t.Fatalf("osd map --json: %v %q", err, out)
	}
	for id, o := range lc.OSDs {
		_, err := o.Store().Head(t.Context(), "maps", "a/b.txt")
		if (err == nil) != slices.Contains(loc.Acting, uint32(id)) {
			t.Errorf("osd map says %v; osd.%d's store answers %v", loc.Acting, id, err)
		}
	}
	text, err := cli("osd", "map", "maps", "a/b.txt")
	want := regexp.MustCompile(`^osdmap e\d+ pool '\S+' \(\d+\) object 'maps/a/b.txt' -> pg ` + regexp.QuoteMeta(loc.PGID) + ` -> up \(\[\d,\d\], p\d\) acting \(\[\d,\d\], p\d\)\n$`)
	if err != nil || !want.MatchString(text) {
		t.Errorf("osd map maps a/b.txt: %v %q", err, text)
	}
	for _, bad := range [][]string{{"osd", "map", "maps"}, {"osd", "map", "Bad_Bucket/k"}} {
		if _, err := cli(bad...); exitCode(err) == exitOK {
			t.Errorf("%v: no error", bad)
		}
	}

	// pg ls: every PG once; --osd and a state filter narrow it.
	pgs := pgLsJSON(t, cli, "pg", "ls", "--json")
	if len(pgs) != 8 {
		t.Fatalf("pg ls: %d PGs, want 8", len(pgs))
	}
	byOSD := pgLsJSON(t, cli, "pg", "ls", "--json", "--osd", "3")
	want3 := slices.DeleteFunc(slices.Clone(pgs), func(p mon.PGStat) bool { return !slices.Contains(p.Acting, 3) && !slices.Contains(p.Up, 3) })
	if len(byOSD) != len(want3) || len(byOSD) == 0 || len(byOSD) == 8 {
		t.Errorf("pg ls --osd 3: %d PGs, want %d of 8", len(byOSD), len(want3))
	}
	if byName := pgLsJSON(t, cli, "pg", "ls", "--json", "--osd", "osd.3"); len(byName) != len(byOSD) {
		t.Errorf("pg ls --osd osd.3: %d PGs, --osd 3 %d", len(byName), len(byOSD))
	}
	if _, err := cli("pg", "ls", "laggy", "wait"); err != nil {
		t.Errorf("pg ls laggy wait (states status shows): %v", err)
	}
	// Every PG is active or, before its primary's first report, unknown,
	// once the new cluster's PGs have peered (a loaded host may show one
	// peering still).
	var got []mon.PGStat
	osdtest.Eventually(t, 30*time.Second, "every PG active or unknown", func() bool {
		got = pgLsJSON(t, cli, "pg", "ls", "--json", "unknown", "active")
		return len(got) == 8
	})
	if got := pgLsJSON(t, cli, "pg", "ls", "--json", "down", "recovering+degraded"); len(got) != 0 {
		t.Errorf("pg ls down recovering+degraded on a healthy cluster: %+v", got)
	}
	if out, err := cli("pg", "ls", "--primary", "0"); err != nil || !strings.Contains(out, "PG  ") || !regexp.MustCompile(`(?m)^\d+ pgs$`).MatchString(out) {
		t.Errorf("pg ls --primary 0: %v %q", err, out)
	}
	if _, err := cli("pg", "ls", "Active"); exitCode(err) != exitUsage {
		t.Errorf("pg ls Active: %v, want a usage error", err)
	}
	if _, err := cli("pg", "ls", "--request-id", strings.Repeat("ab", 16)); exitCode(err) != exitUsage {
		t.Errorf("pg ls --request-id: %v, want a usage error (it changes nothing)", err)
	}
	for _, bad := range [][]string{{"pg", "ls", "degarded"}, {"pg", "ls", "--osd", "4294967296"}, {"pg", "ls", "--primary", "99"}, {"pg", "ls", "--osd", "-1"}, {"pg", "ls", "--primary=-1"}, {"pg", "ls", "--osd", "x"}, {"osd", "map", "maps/k", "--request-id", strings.Repeat("ab", 16)}} {
		if _, err := cli(bad...); exitCode(err) != exitUsage {
			t.Errorf("%v: %v, want a usage error", bad, err)
		}
	}
	for _, bad := range [][]string{{"osd", "pool", "set", "default", "size", "abc"}, {"osd", "pool", "set", "default", "size", "2.5"},
		{"osd", "pool", "set", "default", "min_size", "0"}, {"osd", "pool", "set", "default", "colour", "2"}} {
		if _, err := cli(bad...); exitCode(err) != exitUsage {
			t.Errorf("%v: %v (exit %d), want a usage error (exit 2)", bad, err, exitCode(err))
		}
	}
	if _, err := cli("osd", "out", "-1"); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "-1: not a flag") {
		t.Errorf("osd out -1: %v, want a usage error saying -1 is no id", err)
	}
	for _, bad := range [][]string{{"pg", "ls", "--pool", "nope"}, {"osd", "pool", "get", "nope", "size"}, {"osd", "pool", "set", "nope", "size", "2"}} {
		if _, err := cli(bad...); exitCode(err) != exitError || !strings.Contains(err.Error(), `"nope"`) {
			t.Errorf("%v: %v (exit %d), want exit 1 naming the pool", bad, err, exitCode(err))
		}
	}
	if got := pgLsJSON(t, cli, "pg", "ls", "--json", "--pool", "default"); len(got) != 8 {
		t.Errorf("pg ls --pool default: %d PGs, want 8", len(got))
	}

	// health: one line.
	if out, err := cli("health"); err != nil || !regexp.MustCompile(`^HEALTH_(OK|WARN|ERR)`).MatchString(out) || strings.Count(out, "\n") != 1 {
		t.Errorf("health: %v %q", err, out)
	}

	// osd set|unset: the flag, once.
	if out, err := cli("osd", "set", "noout"); err != nil || !strings.Contains(out, "noout is set, map epoch") {
		t.Errorf("osd set noout: %v %q", err, out)
	}
	if out, err := cli("osd", "set", "noout"); err != nil || !strings.Contains(out, "noout is set already") {
		t.Errorf("osd set noout again: %v %q", err, out)
	}
	if out, err := cli("status"); err != nil || !strings.Contains(out, "noout flag(s) set") || !strings.Contains(out, "\n         flags noout\n") {
		t.Errorf("status with noout: %v\n%s", err, out)
	}
	// health detail: each check with its code, as ceph health detail.
	if out, err := cli("health", "detail"); err != nil || !regexp.MustCompile(`^HEALTH_WARN .*noout flag\(s\) set`).MatchString(out) ||
		!strings.Contains(out, "\n[WRN] OSDMAP_FLAGS: noout flag(s) set\n") {
		t.Errorf("health detail with noout: %v\n%s", err, out)
	}
	if out, err := cli("health", "detail", "--json"); err != nil || !strings.Contains(out, `"code":"OSDMAP_FLAGS","severity":"HEALTH_WARN","summary":"noout flag(s) set","detail":[]`) {
		t.Errorf("health detail --json with noout: %v\n%s", err, out)
	}
	if out, err := cli("osd", "unset", "noout"); err != nil || !strings.Contains(out, "noout is unset, map epoch") {
		t.Errorf("osd unset noout: %v %q", err, out)
	}
	if _, err := cli("osd", "set", "pause"); err == nil || !strings.Contains(err.Error(), "known flags") {
		t.Errorf("osd set pause: %v", err)
	}

	// osd df: a row per OSD, the total and the spread.
	out, err = cli("osd", "df")
	if err != nil || strings.Count(out, "osd.") != 4 || !strings.Contains(out, "TOTAL") {
		t.Errorf("osd df: %v\n%s", err, out)
	}
	// osd perf: a row per OSD, and the commit latency in the JSON.
	out, err = cli("osd", "perf")
	if err != nil || strings.Count(out, "osd.") != 4 || !strings.Contains(out, "COMMIT_LATENCY(ms)") {
		t.Errorf("osd perf: %v\n%s", err, out)
	}
	if out, err = cli("osd", "perf", "--json"); err != nil || strings.Count(out, `"commit_latency_ms":`) != 4 {
		t.Errorf("osd perf --json: %v\n%s", err, out)
	}
	// Writes sync the WALs: the beacons carry their syncs, and some OSD
	// has a commit latency within a window of them.
	osdtest.Eventually(t, time.Minute, "a commit latency in osd perf", func() bool {
		if _, err := cli("put", "-", "maps/sync"); err != nil {
			t.Fatal(err)
		}
		var osds []mon.OSDReport
		out, err := cli("osd", "perf", "--json")
		if err != nil || json.Unmarshal([]byte(out), &osds) != nil {
			t.Fatalf("osd perf --json: %v\n%s", err, out)
		}
		return slices.ContainsFunc(osds, func(o mon.OSDReport) bool { return o.CommitLatencyMs > 0 })
	})
}

func pgLsJSON(t *testing.T, cli func(...string) (string, error), args ...string) []mon.PGStat {
	t.Helper()
	out, err := cli(args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	var pgs []mon.PGStat
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var p mon.PGStat
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		pgs = append(pgs, p)
	}
	return pgs
}

// TestPoolSizeChange: osd pool set size moves every PG's acting set, and
// the OSDs follow: a third replica is backfilled with every object, the
// cluster returns to active+clean, and shrinking again keeps every object
// on the members it names.
func TestPoolSizeChange(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc, monArgs := monCluster(t, 4, 2)
	cli := mustCLI(t, monArgs)
	cl := monClient(t, lc, "grow")
	ctx := t.Context()
	var keys []string
	stored := 0
	for i := range 16 {
		stored += 3000 + i
		key := fmt.Sprintf("k%02d", i)
		if _, err := osdtest.Put(ctx, cl, "grow", key, osdtest.Payload(3000+i, uint64(i)), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	// settled waits until every PG has want members and is active+clean
	// by its primary's report, and each object is on every member.
	settled := func(want int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			problem := ""
			for _, p := range pgLsJSON(t, func(a ...string) (string, error) { return cli(a...), nil }, "pg", "ls", "--json") {
				if len(p.Acting) != want || p.State != "active+clean" {
					problem = fmt.Sprintf("pg %s: %s, acting %v", p.PGID, p.State, p.Acting)
					break
				}
			}
			if problem == "" {
				problem = missingCopies(t, lc, cl, "grow", keys)
			}
			if problem == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("size %d never settled: %s\n%s", want, problem, cli("status"))
			}
			time.Sleep(200 * time.Millisecond) // polls the mon's view, beaconed every second
		}
	}
	settled(2)
	// df: every object once in stored, twice in used, as the primaries'
	// beacons report them (each second).
	deadline := time.Now().Add(20 * time.Second)
	for {
		var df mon.DF
		out := cli("df", "--json")
		if err := json.Unmarshal([]byte(out), &df); err != nil || len(df.Pools) != 1 {
			t.Fatalf("df --json: %v %q", err, out)
		}
		if p := df.Pools[0]; p.Objects == 16 && p.Stored == uint64(stored) && p.Used == 2*uint64(stored) && p.MaxAvail > 0 && df.TotalBytes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("df never showed 16 objects of %d bytes: %s", stored, out)
		}
		time.Sleep(200 * time.Millisecond) // polls the mon's view, beaconed every second
	}
	if out := cli("df"); !strings.Contains(out, "--- POOLS ---") || !regexp.MustCompile(`(?m)^default\s+1\s+8\s`).MatchString(out) {
		t.Errorf("df:\n%s", out)
	}
	if out := cli("osd", "pool", "set", "default", "size", "3"); !strings.Contains(out, "set pool default size to 3") {
		t.Fatalf("pool set: %q", out)
	}
	if out := cli("osd", "pool", "get", "default", "all"); out != "size: 3\nmin_size: 2\npg_num: 8\n" {
		t.Errorf("pool get all: %q", out)
	}
	settled(3)
	// pg query: the primary of k00's PG sees both replicas caught up with
	// its log.
	loc, err := cl.Locate("grow", "k00")
	if err != nil {
		t.Fatal(err)
	}
	var q osd.PGQuery
	if out := cli("pg", "query", loc.PG.String(), "--json"); json.Unmarshal([]byte(out), &q) != nil || q.PGID != loc.PG.String() ||
		q.State != "active+clean" || !slices.Equal(q.Acting, loc.Acting) || q.Objects == 0 || q.LastUpdate == "0'0" || len(q.Peers) != 2 {
		t.Fatalf("pg query %s: %s", loc.PG, out)
	}
	for _, p := range q.Peers {
		if p.State != "caught up" || p.LastUpdate != q.LastUpdate || p.OSD == loc.Acting[0] {
			t.Errorf("pg query %s: peer %+v (last_update %s)", loc.PG, p, q.LastUpdate)
		}
	}
	if out := cli("pg", "query", loc.PG.String()); !strings.Contains(out, "state     active+clean\n") || !strings.Contains(out, "caught up") {
		t.Errorf("pg query text:\n%s", out)
	}
	cli("osd", "pool", "set", "default", "size", "2")
	settled(2)
	for _, key := range keys {
		if _, _, err := osdtest.Get(ctx, cl, "grow", key, client.GetOptions{}); err != nil {
			t.Errorf("get %s after the shrink: %v", key, err)
		}
	}
	if _, _, err := run(t, append([]string{"osd", "pool", "set", "default", "size", "01"}, monArgs...)...); err == nil || !strings.Contains(err.Error(), "--yes-i-really-mean-it") {
		t.Errorf("size 01 without --yes-i-really-mean-it: %v, want the mon's refusal", err)
	}
	if _, _, err := run(t, append([]string{"osd", "pool", "set", "default", "pg_num", "16"}, monArgs...)...); err == nil || !strings.Contains(err.Error(), "fixed") {
		t.Errorf("pg_num 16: %v", err)
	}
}

// missingCopies names an object missing from a member of its acting set
// under cl's map, or "".
func missingCopies(t *testing.T, lc *local.Cluster, cl *client.Client, bucket string, keys []string) string {
	for _, key := range keys {
		loc, err := cl.Locate(bucket, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range loc.Acting {
			if _, err := lc.OSDs[id].Store().Head(t.Context(), bucket, key); err != nil {
				return fmt.Sprintf("%s on osd.%d (acting %v, epoch %d): %v", key, id, loc.Acting, loc.Epoch, err)
			}
		}
	}
	return ""
}

// TestPoolSizeOneThenLoss: after a pool ran at size 1 and went back to 3,
// losing the OSD that was a PG's only member at size 1 leaves its PGs
// active on the others, not down waiting for it: the new interval's
// primary pushes the replicas behind (a PG written at size 1) and tells
// those caught up (a PG not written) the log it went active with, and
// both kinds then witness the interval (last_epoch_started), so the
// size-1 interval needs no witness.
func TestPoolSizeOneThenLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	s := sizeOneWrite(t)
	ctx := t.Context()
	s.cli("osd", "pool", "set", "default", "size", "3")
	waitPGs(t, s.cli, "size 3", func(p mon.PGStat) bool { return p.State == "active+clean" && len(p.Acting) == 3 })
	if problem := missingCopies(t, s.lc, s.cl, "single", []string{s.key}); problem != "" {
		t.Fatalf("after size 3 settled: %s", problem)
	}
	if err := s.lc.StopOSD(ctx, int(s.gone)); err != nil {
		t.Fatal(err)
	}
	waitPGs(t, s.cli, fmt.Sprintf("osd.%d stopped (the only member of pgs %v at size 1)", s.gone, s.only), func(p mon.PGStat) bool {
		return strings.HasPrefix(p.State, "active+") && !slices.Contains(p.Acting, s.gone)
	})
	if _, _, err := osdtest.Get(ctx, s.cl, "single", s.key, client.GetOptions{}); err != nil {
		t.Errorf("get %s with osd.%d stopped: %v", s.key, s.gone, err)
	}
}

// TestOSDLostUnblocksDown: at size 1, the OSD that was a written PG's only
// member dies and is marked out. The PG moves to another OSD and goes
// down, waiting for it (it alone knows what the interval acknowledged).
// `osd lost` without --yes-i-really-mean-it changes nothing; with it the
// PG goes active, empty: the object is gone, and the key takes a new
// write.
func TestOSDLostUnblocksDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	s := sizeOneWrite(t)
	ctx := t.Context()
	if err := s.lc.StopOSD(ctx, int(s.gone)); err != nil {
		t.Fatal(err)
	}
	// Out (a dead disk: the operator's, or the mon's after the down-out
	// interval), its PGs map to other OSDs.
	s.cli("osd", "out", strconv.Itoa(int(s.gone)))
	written := fmt.Sprintf("1.%x", s.written)
	waitPGs(t, s.cli, fmt.Sprintf("osd.%d stopped and out (the only member of pg %s, written)", s.gone, written), func(p mon.PGStat) bool {
		if len(p.Acting) != 1 || p.Acting[0] == s.gone {
			return false
		}
		if p.PGID == written {
			return p.State == "down"
		}
		return true
	})
	if out := s.cli("pg", "query", written); !strings.Contains(out, fmt.Sprintf("[%d]", s.gone)) {
		t.Fatalf("pg query %s names no blocker osd.%d:\n%s", written, s.gone, out)
	}
	id := strconv.Itoa(int(s.gone))
	if out, _, err := run(t, append([]string{"osd", "lost", id}, s.args...)...); err == nil || !strings.Contains(err.Error(), "--yes-i-really-mean-it") {
		t.Fatalf("osd lost without --yes-i-really-mean-it: %v\n%s", err, out)
	}
	// Removing it would give it up as well: not without the flag while a
	// PG is down.
	if out, _, err := run(t, append([]string{"osd", "rm", id}, s.args...)...); err == nil || !strings.Contains(err.Error(), "are down or incomplete") || !strings.Contains(err.Error(), written) {
		t.Fatalf("osd rm of a down PG's blocker: %v\n%s", err, out)
	}
	if out := s.cli("osd", "lost", id, "--yes-i-really-mean-it"); !strings.Contains(out, "osd lost ["+id+"]: done") {
		t.Fatalf("osd lost: %q", out)
	}
	waitPGs(t, s.cli, fmt.Sprintf("osd.%d lost", s.gone), func(p mon.PGStat) bool { return strings.HasPrefix(p.State, "active") })
	if _, _, err := osdtest.Get(ctx, s.cl, "single", s.key, client.GetOptions{}); !errors.Is(err, client.ErrNoSuchKey) {
		t.Fatalf("get %s, written only to lost osd.%d: %v, want NoSuchKey", s.key, s.gone, err)
	}
	if _, err := osdtest.Put(ctx, s.cl, "single", s.key, osdtest.Payload(10, 2), client.PutOptions{}); err != nil {
		t.Fatalf("put %s after the loss: %v", s.key, err)
	}
	if out := s.cli("osd", "lost", id, "--yes-i-really-mean-it"); !strings.Contains(out, "nothing to change (osd."+id+" already lost)") {
		t.Fatalf("osd lost again: %q", out)
	}
	if out := s.cli("osd", "tree"); !regexp.MustCompile(`(?m)^osd\.` + id + `\s+\S+\s+lost\s+out\s`).MatchString(out) {
		t.Fatalf("osd tree does not show osd.%s lost:\n%s", id, out)
	}
	// Removed once its PGs are active, it takes its lost_at with it: the
	// PGs stay active (peering gives up on an OSD the map lacks as well).
	s.cli("osd", "rm", id)
	waitPGs(t, s.cli, fmt.Sprintf("osd.%d removed", s.gone), func(p mon.PGStat) bool { return strings.HasPrefix(p.State, "active") })
	// Its disk, started again, is told it was removed (its key went with
	// it), not to check its mons.
	for i, o := range s.lc.OSDs {
		if o.ID() == s.gone {
			err := s.lc.RestartOSD(t.Context(), i)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("hold no key for osd.%d", s.gone)) {
				t.Errorf("osd.%d's disk started after osd rm: %v", s.gone, err)
			}
		}
	}

}

// sizeOne is a cluster of 4 OSDs whose default pool runs at size 1, with
// one object (key, in bucket single) in PG written, whose only member is
// gone; only lists the PGs gone alone holds (written among them, and one
// more, not written).
type sizeOne struct {
	lc      *local.Cluster
	cli     func(...string) string
	args    []string
	cl      *client.Client
	gone    uint32
	written uint32
	only    []uint32
	key     string
}

func sizeOneWrite(t *testing.T) sizeOne {
	lc, monArgs := monCluster(t, 4, 3)
	s := sizeOne{lc: lc, cli: mustCLI(t, monArgs), args: monArgs, cl: monClient(t, lc, "single")}
	s.cli("osd", "pool", "set", "default", "size", "1", "--yes-i-really-mean-it")
	// gone: an OSD that is the only member of two PGs at size 1 (8 PGs
	// on 4 OSDs: one is); one PG gets a write now, the other none. The
	// client's map must be the size change's or a later one: under its
	// older one no PG has one member, and gone and written were left 0.
	var mp *placement.Map
	osdtest.Eventually(t, 10*time.Second, "the client's map has size 1", func() bool {
		mp = s.cl.Map()
		p, ok := mp.PoolByName("default")
		return ok && p.Size == 1
	})
	pool, _ := mp.PoolByName("default")
	byOSD := map[uint32][]uint32{}
	for pg := range pool.PgCount {
		if a := mp.ActingSet(pool.Id, pg); len(a) == 1 {
			byOSD[a[0]] = append(byOSD[a[0]], pg)
		}
	}
	for id, pgs := range byOSD {
		if len(pgs) >= 2 {
			s.gone, s.written, s.only = id, pgs[0], pgs
			break
		}
	}
	if s.only == nil {
		t.Fatalf("no OSD is the only member of two PGs at size 1: %v", byOSD)
	}
	for i := 0; s.key == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		if loc, err := s.cl.Locate("single", k); err == nil && loc.PG.Seed == s.written {
			s.key = k
		}
	}
	if _, err := osdtest.Put(t.Context(), s.cl, "single", s.key, osdtest.Payload(1000, 1), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitPGs waits until every PG pg ls lists is ok.
func waitPGs(t *testing.T, cli func(...string) string, what string, ok func(mon.PGStat) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		bad := ""
		for _, p := range pgLsJSON(t, func(a ...string) (string, error) { return cli(a...), nil }, "pg", "ls", "--json") {
			if !ok(p) {
				bad = fmt.Sprintf("pg %s: %s, acting %v", p.PGID, p.State, p.Acting)
				break
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the PGs never settled: %s\n%s", what, bad, cli("health", "detail"))
		}
		time.Sleep(200 * time.Millisecond) // polls the mon's view, beaconed every second
	}
}

// TestNewStoreUnderOldIDWaits: three OSDs stop one after another; the last comes back
// with its disk replaced (an empty store under its old id and keyring)
// while the other two stay down and go out. The PGs only those three held
// must wait for the two (down, blocked by them), not go active on the new
// store's nothing: a write there would then roll the others' acknowledged
// writes back as divergent when they return. Once they are back, every
// object reads as written.
func TestNewStoreUnderOldIDWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc, args := monCluster(t, 4, 3)
	cli := mustCLI(t, args)
	cl := monClient(t, lc, "disk")
	ctx := t.Context()
	bodies := map[string][]byte{}
	for i := range 32 {
		k := fmt.Sprintf("k%d", i)
		bodies[k] = osdtest.Payload(1000+i, uint64(i))
		if _, err := osdtest.Put(ctx, cl, "disk", k, bodies[k], client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mp := cl.Map()
	pool, _ := mp.PoolByName("default")
	before := map[string][]uint32{}
	for pg := range pool.PgCount {
		before[fmt.Sprintf("%d.%x", pool.Id, pg)] = mp.ActingSet(pool.Id, pg)
	}
	// x, y, z: the members of PG 0; w holds none of it.
	acting := before[fmt.Sprintf("%d.0", pool.Id)]
	x, y, z := acting[0], acting[1], acting[2]
	index := map[uint32]int{}
	var w uint32
	for i, o := range lc.OSDs {
		index[o.ID()] = i
		if !slices.Contains(acting, o.ID()) {
			w = o.ID()
		}
	}
	// z, then y, then x: the last interval that could take writes was x's
	// and y's, which x alone must not witness on its new store.
	for _, id := range []uint32{z, y, x} {
		if err := lc.StopOSD(ctx, index[id]); err != nil {
			t.Fatal(err)
		}
	}
	cli("osd", "out", strconv.Itoa(int(y)), strconv.Itoa(int(z)))
	if err := os.RemoveAll(filepath.Join(lc.Dir, fmt.Sprintf("osd.%d", x), "store")); err != nil {
		t.Fatal(err)
	}
	if err := lc.RestartOSD(ctx, index[x]); err != nil {
		t.Fatal(err)
	}
	var tree []mon.OSDTreeEntry
	if err := json.Unmarshal([]byte(cli("osd", "tree", "--json")), &tree); err != nil {
		t.Fatal(err)
	}
	for _, e := range tree {
		if e.ID == x && e.Born <= mp.Epoch() {
			t.Fatalf("osd.%d's store, new since epoch %d, born at %d", x, mp.Epoch(), e.Born)
		}
	}
	waitPGs(t, cli, fmt.Sprintf("osd.%d back on a new store, osd.%d and osd.%d down and out", x, y, z), func(p mon.PGStat) bool {
		if slices.Contains(before[p.PGID], w) {
			return strings.HasPrefix(p.State, "active") // osd.w witnessed it
		}
		return strings.HasPrefix(p.State, "down")
	})
	blocked := fmt.Sprintf("[%d %d]", min(y, z), max(y, z))
	if out := cli("pg", "query", fmt.Sprintf("%d.0", pool.Id)); !strings.Contains(out, blocked) {
		t.Fatalf("pg query names no blockers %s:\n%s", blocked, out)
	}
	for _, id := range []uint32{y, z} {
		if err := lc.RestartOSD(ctx, index[id]); err != nil {
			t.Fatal(err)
		}
	}
	cli("osd", "in", strconv.Itoa(int(y)), strconv.Itoa(int(z)))
	waitPGs(t, cli, "every OSD back", func(p mon.PGStat) bool { return p.State == "active+clean" })
	for k, want := range bodies {
		got, _, err := osdtest.Get(ctx, cl, "disk", k, client.GetOptions{})
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("get %s after the others returned: %d bytes, %v", k, len(got), err)
		}
	}
}

// TestOSDOutWithNoReplacementStaysActing: on three OSDs at size 3, an OSD
// marked out while it runs has no OSD to take its place. As Ceph keeps it
// acting, the mon keeps each PG's old acting set (pg_temp): three copies
// serve on, active+clean+remapped with nothing misplaced (the health warns
// of the bucket records only, which live on the OSDs up and in),
// and writes still reach it, across its restart. Marked in again, the
// entries go.
func TestOSDOutWithNoReplacementStaysActing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc, monArgs := monCluster(t, 3, 3)
	cli := mustCLI(t, monArgs)
	cl := monClient(t, lc, "keep")
	ctx := t.Context()
	var keys []string
	put := func(n int) {
		t.Helper()
		for range n {
			key := fmt.Sprintf("k%02d", len(keys))
			if _, err := osdtest.Put(ctx, cl, "keep", key, osdtest.Payload(2000, uint64(len(keys))), client.PutOptions{}); err != nil {
				t.Fatalf("put %s: %v", key, err)
			}
			keys = append(keys, key)
		}
	}
	put(8)
	waitPGs(t, cli, "three OSDs in", func(p mon.PGStat) bool { return p.State == "active+clean" && len(p.Acting) == 3 })
	cli("osd", "out", "2")
	waitPGs(t, cli, "osd.2 out while it runs, nothing to replace it", func(p mon.PGStat) bool {
		return p.State == "active+clean+remapped" && len(p.Acting) == 3 && slices.Contains(p.Acting, 2) &&
			len(p.Up) == 2 && !slices.Contains(p.Up, 2) && p.Degraded == 0 && p.Misplaced == 0
	})
	// The data PGs keep three copies; the bucket records, on the OSDs up
	// and in, have two, and the health says so (nothing else).
	if out := cli("health"); !strings.HasPrefix(out, mon.HealthWarn) || !strings.Contains(out, "pg meta (the bucket records) undersized: 2 OSDs up and in") ||
		strings.Contains(out, "remapped") || strings.Contains(out, "pgs undersized") {
		t.Errorf("health with osd.2 out, kept acting: %q", out)
	}
	if out, _, err := run(t, append([]string{"osd", "safe-to-destroy", "2"}, monArgs...)...); exitCode(err) != exitError || !strings.Contains(out, "pgs map to it") {
		t.Errorf("safe-to-destroy 2, out but acting: %v\n%s", err, out)
	}
	osdtest.Eventually(t, 10*time.Second, "the client's map keeps osd.2 acting", func() bool {
		mp := cl.Map()
		pool, _ := mp.PoolByName("default")
		return slices.Contains(mp.ActingSet(pool.Id, 0), 2)
	})
	put(4)
	if missing := missingCopies(t, lc, cl, "keep", keys); missing != "" {
		t.Fatalf("with osd.2 out and acting: %s", missing)
	}
	// A restart (osd.2 down for a moment, still out): it is a member
	// again once it boots, with what it missed meanwhile.
	if err := lc.StopOSD(ctx, 2); err != nil {
		t.Fatal(err)
	}
	put(2)
	if err := lc.RestartOSD(ctx, 2); err != nil {
		t.Fatal(err)
	}
	waitPGs(t, cli, "osd.2 back up, still out", func(p mon.PGStat) bool {
		return p.State == "active+clean+remapped" && len(p.Acting) == 3 && slices.Contains(p.Acting, 2)
	})
	osdtest.Eventually(t, 10*time.Second, "the client's map has osd.2 acting again", func() bool {
		mp := cl.Map()
		pool, _ := mp.PoolByName("default")
		return slices.Contains(mp.ActingSet(pool.Id, 0), 2)
	})
	if missing := missingCopies(t, lc, cl, "keep", keys); missing != "" {
		t.Fatalf("osd.2 restarted while out: %s", missing)
	}
	cli("osd", "in", "2")
	waitPGs(t, cli, "osd.2 in again", func(p mon.PGStat) bool {
		return p.State == "active+clean" && len(p.Acting) == 3 && slices.Equal(p.Acting, p.Up)
	})
	// Every OSD out, all running: nothing replaces them, so they stay
	// acting, and the status keeps every PG's state and objects (it showed
	// them all unknown, 0 objects: their primaries did not report them).
	cli("osd", "out", "0", "1", "2")
	var objects uint64
	waitPGs(t, cli, "every OSD out", func(p mon.PGStat) bool {
		if p.PGID == "meta" {
			return true
		}
		return len(p.Acting) == 3 && !strings.Contains(p.State, "unknown")
	})
	for _, p := range pgLsJSON(t, func(a ...string) (string, error) { return cli(a...), nil }, "pg", "ls", "--json") {
		objects += p.Objects
		if p.Seed == 0 {
			t.Logf("every OSD out: pg %s %s, up %v, acting %v, %d objects", p.PGID, p.State, p.Up, p.Acting, p.Objects)
		}
	}
	if objects != uint64(len(keys)) {
		t.Errorf("every OSD out: the PGs count %d objects, want %d", objects, len(keys))
	}
}

// TestMaintenanceChecks: osd ok-to-stop says yes while every PG keeps
// min_size whole members and no for two of three members at min_size 2;
// osd safe-to-destroy says no while PGs map to an OSD and yes once it is
// out, its PGs moved and its stray copies removed (its beacon's count).
func TestMaintenanceChecks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	lc, monArgs := monCluster(t, 4, 3)
	cli := mustCLI(t, monArgs)
	cl := monClient(t, lc, "maint")
	for i := range 8 {
		if _, err := osdtest.Put(t.Context(), cl, "maint", fmt.Sprintf("k%d", i), osdtest.Payload(1000, uint64(i)), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPGs(t, cli, "four OSDs in", func(p mon.PGStat) bool { return p.State == "active+clean" })
	check := func(args ...string) (string, int) {
		t.Helper()
		out, _, err := run(t, append(args, monArgs...)...)
		if err != nil && exitCode(err) != exitError {
			t.Fatalf("osprey %s: %v", strings.Join(args, " "), err)
		}
		return out, exitCode(err)
	}
	if out, code := check("osd", "ok-to-stop", "0"); code != 0 || !strings.Contains(out, "osd.0 ok to stop") {
		t.Errorf("ok-to-stop 0: exit %d\n%s", code, out)
	}
	var r mon.OKToStop
	out, code := check("osd", "ok-to-stop", "0", "1", "--json")
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitError || r.OKToStop || r.NumNotOKPGs == 0 {
		t.Errorf("ok-to-stop 0 1 (min_size 2 of 3): exit %d, %+v (%v)\n%s", code, r, err, out)
	}
	if out, code := check("osd", "safe-to-destroy", "3"); code != exitError || !strings.Contains(out, "pgs map to it") {
		t.Errorf("safe-to-destroy 3 while in: exit %d\n%s", code, out)
	}
	cli("osd", "out", "3")
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, code := check("osd", "safe-to-destroy", "3")
		if code == 0 {
			if !strings.Contains(out, "osd.3 safe to destroy") {
				t.Errorf("safe-to-destroy 3: %s", out)
			}
			// Safe means its store holds no copy of a data PG any more.
			held, err := lc.OSDs[3].Store().HeldPGs(t.Context())
			if err != nil || slices.ContainsFunc(held, func(sid uint32) bool { return sid != placement.MetaPG }) {
				t.Errorf("osd.3 safe to destroy, yet its store holds PGs %v (%v)", held, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("osd.3 out: never safe to destroy:\n%s\n%s", out, cli("pg", "ls"))
		}
		time.Sleep(500 * time.Millisecond) // polls the mon's view, beaconed every second
	}
	for i := range 8 {
		if _, _, err := osdtest.Get(t.Context(), cl, "maint", fmt.Sprintf("k%d", i), client.GetOptions{}); err != nil {
			t.Errorf("get k%d with osd.3 safe to destroy: %v", i, err)
		}
	}
}
