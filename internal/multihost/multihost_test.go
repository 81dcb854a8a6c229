//go:build linux

package multihost

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/netns"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/msgr/transports"
)

// TestClusterForms: a mon, three OSDs and the S3 gateway, each a host of
// its own, form a cluster from the mon's address alone, with
// authentication on: the OSDs boot with the bootstrap keyring the mon
// wrote and register the lab's addresses (not loopback) on both networks;
// the client's host puts and gets objects over the OSDs' transport, and
// through the gateway with the aws CLI, and each path reads what the
// other wrote.
func TestClusterForms(t *testing.T) {
	for _, tr := range []string{"tcp", "rdma+tcp"} {
		t.Run(tr, func(t *testing.T) {
			if tr != "tcp" && !transports.RDMABuilt {
				t.Skip("the RDMA transport is not built in (go test -tags rdma)")
			}
			c := startCluster(t, clusterOptions{Transport: tr, Mons: 1, OSDs: 3, Gateway: true})
			ctx := ctxFor(t, time.Minute)

			var tree []mon.OSDTreeEntry
			if err := json.Unmarshal([]byte(c.mustOsprey(ctx, "osd", "tree", "--json")), &tree); err != nil {
				t.Fatal(err)
			}
			if len(tree) != 3 {
				t.Fatalf("osd tree has %d OSDs, want 3", len(tree))
			}
			for _, o := range tree {
				nd := c.osds[slices.IndexFunc(c.osds, func(d *daemon) bool { return d.node.Name == o.Host })].node
				wantPub := fmt.Sprintf("%s://%s:%d", tr, nd.Addr(c.pub), osdPublic)
				wantClu := fmt.Sprintf("%s://%s:%d", tr, nd.Addr(c.clu), osdCluster)
				if o.PublicAddr != wantPub || o.ClusterAddr != wantClu || !o.Up || !o.In {
					t.Fatalf("osd.%d on %s: public %s cluster %s up %v in %v; want %s and %s, up and in",
						o.ID, o.Host, o.PublicAddr, o.ClusterAddr, o.Up, o.In, wantPub, wantClu)
				}
			}

			c.mustOsprey(ctx, "mb", bucket)
			want := c.putObjects(ctx, "cli", 12, 40<<10, 1)
			src := filepath.Join(c.dir, "cli")
			c.checkObjects(ctx, "osprey://"+bucket+"/cli/", want)

			// Through the gateway: the aws CLI on the client's host writes an
			// object and reads one the osprey CLI wrote.
			aws := lookAWS(t)
			body := osdtest.Payload(300<<10, 7)
			if err := os.WriteFile(filepath.Join(c.dir, "s3-up"), body, 0o644); err != nil {
				t.Fatal(err)
			}
			c.aws(ctx, aws, "s3", "cp", filepath.Join(c.dir, "s3-up"), "s3://"+bucket+"/s3/up")
			c.aws(ctx, aws, "s3", "cp", "s3://"+bucket+"/cli/obj-003", filepath.Join(c.dir, "s3-down"))
			mustSameFile(t, filepath.Join(c.dir, "s3-down"), filepath.Join(src, "obj-003"))
			c.mustOsprey(ctx, "get", bucket+"/s3/up", filepath.Join(c.dir, "s3-up-back"))
			mustSameFile(t, filepath.Join(c.dir, "s3-up-back"), filepath.Join(c.dir, "s3-up"))
		})
	}
}

func mustSameFile(t *testing.T, a, b string) {
	t.Helper()
	ba, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(ba) != sha256.Sum256(bb) {
		t.Fatalf("%s (%d bytes) and %s (%d bytes) differ", a, len(ba), b, len(bb))
	}
}

// lookAWS is the aws CLI; the gateway check is skipped without it unless
// OSPREY_REQUIRE_AWSCLI is set (make test).
func lookAWS(t *testing.T) string {
	t.Helper()
	aws, err := exec.LookPath("aws")
	if err != nil {
		if os.Getenv("OSPREY_REQUIRE_AWSCLI") != "" {
			t.Fatalf("OSPREY_REQUIRE_AWSCLI is set and there is no aws on PATH: %v", err)
		}
		t.Skip("no aws CLI (apt-get install awscli) for the gateway check")
	}
	return aws
}

// aws runs the aws CLI on the client's host against the gateway.
func (c *cluster) aws(ctx context.Context, aws string, args ...string) {
	c.t.Helper()
	home := filepath.Join(c.dir, "aws-home")
	os.MkdirAll(home, 0o700)
	cmd := c.client.Command(ctx, aws, append([]string{"--endpoint-url", c.gwURL}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "AWS_CONFIG_FILE="+filepath.Join(home, "none"),
		"AWS_SHARED_CREDENTIALS_FILE="+filepath.Join(home, "none"), "AWS_ACCESS_KEY_ID="+c.s3Access,
		"AWS_SECRET_ACCESS_KEY="+c.s3Secret, "AWS_DEFAULT_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER=")
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("aws %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestOSDCutOff: an OSD whose links go down is marked down by the mon;
// writes go on with min_size (2 of 3) and every object reads back; once
// the links are back, the OSD is up again, recovery finishes (every PG
// active+clean, nothing degraded), and every object written before,
// during and after the cut reads back with its checksum.
// OSPREY_MULTIHOST_SOAK=N repeats the cut N times, on each OSD in turn.
func TestOSDCutOff(t *testing.T) {
	cycles := 1
	if v := os.Getenv("OSPREY_MULTIHOST_SOAK"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("OSPREY_MULTIHOST_SOAK=%q: want a count of cuts, 1 or more", v)
		}
		cycles = n
	}
	c := startCluster(t, clusterOptions{Transport: "tcp", Mons: 1, OSDs: 3})
	ctx := ctxFor(t, time.Minute+time.Duration(cycles)*45*time.Second)
	c.mustOsprey(ctx, "mb", bucket)
	written := map[string]objects{"before": c.putObjects(ctx, "before", 10, 20<<10, 1)}

	for i := range cycles {
		cut := c.osds[(2+i)%len(c.osds)].node
		start := time.Now()
		if err := cut.Cut(ctx); err != nil {
			t.Fatal(err)
		}
		s := c.waitStatus(ctx, "the cut-off OSD marked down", func(s mon.Status) bool { return s.OSDs.Up == len(c.osds)-1 })
		t.Logf("%s marked down %v after its links went down (epoch %d)", cut.Name, time.Since(start).Round(100*time.Millisecond), s.Epoch)

		name := fmt.Sprintf("during-%d", i)
		written[name] = c.putObjects(ctx, name, 10, 20<<10, uint64(10+i))
		c.checkObjects(ctx, "osprey://"+bucket+"/"+name+"/", written[name])

		if err := cut.Restore(ctx); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		c.waitStatus(ctx, "the OSD back and recovery finished", c.healthy)
		t.Logf("recovered %v after the links came back", time.Since(start).Round(100*time.Millisecond))
	}

	written["after"] = c.putObjects(ctx, "after", 5, 20<<10, 3)
	for name, want := range written {
		c.checkObjects(ctx, "osprey://"+bucket+"/"+name+"/", want)
	}
}

// TestMonLeaderCutOff: three mons, each beside an etcd member on its own
// host. The leader's links go down: a standby takes over, and a map change
// through it gets the next epoch; a change sent to the cut-off leader
// fails; once its links are back, the old leader follows the new map and
// serves changes again. The map history holds each epoch once, and no
// epoch carries the change the cut-off leader was asked for.
func TestMonLeaderCutOff(t *testing.T) {
	c := startCluster(t, clusterOptions{Transport: "tcp", Mons: 3})
	ctx := ctxFor(t, 90*time.Second)
	s := c.waitStatus(ctx, "three mons, one leading", func(s mon.Status) bool {
		_, err := leader(s, c.monAddrs)
		return len(s.Mons) == 3 && err == nil
	})
	lead, _ := leader(s, c.monAddrs)
	epoch := s.Epoch
	// Each mon wrote the admin keyring into its own directory: the same
	// one, since the entity lives in etcd.
	for _, name := range []string{"b", "c"} {
		mustSameFile(t, c.adminKeyring, filepath.Join(c.dir, "mon-"+name, "client.admin.keyring"))
	}
	var others []string
	for i, a := range c.monAddrs {
		if i != lead {
			others = append(others, a)
		}
	}
	old := c.mons[lead].node
	t.Logf("mon.%s leads at epoch %d; cutting %s off", monName(lead), epoch, old.Name)

	start := time.Now()
	if err := old.Cut(ctx); err != nil {
		t.Fatal(err)
	}
	// The cut-off leader is asked for a change from its own host, the
	// only place that still reaches it.
	oldWrite := make(chan error, 1)
	go func() {
		out, err := c.ospreyOn(ctx, old, c.monAddrs[lead:lead+1], "osd", "set-full-ratio", "0.91", "--mon-timeout", "6s")
		if err == nil {
			err = fmt.Errorf("it succeeded: %s", out)
		}
		oldWrite <- err
	}()

	s = c.waitStatusOf(ctx, others, "a standby leading", func(s mon.Status) bool {
		i, err := leader(s, c.monAddrs)
		return err == nil && i != lead
	})
	nl, _ := leader(s, c.monAddrs)
	t.Logf("mon.%s leads %v after the cut", monName(nl), time.Since(start).Round(100*time.Millisecond))
	out := c.setFullRatio(ctx, others, "0.92")
	if want := fmt.Sprintf("map epoch %d", epoch+1); !strings.Contains(out, want) {
		t.Fatalf("the new leader's change: %q, want %s", out, want)
	}
	// It fails for want of a leader, not by sending the client round
	// to the cut-off mon itself.
	if err := <-oldWrite; err == nil || strings.Contains(err.Error(), "it succeeded") ||
		strings.Contains(err.Error(), "the leader is at "+c.monAddrs[lead]) {
		t.Fatalf("a map change through the cut-off leader: %v", err)
	} else {
		t.Logf("the cut-off leader's change failed as it must: %v", err)
	}

	if err := old.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	// Once back, it may even lead again (a fresh election, with the map
	// the others wrote): what matters is that it serves that map.
	c.waitStatusOf(ctx, c.monAddrs[lead:lead+1], "the old leader following the new map", func(s mon.Status) bool {
		_, err := leader(s, c.monAddrs)
		return s.Epoch == epoch+1 && err == nil
	})
	if out := c.setFullRatio(ctx, c.monAddrs[lead:lead+1], "0.93"); !strings.Contains(out, fmt.Sprintf("map epoch %d", epoch+2)) {
		t.Fatalf("a change through the old leader once back: %q, want epoch %d", out, epoch+2)
	}

	history := c.maps(ctx)
	if len(history) != int(epoch+2) {
		t.Fatalf("map history %v: want epochs 1..%d", history, epoch+2)
	}
	for i, m := range history {
		if m.Epoch != uint64(i+1) || m.Error != "" || m.FullRatio == 0.91 {
			t.Fatalf("map history %v: entry %d is wrong", history, i)
		}
	}
	if history[epoch].FullRatio != 0.92 || history[epoch+1].FullRatio != 0.93 {
		t.Fatalf("map history %v: epochs %d and %d should hold full ratios 0.92 and 0.93", history, epoch+1, epoch+2)
	}
}

// TestMonLeaderCutOffFromOSDs: three mons and three OSDs; the leader's
// host and the OSDs' hosts stop reaching each other, every other path
// stays (etcd, the other mons, the client). The standbys relay the OSDs'
// beacons to the leader through etcd, so for several graces no OSD is
// marked down, writes go on, and status warns MON_LEADER_UNREACHABLE; an
// OSD restarted during the cut boots through a standby; once the cut
// heals, the warning goes and nothing was lost.
func TestMonLeaderCutOffFromOSDs(t *testing.T) {
	c := startCluster(t, clusterOptions{Transport: "tcp", Mons: 3, OSDs: 3})
	ctx := ctxFor(t, 2*time.Minute)
	s := c.waitStatus(ctx, "one mon leading", func(s mon.Status) bool {
		_, err := leader(s, c.monAddrs)
		return err == nil
	})
	lead, _ := leader(s, c.monAddrs)
	c.mustOsprey(ctx, "mb", bucket)
	written := map[string]objects{"before": c.putObjects(ctx, "before", 5, 20<<10, 1)}

	ld := c.mons[lead].node
	blackhole := func(on bool) {
		t.Helper()
		for _, o := range c.osds {
			if err := ld.Blackhole(ctx, o.node.Addr(c.pub), on); err != nil {
				t.Fatal(err)
			}
			if err := o.node.Blackhole(ctx, ld.Addr(c.pub), on); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("mon.%s leads at epoch %d; cutting it off from the OSDs", monName(lead), s.Epoch)
	blackhole(true)
	start := time.Now()
	// The grace is 4 s (startCluster): four of them, every OSD up at
	// every poll, and the standbys' relays named in status.
	warned := false
	for time.Since(start) < 16*time.Second {
		s, err := c.status(ctx, c.monAddrs)
		if err != nil {
			t.Logf("status during the cut: %v", err)
			time.Sleep(pollInterval)
			continue
		}
		if s.OSDs.Up != len(c.osds) {
			b, _ := json.Marshal(s)
			t.Fatalf("%v into the cut, %d of %d OSDs up: %s", time.Since(start).Round(100*time.Millisecond), s.OSDs.Up, len(c.osds), b)
		}
		warned = warned || slices.ContainsFunc(s.Health.Checks, func(c string) bool {
			return strings.Contains(c, "reach the leader mon only through standby mons")
		})
		time.Sleep(pollInterval)
	}
	if !warned {
		t.Fatal("status never said the OSDs reach the leader only through standbys")
	}
	written["during"] = c.putObjects(ctx, "during", 5, 20<<10, 2)

	// An OSD that restarts meanwhile boots through a standby, not once
	// the cut heals.
	re := c.restart(2)
	re.waitOutput(t, ctx, "booted through a standby mon")
	c.waitStatus(ctx, "the restarted OSD up, every PG active+clean, during the cut", c.healthy)
	written["restarted"] = c.putObjects(ctx, "restarted", 5, 20<<10, 3)

	blackhole(false)
	start = time.Now()
	c.waitStatus(ctx, "the leader reached directly again, every PG active+clean", func(s mon.Status) bool {
		return c.healthy(s) && !slices.ContainsFunc(s.Health.Checks, func(c string) bool { return strings.Contains(c, "only through standby") })
	})
	t.Logf("the warning went %v after the cut healed", time.Since(start).Round(100*time.Millisecond))
	for name, want := range written {
		c.checkObjects(ctx, "osprey://"+bucket+"/"+name+"/", want)
	}
}

// TestPrimaryCutOffReadsNothingStale: a PG's primary is cut off from the
// mon and the other OSDs (cluster link down, the public paths between them
// blackholed), while the client still reaches it. The mon marks it down
// and its PG takes a new write through the next member; a read through
// the cut-off primary (a client that takes its map from it alone) never
// answers the old value after that (docs/osd.md, Read leases). Its leases
// (8 s) outlast the mon's grace (4 s), so the successor must wait them out
// before it takes the write. Once back, it serves the new value.
func TestPrimaryCutOffReadsNothingStale(t *testing.T) {
	c := startCluster(t, clusterOptions{Transport: "tcp", Mons: 1, OSDs: 3, ReadLease: "8s"})
	ctx := ctxFor(t, 2*time.Minute)
	c.mustOsprey(ctx, "mb", bucket)
	dir := c.t.TempDir()
	v1, v2 := filepath.Join(dir, "v1"), filepath.Join(dir, "v2")
	for f, body := range map[string]string{v1: "version one", v2: "version two"} {
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.mustOsprey(ctx, "put", v1, "osprey://"+bucket+"/k")

	var where struct{ Acting []uint32 }
	if err := json.Unmarshal([]byte(c.mustOsprey(ctx, "osd", "map", bucket+"/k", "--json")), &where); err != nil || len(where.Acting) != 3 {
		t.Fatalf("osd map: %+v %v", where, err)
	}
	var tree []mon.OSDTreeEntry
	if err := json.Unmarshal([]byte(c.mustOsprey(ctx, "osd", "tree", "--json")), &tree); err != nil {
		t.Fatal(err)
	}
	var primary *daemon
	var primaryAddr string
	for _, e := range tree {
		if e.ID == where.Acting[0] {
			primaryAddr = e.PublicAddr
			for _, o := range c.osds {
				if o.node.Name == e.Host {
					primary = o
				}
			}
		}
	}
	if primary == nil {
		t.Fatalf("no node for osd.%d in %+v", where.Acting[0], tree)
	}
	viaPrimary := func() (string, error) {
		return c.osprey(ctx, "get", "--seeds", primaryAddr, "--retry-for", "2s", "osprey://"+bucket+"/k", "-")
	}
	if out, err := viaPrimary(); err != nil || out != "version one" {
		t.Fatalf("get through osd.%d before the cut: %q %v", where.Acting[0], out, err)
	}

	pn := primary.node
	cut := func(on bool) {
		t.Helper()
		if err := pn.SetLink(ctx, c.clu, !on); err != nil {
			t.Fatal(err)
		}
		others := []*netns.Node{c.mons[0].node}
		for _, o := range c.osds {
			if o != primary {
				others = append(others, o.node)
			}
		}
		for _, nd := range others {
			if err := pn.Blackhole(ctx, nd.Addr(c.pub), on); err != nil {
				t.Fatal(err)
			}
			if err := nd.Blackhole(ctx, pn.Addr(c.pub), on); err != nil {
				t.Fatal(err)
			}
		}
	}
	cut(true)
	start := time.Now()
	c.waitStatus(ctx, "the cut-off primary marked down", func(s mon.Status) bool { return s.OSDs.Up == 2 })
	t.Logf("osd.%d marked down %v after the cut", where.Acting[0], time.Since(start).Round(100*time.Millisecond))
	c.mustOsprey(ctx, "put", v2, "osprey://"+bucket+"/k")
	t.Logf("the new value acknowledged %v after the cut", time.Since(start).Round(100*time.Millisecond))
	for range 3 {
		if out, err := viaPrimary(); err == nil {
			t.Fatalf("the cut-off primary answered %q after a write through its successor", out)
		} else if !strings.Contains(err.Error(), "laggy") {
			t.Fatalf("a get through the cut-off primary: %v; want laggy", err)
		}
	}

	cut(false)
	c.waitStatus(ctx, "the OSD back and every PG active+clean", c.healthy)
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := viaPrimary()
		if err == nil && out == "version two" {
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("a get through osd.%d once back: %q %v", where.Acting[0], out, err)
		}
	}
}

// setFullRatio changes the map through mons from the client's host. Right
// after a cut, a mon's etcd client may still be on the cut-off member's
// endpoint until its keepalive gives up on it (2+2 s): that mon answers
// unavailable ("no leader") at once, and the CLI's mon client tries the
// others and backs off until its --mon-timeout, so no retry is needed
// here. The CLI logs at debug level, so that a failure shows what each
// attempt at each mon got.
func (c *cluster) setFullRatio(ctx context.Context, mons []string, ratio string) string {
	c.t.Helper()
	start := time.Now()
	out, err := c.ospreyOn(ctx, c.client, mons, "osd", "set-full-ratio", ratio, "--log-level", "debug")
	if err != nil {
		c.t.Fatalf("a map change through %v, after %v: %v", mons, time.Since(start).Round(time.Millisecond), err)
	}
	return out
}

// maps runs the test binary's helper on the client's host: the map
// history from the mons.
func (c *cluster) maps(ctx context.Context) []mapLine {
	c.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := c.client.Command(ctx, exe)
	cmd.Env = append(os.Environ(), helperEnv+"=maps", "OSPREY_MON="+strings.Join(c.monAddrs, ","), "OSPREY_KEYRING="+c.adminKeyring)
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("the map history: %v", err)
	}
	var lines []mapLine
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var m mapLine
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			c.t.Fatalf("the map history: %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return lines
}

// linkRate is what TestBandwidthLimit shapes every link to, each way.
const linkRate = 80_000_000 // bit/s: 10 MB/s

// TestBandwidthLimit shapes every OSD's and the client's links to
// linkRate each way (tc tbf on both ends of each veth): the cluster stays
// correct (objects read back with their checksums), and a large object's
// put and get go no faster than the client's link allows, nor absurdly
// slower (a put also waits for the primary to send two replicas over its
// own shaped link).
func TestBandwidthLimit(t *testing.T) {
	c := startCluster(t, clusterOptions{Transport: "tcp", Mons: 1, OSDs: 3})
	ctx := ctxFor(t, 90*time.Second)
	shape := netns.Shaping{BitsPerSec: linkRate}
	for _, d := range c.osds {
		for _, n := range []*netns.Network{c.pub, c.clu} {
			if err := d.node.Shape(ctx, n, shape); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.client.Shape(ctx, c.pub, shape); err != nil {
		t.Fatal(err)
	}
	c.mustOsprey(ctx, "mb", bucket)
	small := c.putObjects(ctx, "small", 8, 30<<10, 4)
	c.checkObjects(ctx, "osprey://"+bucket+"/small/", small)

	const size = 8 << 20
	big := filepath.Join(c.dir, "big")
	if err := os.WriteFile(big, osdtest.Payload(size, 9), 0o644); err != nil {
		t.Fatal(err)
	}
	limit := float64(linkRate) / 8 // bytes/s
	for _, step := range []struct {
		args []string
		// floor is the slowest rate that is still plausible, as a
		// fraction of the link's: far below what a quiet machine gets,
		// since CI's cores are shared with other tests.
		floor float64
	}{
		{[]string{"put", big, bucket + "/big"}, 1.0 / 20},
		{[]string{"get", bucket + "/big", big + "-back"}, 1.0 / 8},
	} {
		ts, err := c.transfers(ctx, step.args...)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 1 || ts[0].Size != size {
			t.Fatalf("%v: %+v", step.args, ts)
		}
		rate := ts[0].BytesPerSec
		t.Logf("%s of %d MiB over %d Mbit/s links: %.2f MB/s (%.0f%% of the link)", ts[0].Op, size>>20, linkRate/1_000_000, rate/1e6, 100*rate/limit)
		if rate > limit*1.1 || rate < limit*step.floor {
			t.Fatalf("%s at %.2f MB/s over links shaped to %.2f MB/s: want at most 110%% and at least %.0f%%",
				ts[0].Op, rate/1e6, limit/1e6, 100*step.floor)
		}
	}
	mustSameFile(t, big, big+"-back")
}
