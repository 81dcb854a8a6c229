package store_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/smallfs"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestFillingTheDisk puts small objects (Pebble's WAL) and large ones (data
// files) until the disk refuses them: each refusal is ErrNoSpace, never a
// Pebble fatal error (which panics), and what was stored reads back,
// deletes work, and the store reopens.
func TestFillingTheDisk(t *testing.T) {
	for _, size := range []int{4 << 10, 600 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			dir := smallfs.Mount(t, 48<<20)
			e := newEnv(t, store.Options{Dir: filepath.Join(dir, "store")})
			if sp := e.s.Space(); sp.Total == 0 || sp.Reserve != 8<<20 {
				t.Fatalf("space %+v: want an 8 MiB reserve (the minimum) on a 48 MiB filesystem", sp)
			}
			e.createBucket(1, "b")
			r := rand.New(rand.NewPCG(3, 4))
			var stored []string
			bodies := map[string][]byte{}
			for i := 0; ; i++ {
				if i > 100<<20/size {
					t.Fatalf("%d puts of %d bytes fit a 48 MiB disk", i, size)
				}
				key := fmt.Sprintf("k%05d", i)
				body := randBytes(r, size)
				le := putEntry(e.entry(1, osdpb.OpKind_OP_PUT, "b", key), body)
				err := e.s.Apply(e.ctx, 1, le, body)
				if err != nil {
					if !store.IsNoSpace(err) {
						t.Fatalf("put %d: %v, want ErrNoSpace", i, err)
					}
					e.seq[1]-- // not applied
					break
				}
				stored = append(stored, key)
				bodies[key] = body
			}
			if len(stored) < 10 {
				t.Fatalf("only %d puts before the disk was full", len(stored))
			}
			for _, k := range stored[:5] {
				e.mustRead("b", k, bodies[k])
			}
			for _, k := range stored[:len(stored)/2] {
				e.del(1, "b", k)
			}
			e.reopen()
			e.mustRead("b", stored[len(stored)-1], bodies[stored[len(stored)-1]])
			if size >= 256<<10 {
				// Data files go with their delete (chunks in Pebble wait
				// for a compaction): the room is back at once.
				e.put(1, "b", "again", randBytes(r, size))
			}
			e.checkIntegrity()
		})
	}
}

// TestOpenOnAFullDisk: a disk filled by someone else while the store was
// down. Open releases the reserve so Pebble can open; reads and deletes
// work, puts get ErrNoSpace; once space is freed the reserve is made again
// and puts work.
func TestOpenOnAFullDisk(t *testing.T) {
	dir := smallfs.Mount(t, 32<<20)
	e := newEnv(t, store.Options{Dir: filepath.Join(dir, "store")})
	e.createBucket(1, "b")
	body := randBytes(rand.New(rand.NewPCG(5, 6)), 8<<10)
	e.put(1, "b", "k1", body)
	e.put(1, "b", "k2", body)
	must(t, e.s.Close())
	filler := smallfs.Fill(t, dir, 0)

	e.open()
	if sp := e.s.Space(); sp.Reserve != 0 || e.s.ReserveReleased() != 1 {
		t.Fatalf("space %+v, released %d times: Open on a full disk must release the reserve", sp, e.s.ReserveReleased())
	}
	e.mustRead("b", "k1", body)
	le := putEntry(e.entry(1, osdpb.OpKind_OP_PUT, "b", "k3"), body)
	if err := e.s.Apply(e.ctx, 1, le, body); !store.IsNoSpace(err) {
		t.Fatalf("put on a full disk: %v, want ErrNoSpace", err)
	}
	e.seq[1]--
	e.del(1, "b", "k2")

	must(t, os.Remove(filler))
	if made, err := e.s.MaintainReserve(); !made || err != nil {
		t.Fatalf("MaintainReserve after freeing space: %v %v", made, err)
	}
	if sp := e.s.Space(); sp.Reserve == 0 {
		t.Fatalf("space %+v: no reserve after MaintainReserve", sp)
	}
	e.put(1, "b", "k3", body)
	e.mustRead("b", "k3", body)
}

// TestPebbleENOSPCReleasesTheReserve: the disk fills while the store runs
// (another process's file). A delete must still commit: its WAL write meets
// ENOSPC, Pebble's disk-full handler releases the reserve, and the write is
// retried, where without the reserve Pebble would fail the WAL write and
// stop the process.
func TestPebbleENOSPCReleasesTheReserve(t *testing.T) {
	dir := smallfs.Mount(t, 32<<20)
	e := newEnv(t, store.Options{Dir: filepath.Join(dir, "store")})
	e.createBucket(1, "b")
	body := randBytes(rand.New(rand.NewPCG(7, 8)), 1<<10)
	const n = 2000 // their deletes' log entries fill more than the WAL's last page
	for i := range n {
		e.put(1, "b", fmt.Sprint("k", i), body)
	}
	smallfs.Fill(t, dir, 0)
	for i := range n {
		e.del(1, "b", fmt.Sprint("k", i))
	}
	if e.s.ReserveReleased() != 1 {
		t.Fatalf("reserve released %d times, want once", e.s.ReserveReleased())
	}
	e.reopen()
	if _, _, err := e.read("b", "k0"); !errors.Is(err, store.ErrNoSuchKey) {
		t.Fatalf("read a deleted object after reopen: %v", err)
	}
}

// TestRecentSpace: a write's usage (RecentSpace) reuses the last statfs
// while it is recent, with twice the bytes put since taken off Avail, and
// measures again once it is 100 ms old or a quarter of a memtable was put
// since it, unless another caller is measuring already.
func TestRecentSpace(t *testing.T) {
	now := time.Unix(1000, 0)
	defer store.SetSpaceClockForTest(func() time.Time { return now })()
	e := newEnv(t, store.Options{MemTableSize: 1 << 20})
	e.createBucket(1, "b")
	sp := e.s.Space()
	if sp.Total == 0 {
		t.Skip("the test directory's filesystem does not report its usage")
	}
	measures := func() int64 { return e.s.Stats().SpaceMeasures }
	body := make([]byte, 4<<10)
	// put is an OSD's: checked with the usage RecentSpace gives.
	put := func(key string) {
		t.Helper()
		sp := e.s.RecentSpace()
		le := putEntry(e.entry(1, osdpb.OpKind_OP_PUT, "b", key), body)
		ck, err := e.s.Check(e.ctx, le, body, store.CheckOptions{Space: &sp})
		if err == nil {
			err = e.s.ApplyChecked(e.ctx, 1, le, body, ck)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	before := measures()
	put("k0")
	got := e.s.RecentSpace()
	if n := measures() - before; n != 0 {
		t.Fatalf("a put and RecentSpace right after Space measured the disk %d times, want 0", n)
	}
	if want := sp.Avail - 2*uint64(len(body)); got.Avail != want || got.Total != sp.Total {
		t.Fatalf("RecentSpace after a %d-byte put: %+v, want Avail %d of %d", len(body), got, want, sp.Total)
	}

	now = now.Add(100 * time.Millisecond)
	// While another caller measures anew, a stale measure is taken as it is.
	release := e.s.HoldSpaceMeasureForTest()
	if got := e.s.RecentSpace(); measures() != before || got.Avail != sp.Avail-2*uint64(len(body)) {
		t.Fatalf("RecentSpace while another measures: %d measures, Avail %d; want none, %d", measures()-before, got.Avail, sp.Avail-2*uint64(len(body)))
	}
	release()
	e.s.RecentSpace()
	if n := measures() - before; n != 1 {
		t.Fatalf("RecentSpace of a 100 ms old measure measured the disk %d times, want 1", n)
	}

	// The next 63 puts reuse that measure; with the 64th, a quarter of the
	// 1 MiB memtable was put since it.
	for i := range 64 {
		put(fmt.Sprint("q", i))
	}
	if n := measures() - before; n != 1 {
		t.Fatalf("64 recent puts measured the disk %d times in all, want 1", n)
	}
	e.s.RecentSpace()
	if n := measures() - before; n != 2 {
		t.Fatalf("RecentSpace after 256 KiB of puts measured the disk %d times in all, want 2", n)
	}
}

// TestSpaceRatio: the fullness the full ratios compare is df's Use%, used
// over used and available: blocks a filesystem keeps back for root are
// neither (on a VM disk keeping back two thirds, counting them used said
// 71% where df said 22%).
func TestSpaceRatio(t *testing.T) {
	const g = 1 << 30
	for _, c := range []struct {
		sp   store.Space
		used uint64
		want float64
	}{
		{store.Space{Total: 252 * g, Avail: 72 * g, InUse: 20 * g}, 20 * g, 20.0 / 92}, // the probe's disk
		{store.Space{Total: 100 * g, Avail: 0, InUse: 95 * g}, 95 * g, 1},              // ext4 full to non-root writers
		{store.Space{Total: 100 * g, Avail: 45 * g, InUse: 50 * g}, 50 * g, 50.0 / 95}, // 5% kept for root
		{store.Space{Total: 100 * g, Avail: 30 * g}, 70 * g, 0.7},                      // in use unknown
		{store.Space{}, 0, 0}, // unknown filesystem
	} {
		if got := c.sp.Used(); got != c.used {
			t.Errorf("%+v: Used %d, want %d", c.sp, got, c.used)
		}
		if got := c.sp.Ratio(); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%+v: Ratio %v, want %v", c.sp, got, c.want)
		}
	}
}
