package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/mon"
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
	want := regexp.MustCompile(`^osdmap e\d+ pool '\S+' \(\d+\) object 'maps/a/b.txt' -> pg ` + regexp.QuoteMeta(loc.PGID) + ` -> acting \(\[\d,\d\], p\d\)\n$`)
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
	want3 := slices.DeleteFunc(slices.Clone(pgs), func(p mon.PGStat) bool { return !slices.Contains(p.Acting, 3) })
	if len(byOSD) != len(want3) || len(byOSD) == 0 || len(byOSD) == 8 {
		t.Errorf("pg ls --osd 3: %d PGs, want %d of 8", len(byOSD), len(want3))
	}
	// Every PG is active or, before its primary's first report, unknown.
	if got := pgLsJSON(t, cli, "pg", "ls", "--json", "unknown", "active"); len(got) != 8 {
		t.Errorf("pg ls unknown active: %d PGs, want all 8", len(got))
	}
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

	// osd df: a row per OSD, the total and the spread.
	out, err = cli("osd", "df")
	if err != nil || strings.Count(out, "osd.") != 4 || !strings.Contains(out, "TOTAL") {
		t.Errorf("osd df: %v\n%s", err, out)
	}
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
