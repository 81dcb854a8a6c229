//go:build linux

package multihost

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/netns"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/mon"
)

// Ports every daemon uses on its own address: a namespace is a host, so
// there is no collision to avoid.
const (
	monPort      = 3300
	osdPublic    = 6800
	osdCluster   = 6801
	etcdClient   = 2379
	etcdPeer     = 2380
	gatewayPort  = 9000
	bucket       = "multihost"
	pollInterval = 200 * time.Millisecond
)

// clusterOptions shape a test cluster.
type clusterOptions struct {
	// Transport names the OSDs' public and cluster addresses: "tcp" or
	// "rdma+tcp" (libfabric's tcp provider over the veth links).
	Transport string
	// Mons: 1 runs mon "a" on an etcd of its own (--embed-etcd); 3 runs
	// an etcd member beside each of mons a, b and c (--etcd).
	Mons int
	OSDs int
	// Gateway runs `osprey s3` on a node of its own, as client.s3gw.
	Gateway bool
	// ReadLease, if set, is the OSDs' --read-lease (default: 0.8 of the
	// mons' 4 s grace).
	ReadLease string
}

// cluster is a lab with a public network (mons, OSDs, gateway, client), a
// cluster network (OSDs' replication) and the daemons on it.
type cluster struct {
	t        *testing.T
	lab      *netns.Lab
	pub, clu *netns.Network
	dir      string
	opts     clusterOptions

	mons, etcds, osds  []*daemon
	gw                 *daemon
	client             *netns.Node
	monAddrs           []string
	adminKeyring       string
	gwURL              string
	s3Access, s3Secret string // client.admin's S3 key pair, for the gateway
	// goroutines were running before the cluster started: stop checks
	// that the daemons' waiters and commands' watchers all ended.
	goroutines int
}

// daemon is one process in a node's namespace.
type daemon struct {
	name string
	node *netns.Node
	prog string
	args []string
	cmd  *exec.Cmd
	out  *osdtest.LogBuffer
	done chan struct{}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startCluster builds the lab and starts the cluster on it: etcd members,
// mons, OSDs (which boot with the bootstrap keyring the first mon wrote),
// the gateway; it returns once every OSD is up and every PG active+clean.
// Everything is killed and removed when the test ends, failed or not.
func startCluster(t *testing.T, opts clusterOptions) *cluster {
	t.Helper()
	needLab(t)
	ctx := ctxFor(t, 2*time.Minute)
	lab, err := netns.New(ctx, netns.Options{Prefix: "osprey-mh"})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, lab: lab, dir: t.TempDir(), opts: opts, goroutines: runtime.NumGoroutine()}
	t.Cleanup(c.stop)
	if c.pub, err = lab.AddNetwork(ctx, "public", netip.MustParsePrefix("10.99.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if c.clu, err = lab.AddNetwork(ctx, "cluster", netip.MustParsePrefix("10.99.1.0/24")); err != nil {
		t.Fatal(err)
	}
	monNodes := make([]*netns.Node, opts.Mons)
	for i := range monNodes {
		if monNodes[i], err = lab.AddNode(ctx, "mon-"+monName(i), c.pub); err != nil {
			t.Fatal(err)
		}
		c.monAddrs = append(c.monAddrs, fmt.Sprintf("tcp://%s:%d", monNodes[i].Addr(c.pub), monPort))
	}
	osdNodes := make([]*netns.Node, opts.OSDs)
	for i := range osdNodes {
		if osdNodes[i], err = lab.AddNode(ctx, fmt.Sprintf("osd-%d", i), c.pub, c.clu); err != nil {
			t.Fatal(err)
		}
	}
	var gwNode *netns.Node
	if opts.Gateway {
		if gwNode, err = lab.AddNode(ctx, "s3gw", c.pub); err != nil {
			t.Fatal(err)
		}
	}
	if c.client, err = lab.AddNode(ctx, "client", c.pub); err != nil {
		t.Fatal(err)
	}

	if opts.Mons > 1 {
		c.startEtcd(monNodes)
	}
	var wg sync.WaitGroup
	for i, nd := range monNodes {
		name := monName(i)
		args := []string{"mon", "--name", name, "--listen", c.monAddrs[i],
			"--keyring-dir", filepath.Join(c.dir, "mon-"+name),
			// Fast failure detection for tests: an OSD silent for 4s is down.
			"--heartbeat-grace", "4s", "--pgs", "32"}
		if opts.Mons == 1 {
			args = append(args, "--embed-etcd", filepath.Join(c.dir, "mon-"+name))
		} else {
			args = append(args, "--etcd", strings.Join(c.etcdURLs(monNodes), ","))
		}
		// --etcd leaves the keyring directory to the operator to make.
		if err := os.MkdirAll(filepath.Join(c.dir, "mon-"+name), 0o700); err != nil {
			t.Fatal(err)
		}
		d := c.start("mon."+name, nd, args...)
		c.mons = append(c.mons, d)
		wg.Go(func() { d.waitOutput(t, ctx, "serving on") })
	}
	if wg.Wait(); t.Failed() {
		t.FailNow()
	}
	c.adminKeyring = filepath.Join(c.dir, "mon-a", "client.admin.keyring")
	bootstrap := filepath.Join(c.dir, "mon-a", "client.bootstrap-osd.keyring")
	for i, nd := range osdNodes {
		d := c.start(fmt.Sprintf("osd-%d", i), nd, "osd",
			"--mon", strings.Join(c.monAddrs, ","),
			"--data", filepath.Join(c.dir, fmt.Sprintf("osd-%d", i)),
			"--keyring", bootstrap, "--host", nd.Name,
			"--public", fmt.Sprintf("%s://%s:%d", opts.Transport, nd.Addr(c.pub), osdPublic),
			"--cluster", fmt.Sprintf("%s://%s:%d", opts.Transport, nd.Addr(c.clu), osdCluster),
			"--cache-mib", "16", "--read-cache-mib", "16", "--memtable-mib", "8", "--read-lease", cmp.Or(opts.ReadLease, "0"))
		c.osds = append(c.osds, d)
		wg.Go(func() { d.waitOutput(t, ctx, "serving:") })
	}
	if wg.Wait(); t.Failed() {
		t.FailNow()
	}
	if opts.Gateway {
		// The gateway acts as an entity of its own (profile s3-gateway),
		// made by the operator from the client's host, and its requests
		// are signed with an S3 key of client.admin's.
		gwKeyring := filepath.Join(c.dir, "client.s3gw.keyring")
		c.mustOsprey(ctx, "auth", "get-or-create", "client.s3gw", "mon", "allow profile s3-gateway", "osd", "allow profile s3-gateway", "-o", gwKeyring)
		if _, err := fmt.Sscanf(c.mustOsprey(ctx, "auth", "s3-key", "add", "client.admin"), "access key %s\nsecret key %s\n", &c.s3Access, &c.s3Secret); err != nil {
			t.Fatalf("auth s3-key add: %v", err)
		}
		listen := fmt.Sprintf("%s:%d", gwNode.Addr(c.pub), gatewayPort)
		c.gw = c.start("s3gw", gwNode, "s3", "--listen", listen,
			"--mon", strings.Join(c.monAddrs, ","), "--keyring", gwKeyring)
		if c.gw.waitOutput(t, ctx, "serving S3 on"); t.Failed() {
			t.FailNow()
		}
		c.gwURL = "http://" + listen
	}
	if opts.OSDs > 0 {
		c.waitStatus(ctx, "every OSD up and every PG active+clean", c.healthy)
	}
	return c
}

func monName(i int) string { return string(rune('a' + i)) }

func (c *cluster) etcdURLs(nodes []*netns.Node) []string {
	var urls []string
	for _, nd := range nodes {
		urls = append(urls, fmt.Sprintf("http://%s:%d", nd.Addr(c.pub), etcdClient))
	}
	return urls
}

// startEtcd runs an etcd member (Debian's etcd-server) beside each mon,
// as three mon hosts would; the mons' first request waits for their
// election.
func (c *cluster) startEtcd(nodes []*netns.Node) {
	c.t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("OSPREY_REQUIRE_ETCD") != "" {
			c.t.Fatalf("OSPREY_REQUIRE_ETCD is set and there is no etcd binary: %v", err)
		}
		c.t.Skip("no etcd binary: apt-get install etcd-server")
	}
	var initial []string
	for i, nd := range nodes {
		initial = append(initial, fmt.Sprintf("%s=http://%s:%d", monName(i), nd.Addr(c.pub), etcdPeer))
	}
	for i, nd := range nodes {
		client := fmt.Sprintf("http://%s:%d", nd.Addr(c.pub), etcdClient)
		peer := fmt.Sprintf("http://%s:%d", nd.Addr(c.pub), etcdPeer)
		c.etcds = append(c.etcds, c.startProg("etcd-"+monName(i), nd, bin,
			"--name", monName(i), "--data-dir", filepath.Join(c.dir, "etcd-"+monName(i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-token", c.lab.Name(),
			"--initial-cluster-state", "new", "--logger", "zap", "--log-outputs", "stderr",
			// A member back from a partition does not force an election
			// with the term it raised alone (etcd 3.5's default).
			"--pre-vote"))
	}
}

// start runs `osprey ARGS` as a daemon on nd.
func (c *cluster) start(name string, nd *netns.Node, args ...string) *daemon {
	return c.startProg(name, nd, ospreyBin, args...)
}

// startProg runs prog as a daemon on nd, until stop kills it.
func (c *cluster) startProg(name string, nd *netns.Node, prog string, args ...string) *daemon {
	c.t.Helper()
	cmd := nd.Command(context.Background(), prog, args...)
	d := &daemon{name: name, node: nd, prog: prog, args: args, cmd: cmd, out: &osdtest.LogBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.out, d.out
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	go func() {
		cmd.Wait()
		close(d.done)
	}()
	return d
}

// waitOutput waits until the daemon printed want, and fails the test if
// it exits first or ctx ends.
func (d *daemon) waitOutput(t *testing.T, ctx context.Context, want string) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(d.out.String(), want) {
		select {
		case <-d.done:
			t.Errorf("%s exited before it printed %q: %v\n%s", d.name, want, d.cmd.ProcessState, tail(d.out.String(), 3000))
			return
		case <-ctx.Done():
			t.Errorf("%s did not print %q: %v\n%s", d.name, want, ctx.Err(), tail(d.out.String(), 3000))
			return
		case <-tick.C:
		}
	}
}

// kill ends the daemon with SIGKILL and waits for it.
func (d *daemon) kill() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// restart kills OSD i (SIGKILL) and starts it again as before, with a
// fresh log.
func (c *cluster) restart(i int) *daemon {
	c.t.Helper()
	old := c.osds[i]
	old.kill()
	c.osds[i] = c.startProg(old.name, old.node, old.prog, old.args...)
	return c.osds[i]
}

// stop kills every daemon, prints their logs if the test failed, and
// removes the lab.
func (c *cluster) stop() {
	all := slices.Concat(c.osds, c.mons, c.etcds)
	if c.gw != nil {
		all = append(all, c.gw)
	}
	for _, d := range all {
		d.kill()
	}
	if c.t.Failed() {
		for _, d := range all {
			c.t.Logf("%s log (tail):\n%s", d.name, tail(d.out.String(), 4000))
		}
	}
	if err := c.lab.Close(context.Background()); err != nil {
		c.t.Errorf("removing the lab: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > c.goroutines {
		if time.Now().After(deadline) {
			c.t.Errorf("%d goroutines left running, %d before the cluster started", runtime.NumGoroutine(), c.goroutines)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// osprey runs the CLI on the client's node against the mons, as
// client.admin (--keyring, as an operator would give it), and returns its
// standard output; the error carries standard error.
func (c *cluster) osprey(ctx context.Context, args ...string) (string, error) {
	return c.ospreyOn(ctx, c.client, c.monAddrs, args...)
}

func (c *cluster) ospreyOn(ctx context.Context, nd *netns.Node, mons []string, args ...string) (string, error) {
	cmd := nd.Command(ctx, ospreyBin, append(args, "--keyring", c.adminKeyring)...)
	cmd.Env = append(os.Environ(), "OSPREY_MON="+strings.Join(mons, ","))
	cmd.Dir = c.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("osprey %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func (c *cluster) mustOsprey(ctx context.Context, args ...string) string {
	c.t.Helper()
	out, err := c.osprey(ctx, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// status is `osprey status --json` from the client's node, through mons.
func (c *cluster) status(ctx context.Context, mons []string) (mon.Status, error) {
	var s mon.Status
	out, err := c.ospreyOn(ctx, c.client, mons, "status", "--json", "--mon-timeout", "3s")
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return s, fmt.Errorf("status --json: %w: %q", err, out)
	}
	return s, nil
}

// waitStatus polls the mons' status until ok holds, and fails the test at
// ctx's end with the last status seen.
func (c *cluster) waitStatus(ctx context.Context, what string, ok func(mon.Status) bool) mon.Status {
	c.t.Helper()
	return c.waitStatusOf(ctx, c.monAddrs, what, ok)
}

func (c *cluster) waitStatusOf(ctx context.Context, mons []string, what string, ok func(mon.Status) bool) mon.Status {
	c.t.Helper()
	var last mon.Status
	var lastErr error
	for {
		s, err := c.status(ctx, mons)
		if err == nil && ok(s) {
			return s
		}
		if err == nil {
			last = s
		}
		// A refused session is final (clients do not retry it): waiting
		// cannot help.
		if err != nil && strings.Contains(err.Error(), "authentication refused") {
			c.t.Fatalf("waiting for %s: %v", what, err)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			b, _ := json.Marshal(last)
			c.t.Fatalf("waiting for %s: %v; last status %s; last error %v", what, ctx.Err(), b, lastErr)
		case <-time.After(pollInterval):
		}
	}
}

// healthy: every OSD up and in, every PG active+clean, nothing degraded.
func (c *cluster) healthy(s mon.Status) bool {
	return s.OSDs.Total == c.opts.OSDs && s.OSDs.Up == c.opts.OSDs && s.OSDs.In == c.opts.OSDs &&
		s.PGTotal > 0 && s.PGs["active+clean"] == s.PGTotal && s.DegradedObjects == 0
}

// objects is a set of local files and their SHA-256s.
type objects map[string][32]byte

// writeObjects writes n files of size bytes (seeded, so each run writes
// the same) under dir/name and returns their checksums.
func writeObjects(t *testing.T, dir string, n, size int, seed uint64) objects {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	objs := objects{}
	for i := range n {
		b := osdtest.Payload(size+i, seed*1000+uint64(i))
		name := fmt.Sprintf("obj-%03d", i)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		objs[name] = sha256.Sum256(b)
	}
	return objs
}

// putObjects writes n files under DIR/name (writeObjects) and copies them
// to the bucket under name/, from the client's host.
func (c *cluster) putObjects(ctx context.Context, name string, n, size int, seed uint64) objects {
	c.t.Helper()
	dir := filepath.Join(c.dir, name)
	objs := writeObjects(c.t, dir, n, size, seed)
	if _, err := c.transfers(ctx, "cp", "--recursive", dir, "osprey://"+bucket+"/"+name+"/"); err != nil {
		c.t.Fatalf("writing %s/: %v", name, err)
	}
	return objs
}

// transfer is one line of `put/get/cp --json`.
type transfer struct {
	Op          string  `json:"op"`
	Source      string  `json:"source"`
	Target      string  `json:"target"`
	Size        int64   `json:"size"`
	Seconds     float64 `json:"seconds"`
	BytesPerSec float64 `json:"bytes_per_sec"`
}

// transfers runs a transfer command with --json and returns its lines.
func (c *cluster) transfers(ctx context.Context, args ...string) ([]transfer, error) {
	out, err := c.osprey(ctx, append(args, "--json")...)
	if err != nil {
		return nil, err
	}
	var ts []transfer
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var tr transfer
		if err := json.Unmarshal(sc.Bytes(), &tr); err != nil {
			return nil, fmt.Errorf("%s: %w", sc.Text(), err)
		}
		ts = append(ts, tr)
	}
	return ts, nil
}

// checkObjects downloads prefix into a new directory and compares every
// file with want: same names, same checksums.
func (c *cluster) checkObjects(ctx context.Context, prefix string, want objects) {
	c.t.Helper()
	dir, err := os.MkdirTemp(c.dir, "back-")
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.transfers(ctx, "cp", "--recursive", prefix, dir); err != nil {
		c.t.Fatal(err)
	}
	got := objects{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			c.t.Fatal(err)
		}
		got[e.Name()] = sha256.Sum256(b)
	}
	var bad []string
	for name, sum := range want {
		if g, ok := got[name]; !ok {
			bad = append(bad, name+" missing")
		} else if g != sum {
			bad = append(bad, name+" differs")
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			bad = append(bad, name+" unexpected")
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		c.t.Fatalf("%s read back from %d objects written: %s", prefix, len(want), strings.Join(bad, ", "))
	}
}

var errNotLeader = errors.New("no leader")

// leader is the index of the mon status names leader.
func leader(s mon.Status, addrs []string) (int, error) {
	for _, m := range s.Mons {
		if m.Leader {
			if i := slices.Index(addrs, m.Addr); i >= 0 {
				return i, nil
			}
		}
	}
	return -1, errNotLeader
}
