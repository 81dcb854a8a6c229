package osd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestReReplicationFigures measures re-replication after an out: 4 OSD
// processes, 3 replicas, min_size 2, 32 PGs, filled with 1 GiB of 4 MiB
// objects. A fixed client load (2 putters of new 1 MiB objects, 2 getters
// of the filled objects) runs for a window with no recovery (the
// baseline); its puts are read back and deleted, so that the data to move
// is the fill's alone. Then one OSD is SIGKILLed and left down, the mon
// marks it down and, after the down-out interval (5 s), out, and the same
// load runs from the out until every PG is active+clean again. It reports
// the time from the out to active+clean, the bytes the survivors recovered
// (their beacons' counters, as the mon stores them) and the victim's share
// of the fill (3/4 of it on average) per second, and the load's put and
// get MB/s in both windows. At the end every object reads back intact and
// the survivors' stores hold 3 copies of each. It takes minutes, so it
// runs only when asked:
//
//	OSPREY_REREPLICATION_FIGURES=1 go test ./osd -run TestReReplicationFigures -v -timeout 30m
//
// OSPREY_REREPLICATION_BYTES (default 1 GiB) is the fill,
// OSPREY_REREPLICATION_BYTES_PER_SEC (default 0: none) caps each OSD's
// recovery, OSPREY_REREPLICATION_WINDOW (seconds, default 15) is the
// baseline's window.
func TestReReplicationFigures(t *testing.T) {
	if os.Getenv("OSPREY_REREPLICATION_FIGURES") == "" {
		t.Skip("minutes long: set OSPREY_REREPLICATION_FIGURES=1")
	}
	if testing.Short() {
		t.Skip("multi-process, minutes long")
	}
	const (
		objSize  = 4 << 20 // the fill's objects
		loadSize = 1 << 20 // the load's puts
		victim   = 1       // the process killed
	)
	total := int64(envInt("OSPREY_REREPLICATION_BYTES", 1<<30))
	capBps := int64(envInt("OSPREY_REREPLICATION_BYTES_PER_SEC", 0))
	window := time.Duration(envInt("OSPREY_REREPLICATION_WINDOW", 15)) * time.Second
	nObj := int(max(1, total/objSize))
	total = int64(nObj) * objSize

	mc := startMonCluster(t, monClusterOptions{OSDs: 4, RecoveryBytesPerSec: capBps,
		Mon: mon.Config{HeartbeatGrace: 3 * time.Second, DownOutInterval: 5 * time.Second,
			Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 3, MinSize: 2, PgCount: 32}}})
	// The whole cluster is on one disk: 3 copies of the fill and of the
	// load's puts (at most 50 MB/s for two windows: about twice what a
	// 2-core machine does), and 2 GiB for Pebble's WALs and etcd.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(mc.dir, &fs); err != nil {
		t.Fatal(err)
	}
	avail := int64(fs.Bavail) * int64(fs.Bsize)
	need := 3*(total+2*int64(window.Seconds())*50e6) + 2<<30
	if avail < need {
		t.Skipf("%s free in %s; the figures need about %s", mib(avail), mc.dir, mib(need))
	}
	t.Logf("fill %d objects of %s (%s), recovery cap %s per OSD, %s free on the disk",
		nObj, mib(objSize), mib(total), mibOrNone(capBps), mib(avail))

	ctx := ctxT(t, 25*time.Minute)
	clean := func(s *mon.Status) bool {
		return s.PGs["active+clean"] == s.PGTotal && s.DegradedObjects == 0 && s.MisplacedObjects == 0
	}
	mc.waitStatus(ctx, "4 OSDs up, every PG active+clean", func(s *mon.Status) bool {
		return s.OSDs.Up == 4 && clean(s) && s.Health.Status == mon.HealthOK
	})
	cl := mc.client(t, time.Minute)
	const bucket = "rerep"
	if err := cl.MakeBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}

	// The fill: 4 writers; each object's bytes follow from its key, and
	// its CRC is kept for the getters.
	fill := &rerepData{size: map[string]int{}, crc: map[string]uint32{}}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < nObj; i += 4 {
				key := fmt.Sprintf("fill/%06d", i)
				body := rerepContent(key, objSize)
				if _, err := osdtest.Put(ctx, cl, bucket, key, body, client.PutOptions{}); err != nil {
					errs <- fmt.Errorf("fill %s: %w", key, err)
					return
				}
				fill.add(key, body)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	fillTime := time.Since(start)
	t.Logf("filled %s in %v (%.1f MB/s of client puts)", mib(total), fillTime.Round(time.Millisecond), mbps(total, fillTime))
	mc.waitStatus(ctx, "every PG active+clean after the fill", clean)

	// Baseline: the load for the window, no recovery.
	base := startRereplLoad(ctx, cl, bucket, "base", 1, fill, loadSize)
	time.Sleep(window) // the measurement window
	baseRes := base.stop()
	t.Logf("baseline: %s", baseRes)
	// The baseline's puts read back intact, then go: the data to move is
	// the fill's alone.
	readBack(ctx, t, cl, bucket, baseRes.acked)
	if err := cl.RemoveObjects(ctx, bucket, baseRes.acked.keys); err != nil {
		t.Fatal(err)
	}
	mc.waitStatus(ctx, "every PG active+clean after the baseline", clean)

	// The victim's share: every copy it held (in the map before the kill)
	// must be made again on a survivor.
	before := mc.mon.Map()
	pool, ok := before.PoolByName("default")
	if !ok {
		t.Fatal("no default pool")
	}
	id := mc.idOf(victim)
	var share int64
	for key, n := range fill.size {
		if slices.Contains(before.ActingSet(pool.Id, placement.PGOf(pool, bucket, key)), id) {
			share += int64(n)
		}
	}
	ec := rerepEtcd(t, mc)

	killed := time.Now()
	mc.kill(victim, syscall.SIGKILL)
	downAt := waitMap(ctx, t, mc, "osd down", func(o *osdpb.OSDInfo) bool { return !o.Up }, id)
	statsBefore := recoveryCounters(ctx, t, ec)
	outAt := waitMap(ctx, t, mc, "osd out", func(o *osdpb.OSDInfo) bool { return !o.In }, id)
	outEpoch := mc.mon.Map().Epoch()
	t.Logf("osd.%d SIGKILLed: down after %v, out after %v more (epoch %d)", id,
		downAt.Sub(killed).Round(time.Millisecond), outAt.Sub(downAt).Round(time.Millisecond), outEpoch)

	// The same load, from the out until every PG is active+clean.
	during := startRereplLoad(ctx, cl, bucket, "recovery", 2, fill, loadSize)
	var peak float64
	var states []string
	lastLog := time.Time{}
	// Each PG's state over time, from its primary's beacons: when it was
	// first seen not clean after the out, and when last seen turning
	// clean, to tell which PGs the slow puts waited for.
	timeline := map[uint32]*rerepPGTimes{}
	st := mc.waitStatus(ctx, "every PG active+clean after the out", func(s *mon.Status) bool {
		peak = max(peak, s.RecoveryBytesPerSec)
		now := time.Since(outAt)
		for pg, state := range pgStates(ctx, t, ec, pool.Id, outEpoch) {
			tl := timeline[pg]
			if tl == nil {
				tl = &rerepPGTimes{busyFrom: -1, cleanAt: -1}
				timeline[pg] = tl
			}
			switch {
			case state != "active+clean" && tl.busyFrom < 0:
				tl.busyFrom, tl.states = now, []string{state}
			case state != "active+clean" && !slices.Contains(tl.states, state):
				tl.states = append(tl.states, state)
			case state == "active+clean" && tl.busyFrom >= 0 && tl.cleanAt < tl.busyFrom:
				tl.cleanAt = now
			}
			if state != "active+clean" {
				tl.cleanAt = -1
			}
		}
		if s.Epoch >= outEpoch {
			for state := range s.PGs {
				if !slices.Contains(states, state) {
					states = append(states, state)
				}
			}
		}
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			t.Logf("  +%v: epoch %d, pgs %v, %d degraded, %d misplaced, recovery %.1f MB/s",
				time.Since(outAt).Round(100*time.Millisecond), s.Epoch, s.PGs, s.DegradedObjects, s.MisplacedObjects, s.RecoveryBytesPerSec/1e6)
		}
		return s.OSDs.In == 3 && s.Epoch >= outEpoch && clean(s)
	})
	cleanAt := time.Now()
	duringRes := during.stop()
	elapsed := cleanAt.Sub(outAt)
	t.Logf("recovery window: %s", duringRes)
	// The puts that took over a second: which PG, and what it was doing.
	offset := during.start.Sub(outAt)
	for _, op := range duringRes.slow {
		pg := placement.PGOf(pool, bucket, op.key)
		tl := timeline[pg]
		if tl == nil {
			tl = &rerepPGTimes{busyFrom: -1, cleanAt: -1}
		}
		t.Logf("  slow %s %s: +%v to +%v after the out; pg %d (acting set %v, then %v) not clean from +%v to +%v: %v",
			op.what, op.key, (offset + op.start).Round(100*time.Millisecond), (offset + op.start + op.d).Round(100*time.Millisecond),
			pg, before.ActingSet(pool.Id, pg), mc.mon.Map().ActingSet(pool.Id, pg),
			tl.busyFrom.Round(100*time.Millisecond), tl.cleanAt.Round(100*time.Millisecond), tl.states)
	}
	slices.Sort(states)
	t.Logf("active+clean %v after the out (epoch %d); PG states seen meanwhile: %v; status peak recovery %.1f MB/s",
		elapsed.Round(time.Millisecond), st.Epoch, states, peak/1e6)

	// What the survivors recovered, from their beacons after the clean.
	survivors := []uint32{mc.idOf(0), mc.idOf(2), mc.idOf(3)}
	statsAfter := map[uint32]rerepBeacon{}
	for deadline := time.Now().Add(10 * time.Second); ; {
		statsAfter = recoveryCounters(ctx, t, ec)
		fresh := true
		for _, s := range survivors {
			fresh = fresh && statsAfter[s].At > cleanAt.UnixNano()
		}
		if fresh {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no beacon from every survivor 10s after the clean: %+v", statsAfter)
		}
		time.Sleep(100 * time.Millisecond) // polling interval: the next beacons
	}
	var recovered int64
	per := map[uint32]string{}
	for _, s := range survivors {
		d := int64(statsAfter[s].RecoveryBytes) - int64(statsBefore[s].RecoveryBytes)
		recovered += d
		per[s] = mib(d)
	}
	t.Logf("recovered per survivor (beacon counters): %v; the victim's share was %s", per, mib(share))
	if recovered < share*9/10 {
		t.Errorf("the survivors recovered %s, less than the victim's share %s", mib(recovered), mib(share))
	}

	t.Logf("re-replication after an out (4 OSD processes, size 3, min_size 2, 32 PGs, recovery cap %s, 2 cores, one disk):", mibOrNone(capBps))
	t.Logf("| fill | victim's share | time to active+clean | recovered | recovery MB/s | victim's share / time |")
	t.Logf("|---|---|---|---|---|---|")
	t.Logf("| %s (%d x %s) | %s | %.2f s | %s | %.1f | %.1f |", mib(total), nObj, mib(objSize), mib(share),
		elapsed.Seconds(), mib(recovered), mbps(recovered, elapsed), mbps(share, elapsed))
	t.Logf("| load (2 putters of %s, 2 getters of %s) | window | put MB/s | get MB/s | puts/s | gets/s | retriable failures |", mib(loadSize), mib(objSize))
	t.Logf("|---|---|---|---|---|---|---|")
	for _, r := range []struct {
		name string
		res  rerepResult
	}{{"no recovery", baseRes}, {"during recovery", duringRes}} {
		t.Logf("| %s | %.1f s | %.1f | %.1f | %.1f | %.1f | %d puts, %d gets |", r.name, r.res.window.Seconds(),
			mbps(r.res.putBytes, r.res.window), mbps(r.res.getBytes, r.res.window),
			float64(r.res.puts)/r.res.window.Seconds(), float64(r.res.gets)/r.res.window.Seconds(), r.res.putFails, r.res.getFails)
	}
	if baseRes.putBytes > 0 && baseRes.getBytes > 0 {
		t.Logf("during recovery / without: puts %.2fx, gets %.2fx",
			mbps(duringRes.putBytes, duringRes.window)/mbps(baseRes.putBytes, baseRes.window),
			mbps(duringRes.getBytes, duringRes.window)/mbps(baseRes.getBytes, baseRes.window))
	}
	for _, v := range append(baseRes.violations, duringRes.violations...) {
		t.Errorf("getter: %s", v)
	}

	// Every object reads back intact through the client, then the
	// survivors' stores hold it on each member of its acting set.
	objects := fill.merged(duringRes.acked)
	readBack(ctx, t, cl, bucket, objects)
	rerepVerifyStores(ctx, t, mc, bucket, objects, []int{0, 2, 3})
}

// rerepContent is key's n bytes.
func rerepContent(key string, n int) []byte {
	h := fnv.New64a()
	io.WriteString(h, key)
	return osdtest.Payload(n, h.Sum64())
}

// readBack reads every object of d back through cl and compares it with
// its content.
func readBack(ctx context.Context, t *testing.T, cl *client.Client, bucket string, d *rerepData) {
	t.Helper()
	start := time.Now()
	for key, n := range d.size {
		got, _, err := osdtest.Get(ctx, cl, bucket, key, client.GetOptions{})
		if err != nil || !bytes.Equal(got, rerepContent(key, n)) {
			t.Fatalf("%s: %v (%d bytes, want %d)", key, err, len(got), n)
		}
	}
	t.Logf("%d objects read back intact in %v", len(d.size), time.Since(start).Round(time.Millisecond))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// rerepData is a set of acknowledged objects: their sizes and CRCs.
type rerepData struct {
	mu   sync.Mutex
	keys []string
	size map[string]int
	crc  map[string]uint32
}

func (d *rerepData) add(key string, body []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.size[key]; !ok {
		d.keys = append(d.keys, key)
	}
	d.size[key], d.crc[key] = len(body), crc32.Checksum(body, castagnoli)
}

// merged is d with o's objects added.
func (d *rerepData) merged(o *rerepData) *rerepData {
	out := &rerepData{size: map[string]int{}, crc: map[string]uint32{}}
	for _, x := range []*rerepData{d, o} {
		x.mu.Lock()
		for _, k := range x.keys {
			out.keys = append(out.keys, k)
			out.size[k], out.crc[k] = x.size[k], x.crc[k]
		}
		x.mu.Unlock()
	}
	return out
}

// rerepLoad is the figures' client load: 2 putters of new objects and 2
// getters of random filled objects, each checked against its CRC.
type rerepLoad struct {
	stopCh chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	start time.Time
	ended bool // ops that end after the window are not counted
	res   rerepResult
}

type rerepResult struct {
	window                       time.Duration
	putBytes, getBytes           int64
	puts, gets                   int
	putFails, getFails           int
	violations                   []string
	acked                        *rerepData // the puts acknowledged (in the window or after)
	putLatencies, getLatencies   []time.Duration
	putLatencyMax, getLatencyMax time.Duration
	// putMaxAt, getMaxAt: when the slowest op started, from the window's
	// start.
	putMaxAt, getMaxAt time.Duration
	// slow are the ops (counted or not) that took over a second.
	slow []rerepSlowOp
}

type rerepSlowOp struct {
	what, key string
	start, d  time.Duration // from the window's start
}

// rerepPGTimes is one PG's recovery as its primary's beacons showed it,
// from the out (-1: not seen).
type rerepPGTimes struct {
	busyFrom, cleanAt time.Duration
	states            []string
}

func (r rerepResult) String() string {
	p50 := func(l []time.Duration) time.Duration {
		if len(l) == 0 {
			return 0
		}
		l = slices.Clone(l)
		slices.Sort(l)
		return l[len(l)/2].Round(time.Millisecond)
	}
	return fmt.Sprintf("%.1f s: %d puts (%.1f MB/s, p50 %v, max %v at +%v, %d failed), %d gets (%.1f MB/s, p50 %v, max %v at +%v, %d failed)",
		r.window.Seconds(), r.puts, mbps(r.putBytes, r.window), p50(r.putLatencies), r.putLatencyMax.Round(time.Millisecond),
		r.putMaxAt.Round(time.Millisecond), r.putFails, r.gets, mbps(r.getBytes, r.window), p50(r.getLatencies),
		r.getLatencyMax.Round(time.Millisecond), r.getMaxAt.Round(time.Millisecond), r.getFails)
}

func startRereplLoad(ctx context.Context, cl *client.Client, bucket, phase string, seed uint64, fill *rerepData, putSize int) *rerepLoad {
	l := &rerepLoad{stopCh: make(chan struct{}), start: time.Now(),
		res: rerepResult{acked: &rerepData{size: map[string]int{}, crc: map[string]uint32{}}}}
	stopped := func() bool {
		select {
		case <-l.stopCh:
			return true
		default:
			return ctx.Err() != nil
		}
	}
	for g := range 2 {
		l.wg.Go(func() {
			for n := 0; !stopped(); n++ {
				key := fmt.Sprintf("load/%s/%d/%06d", phase, g, n)
				body := rerepContent(key, putSize)
				t0 := time.Now()
				_, err := osdtest.Put(ctx, cl, bucket, key, body, client.PutOptions{})
				d := time.Since(t0)
				if err == nil {
					l.res.acked.add(key, body)
				}
				l.mu.Lock()
				if d > time.Second {
					l.res.slow = append(l.res.slow, rerepSlowOp{what: "put", key: key, start: t0.Sub(l.start), d: d})
				}
				if !l.ended {
					if err != nil {
						l.res.putFails++
					} else {
						l.res.puts++
						l.res.putBytes += int64(putSize)
						l.res.putLatencies = append(l.res.putLatencies, d)
						if d > l.res.putLatencyMax {
							l.res.putLatencyMax, l.res.putMaxAt = d, t0.Sub(l.start)
						}
					}
				}
				l.mu.Unlock()
			}
		})
	}
	for g := range 2 {
		rng := rand.New(rand.NewPCG(uint64(g), seed))
		l.wg.Go(func() {
			for !stopped() {
				key := fill.keys[rng.IntN(len(fill.keys))]
				t0 := time.Now()
				n, crc, err := rerepGet(ctx, cl, bucket, key)
				d := time.Since(t0)
				l.mu.Lock()
				if d > time.Second {
					l.res.slow = append(l.res.slow, rerepSlowOp{what: "get", key: key, start: t0.Sub(l.start), d: d})
				}
				switch {
				case ctx.Err() != nil:
				case errors.Is(err, client.ErrNoSuchKey):
					l.res.violations = append(l.res.violations, fmt.Sprintf("%s at %s: NoSuchKey", key, time.Now().Format(time.StampMilli)))
				case err != nil:
					if !l.ended {
						l.res.getFails++
					}
				case n != int64(fill.size[key]) || crc != fill.crc[key]:
					l.res.violations = append(l.res.violations, fmt.Sprintf("%s: %d bytes, crc %08x (want %d, %08x)", key, n, crc, fill.size[key], fill.crc[key]))
				case !l.ended:
					l.res.gets++
					l.res.getBytes += n
					l.res.getLatencies = append(l.res.getLatencies, d)
					if d > l.res.getLatencyMax {
						l.res.getLatencyMax, l.res.getMaxAt = d, t0.Sub(l.start)
					}
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

// stop ends the window now, waits for the ops in flight (not counted),
// and returns what the window did.
func (l *rerepLoad) stop() rerepResult {
	l.mu.Lock()
	l.ended = true
	l.res.window = time.Since(l.start)
	l.mu.Unlock()
	close(l.stopCh)
	l.wg.Wait()
	return l.res
}

// rerepGet reads bucket/key, returning its length and CRC.
func rerepGet(ctx context.Context, cl *client.Client, bucket, key string) (int64, uint32, error) {
	o, err := cl.GetObject(ctx, bucket, key, client.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	defer o.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, o)
	return n, h.Sum32(), err
}

// rerepEtcd is a client of the mon's etcd, to read the OSDs' last beacons
// as the mon stores them (the status gives only their rates).
func rerepEtcd(t *testing.T, mc *monCluster) *clientv3.Client {
	ec, err := clientv3.New(clientv3.Config{Endpoints: mc.etcd.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ec.Close() })
	return ec
}

// rerepBeacon is what the figures read of an OSD's last beacon record
// (mon's beaconRecord, stored as JSON under /osprey/stats/<id>).
type rerepBeacon struct {
	ID            uint32 `json:"id"`
	At            int64  `json:"at_unix_nano"`
	RecoveryBytes uint64 `json:"recovery_bytes"`
	PGs           []struct {
		Pool  uint32 `json:"pool"`
		PG    uint32 `json:"pg"`
		State string `json:"state"`
		Epoch uint64 `json:"epoch"`
	} `json:"pgs"`
}

// pgStates is the state of each PG of pool that a primary reported at
// epoch or later (the newest report when two OSDs report one).
func pgStates(ctx context.Context, t *testing.T, ec *clientv3.Client, pool uint32, epoch uint64) map[uint32]string {
	out, at := map[uint32]string{}, map[uint32]uint64{}
	for _, b := range recoveryCounters(ctx, t, ec) {
		for _, p := range b.PGs {
			if p.Pool == pool && p.Epoch >= epoch && p.Epoch >= at[p.PG] {
				out[p.PG], at[p.PG] = p.State, p.Epoch
			}
		}
	}
	return out
}

// recoveryCounters reads every OSD's last beacon record.
func recoveryCounters(ctx context.Context, t *testing.T, ec *clientv3.Client) map[uint32]rerepBeacon {
	t.Helper()
	resp, err := ec.Get(ctx, "/osprey/stats/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]rerepBeacon{}
	for _, kv := range resp.Kvs {
		var b rerepBeacon
		if err := json.Unmarshal(kv.Value, &b); err != nil {
			t.Fatalf("stats record %s: %v", kv.Key, err)
		}
		out[b.ID] = b
	}
	if len(out) == 0 {
		t.Fatal("no OSD stats records under /osprey/stats/ in etcd (has the mon's key layout changed?)")
	}
	return out
}

// waitMap polls the mon's map until OSD id's entry satisfies ok, and
// returns when it saw it.
func waitMap(ctx context.Context, t *testing.T, mc *monCluster, what string, ok func(*osdpb.OSDInfo) bool, id uint32) time.Time {
	t.Helper()
	for {
		if o, found := mc.mon.Map().OSD(id); found && ok(o) {
			return time.Now()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s of osd.%d at epoch %d", what, id, mc.mon.Map().Epoch())
		case <-time.After(10 * time.Millisecond): // polling interval
		}
	}
}

// rerepVerifyStores stops the processes procs and checks, in their
// stores, that every member of each object's acting set in the mon's
// final map holds its bytes (by length and CRC).
func rerepVerifyStores(ctx context.Context, t *testing.T, mc *monCluster, bucket string, objects *rerepData, procs []int) {
	t.Helper()
	start := time.Now()
	copies := mc.checkStoredCopies(ctx, procs, bucket, objects.keys, func(key string, got []byte) bool {
		return len(got) == objects.size[key] && crc32.Checksum(got, castagnoli) == objects.crc[key]
	})
	t.Logf("3 copies of each of %d objects in the survivors' stores (per OSD %v), checked in %v",
		len(objects.keys), copies, time.Since(start).Round(time.Millisecond))
}

func mib(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}

func mibOrNone(n int64) string {
	if n <= 0 {
		return "none"
	}
	return mib(n) + "/s"
}

// mbps is n bytes over d in MB/s (10^6 bytes).
func mbps(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / 1e6 / d.Seconds()
}
