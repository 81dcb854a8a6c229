package osd_test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// damageDataFile flips one byte at offset at of OSD id's data files
// holding body (osdtest.DamageDataFiles).
func damageDataFile(t *testing.T, c *osdtest.Cluster, id uint32, body []byte, at int64) {
	t.Helper()
	osdtest.DamageDataFiles(t, c.Config(id).DataDir, body, at)
}

// rotCluster starts a 3-OSD cluster with the bucket "rot" for the tests
// of damaged objects.
func rotCluster(t *testing.T, tweak func(*osd.Config)) (*osdtest.Cluster, *client.Client, context.Context, *osdpb.Pool) {
	t.Helper()
	return rotClusterOn(t, osdtest.Options{OSDs: 3, PGs: 8, Tweak: tweak})
}

// rotClusterOn is rotCluster with the cluster's options (its networks).
func rotClusterOn(t *testing.T, opts osdtest.Options) (*osdtest.Cluster, *client.Client, context.Context, *osdpb.Pool) {
	t.Helper()
	c := osdtest.Start(t, opts)
	cl := c.Client(t, nil)
	ctx := ctxT(t, time.Minute)
	if err := cl.MakeBucket(ctx, "rot"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	return c, cl, ctx, pool
}

// TestReadRepair: a get of an object whose copy at the primary rotted is
// served whole from a replica's copy, which replaces the damaged one; the
// next get needs no repair. With the copies of the primary and of one
// replica damaged, the other replica's serves. The OSD sends the damaged
// bytes unchecked (the client checks them, docs/osd.md "Reads"): the
// client's messenger reports them as a source CRC mismatch, not a corrupt
// link, and the client reads them again, checked by the OSD.
func TestReadRepair(t *testing.T) { readRepair(t, "tcp") }

func readRepair(t *testing.T, network string) {
	c, cl, ctx, pool := rotClusterOn(t, osdtest.Options{OSDs: 3, PGs: 8, Public: network, Cluster: network})
	repairs := func(id uint32) (ok, failed uint64) {
		st := c.OSDs[id].Stats()
		return st.ReadRepairs, st.ReadRepairFailures
	}
	mismatches := func() (n, faults uint64) {
		for _, ts := range cl.Messenger().TransportStats() {
			n, faults = n+ts.SourceCRCMismatches, faults+ts.Faults
		}
		return n, faults
	}
	for i, damaged := range []int{1, 2} {
		key := []string{"one-copy", "two-copies"}[i]
		body := osdtest.Payload(1<<20+5, uint64(i))
		if _, err := osdtest.Put(ctx, cl, "rot", key, body, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		acting := c.Map.ActingSet(pool.Id, placement.PGOf(pool, "rot", key))
		primary := acting[0]
		for _, id := range acting[:damaged] {
			damageDataFile(t, c, id, body, 300_000)
		}
		before, _ := repairs(primary)
		seen, faulted := mismatches()
		got, _, err := osdtest.Get(ctx, cl, "rot", key, client.GetOptions{})
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s: get with %d damaged copies: %d bytes, %v", key, damaged, len(got), err)
		}
		if n, _ := repairs(primary); n != before+1 {
			t.Fatalf("%s: primary osd.%d counted %d read repairs, want %d", key, primary, n, before+1)
		}
		if n, faults := mismatches(); n != seen+1 || faults != faulted {
			t.Fatalf("%s: the client's messenger counted %d source CRC mismatches and %d faults; want 1 and none", key, n-seen, faults-faulted)
		}
		// The primary's copy is whole again: the store reads it itself.
		_, own, err := c.OSDs[primary].Store().ReadRange(ctx, "rot", key, 0, -1, nil)
		if err != nil || !bytes.Equal(own, body) {
			t.Fatalf("%s: primary's copy after the repair: %d bytes, %v", key, len(own), err)
		}
		if got, _, err := osdtest.Get(ctx, cl, "rot", key, client.GetOptions{}); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s: second get: %d bytes, %v", key, len(got), err)
		}
		if n, _ := repairs(primary); n != before+1 {
			t.Fatalf("%s: the second get repaired again (%d repairs)", key, n)
		}
	}
}

// TestReadRepairEveryCopyDamaged: with every copy damaged the get fails
// with InternalError (never damaged bytes), the failure is counted, and no
// damaged copy was installed over another.
func TestReadRepairEveryCopyDamaged(t *testing.T) {
	c, cl, ctx, pool := rotCluster(t, nil)
	body := osdtest.Payload(1<<20, 7)
	if _, err := osdtest.Put(ctx, cl, "rot", "k", body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	acting := c.Map.ActingSet(pool.Id, placement.PGOf(pool, "rot", "k"))
	for i, id := range acting {
		damageDataFile(t, c, id, body, int64(100_000*(i+1)))
	}
	_, _, err := osdtest.Get(ctx, cl, "rot", "k", client.GetOptions{})
	if !errors.Is(err, ops.ErrInternal) {
		t.Fatalf("get of an object damaged everywhere: %v, want InternalError", err)
	}
	if st := c.OSDs[acting[0]].Stats(); st.ReadRepairs != 0 || st.ReadRepairFailures == 0 {
		t.Fatalf("primary counted %d repairs and %d failures, want 0 and some", st.ReadRepairs, st.ReadRepairFailures)
	}
	for _, id := range acting {
		if _, _, err := c.OSDs[id].Store().ReadRange(ctx, "rot", "k", 0, -1, nil); err == nil {
			t.Fatalf("osd.%d's damaged copy reads whole: a damaged copy was installed, or the damage missed", id)
		}
	}
}

// TestReadRepairTakesOnlyTheSameVersion: a replica holding another
// version of the object (as one behind or ahead of its primary does) is
// not a source: with the primary's copy and the only other same-version
// copy damaged, the get fails rather than serve the other version.
func TestReadRepairTakesOnlyTheSameVersion(t *testing.T) {
	c, cl, ctx, pool := rotCluster(t, nil)
	body := osdtest.Payload(1<<20, 3)
	if _, err := osdtest.Put(ctx, cl, "rot", "k", body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	pg := placement.PGOf(pool, "rot", "k")
	sid, err := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
	if err != nil {
		t.Fatal(err)
	}
	acting := c.Map.ActingSet(pool.Id, pg)
	other := osdtest.Payload(1<<20, 4)
	if err := c.OSDs[acting[1]].InstallForTest(ctx, sid, &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Bucket: "rot", Key: "k",
		Meta: &osdpb.ObjectMeta{Size: uint64(len(other)), Crc32C: crc32.Checksum(other, crc32.MakeTable(crc32.Castagnoli))}}, other); err != nil {
		t.Fatal(err)
	}
	damageDataFile(t, c, acting[0], body, 4096)
	damageDataFile(t, c, acting[2], body, 4096)
	// The other version may be a replica behind, about to catch up: the
	// get is answered ServiceUnavailable, which the client retries.
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	got, _, err := osdtest.Get(short, cl, "rot", "k", client.GetOptions{})
	if err == nil || bytes.Equal(got, other) {
		t.Fatalf("get with the only intact copy another version: %d bytes (the other version: %v), %v; want an error",
			len(got), bytes.Equal(got, other), err)
	}
	if st := c.OSDs[acting[0]].Stats(); st.ReadRepairs != 0 || st.ReadRepairFailures == 0 {
		t.Fatalf("primary counted %d repairs and %d failures, want 0 and some", st.ReadRepairs, st.ReadRepairFailures)
	}
}

// TestReadRepairLocalInstallFails: a repair whose copy came whole but
// could not be installed here (a disk that fails) says so, and asks no
// other member (whose copy would fail alike); its log blamed the source.
func TestReadRepairLocalInstallFails(t *testing.T) {
	var log osdtest.LogBuffer
	c, cl, ctx, pool := rotCluster(t, func(cfg *osd.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	body := osdtest.Payload(1<<20, 9)
	if _, err := osdtest.Put(ctx, cl, "rot", "k", body, client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	acting := c.Map.ActingSet(pool.Id, placement.PGOf(pool, "rot", "k"))
	damageDataFile(t, c, acting[0], body, 4096)
	osd.RepairInstalled.Set(func(id uint32) error {
		if id == acting[0] {
			return errors.New("the disk went away")
		}
		return nil
	})
	t.Cleanup(func() { osd.RepairInstalled.Set(nil) })
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	osdtest.Get(short, cl, "rot", "k", client.GetOptions{}) // fails or is served by a replica after retries; the log is the point
	osdtest.Eventually(t, 10*time.Second, "the repair's failure logged", func() bool {
		return strings.Contains(log.String(), "no member could repair it")
	})
	for l := range strings.SplitSeq(log.String(), "\n") {
		if !strings.Contains(l, "no member could repair it") {
			continue
		}
		if !strings.Contains(l, "came whole, but this OSD could not install it: the disk went away") || strings.Count(l, "osd.") != 1 {
			t.Fatalf("a repair that failed to install here: %s", l)
		}
	}
}
