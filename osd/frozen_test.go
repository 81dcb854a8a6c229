package osd_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestFrozenPrimaryBlamesNoReplica: an OSD frozen (SIGSTOP) past its rep
// timeout, not long enough to be marked down, finds on waking its
// replicas' acks of the writes it led waiting, unread. It must not fail
// those writes and report its healthy replicas slow: SLOW_OPS may name
// the frozen OSD (the writes the others led waited for it), never a
// replica of the frozen one's writes.
func TestFrozenPrimaryBlamesNoReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("runs OSD processes")
	}
	mc := startMonCluster(t, monClusterOptions{OSDs: 3, Defaults: true,
		Mon: mon.Config{Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 3, MinSize: 2, PgCount: 16}}})
	ctx := ctxT(t, 3*time.Minute)
	mc.waitStatus(ctx, "HEALTH_OK", func(s *mon.Status) bool {
		return s.OSDs.Up == 3 && s.PGs["active+clean"] == s.PGTotal && s.Health.Status == mon.HealthOK
	})
	cl := mc.client(t, 5*time.Minute)
	if err := cl.MakeBucket(ctx, "frozen"); err != nil {
		t.Fatal(err)
	}
	const victim = 0
	id := mc.idOf(victim)
	mp := mc.mon.Map()
	pool, _ := mp.Pool(1)
	// Writers of keys the victim leads, so that it has writes in flight
	// as it freezes, their RepOps sent.
	var (
		mu    sync.Mutex
		acked []string
		stop  = make(chan struct{})
		wg    sync.WaitGroup
	)
	for wr := range 8 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%d", wr, n)
				if mp.ActingSet(pool.Id, placement.PGOf(pool, "frozen", key))[0] != id {
					continue
				}
				if _, err := osdtest.Put(ctx, cl, "frozen", key, []byte(key), client.PutOptions{}); err == nil {
					mu.Lock()
					acked = append(acked, key)
					mu.Unlock()
				}
			}
		})
	}
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	osdtest.Eventually(t, 30*time.Second, "writes to the victim's PGs flowing", func() bool { return count() >= 50 })

	p := mc.procs[victim]
	// The default rep timeout (10 s) passes; the mon's grace (20 s)
	// does not.
	p.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(12 * time.Second) // the freeze itself: what the test is about
	p.cmd.Process.Signal(syscall.SIGCONT)
	before := count()
	osdtest.Eventually(t, 30*time.Second, "writes to the victim's PGs flowing again", func() bool { return count() >= before+50 })
	flowing := time.Now()

	// Its beacons report what its rep timers did, every second, and the
	// status keeps a rep timeout for a minute: watch a few beacons from
	// the moment writes flow again.
	blame := fmt.Sprintf("osd.%d: ", id)
	for time.Since(flowing) < 6*time.Second {
		st, err := mc.mon.StatusDetail(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range st.Health.Detail {
			for _, line := range c.Detail {
				if strings.HasPrefix(line, blame) && strings.Contains(line, "failed after waiting") {
					t.Fatalf("osd.%d, frozen, blames a replica once awake: %s", id, line)
				}
			}
		}
		time.Sleep(200 * time.Millisecond) // polling the status
	}
	if info, _ := mc.mon.Map().OSD(id); !info.Up {
		t.Fatalf("osd.%d marked down by a freeze shorter than the grace", id)
	}
	halt()
	for _, key := range acked {
		got, _, err := osdtest.Get(ctx, cl, "frozen", key, client.GetOptions{})
		if err != nil || string(got) != key {
			t.Fatalf("%s: %q, %v", key, got, err)
		}
	}
}

// TestClientAsksForTheMapAfterNoReply: a client without a mon (seeds
// only) whose op gets no reply from its primary (frozen, marked down in a
// map the client has not seen) asks for the map before it retries, and
// goes to the new primary: it does not spend its retries on the frozen
// one (three attempts of OpTimeout each ran out a minute's RetryFor).
func TestClientAsksForTheMapAfterNoReply(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, func(o *client.Options) { o.OpTimeout, o.RetryFor = 500*time.Millisecond, 30*time.Second })
	if err := cl.MakeBucket(ctx, "frozen"); err != nil {
		t.Fatal(err)
	}
	c.WaitSettled(t, 30*time.Second)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	set := c.Map.ActingSet(pool.Id, placement.PGOf(pool, "frozen", "k"))
	frozen := set[0]
	var dropped atomic.Int32
	osd.ClientReceived.Set(func(id uint32, typ osdpb.MsgType) bool {
		if id != frozen {
			return false
		}
		if typ == osdpb.MsgType_MSG_PUT_OBJECT {
			dropped.Add(1)
		}
		return true
	})
	defer osd.ClientReceived.Set(nil)
	down, err := c.Map.With(func(pb *osdpb.ClusterMap) { pb.Osds[frozen].Up = false })
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range set[1:] {
		if err := c.OSDs[id].AdoptMap(down); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := osdtest.Put(ctx, cl, "frozen", "k", []byte("v"), client.PutOptions{}); err != nil {
		t.Fatalf("a put whose primary froze: %v", err)
	}
	if n := dropped.Load(); n != 1 {
		t.Fatalf("%d attempts went to the frozen primary; want 1, then the new map", n)
	}
}
