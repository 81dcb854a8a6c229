package mon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/freeport"
	"github.com/ospreystore/osprey/internal/logbuf"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// etcdMember is one `etcd` process of a test cluster.
type etcdMember struct {
	name, dir     string
	client, peer  string // URLs
	cmd           *exec.Cmd
	done          chan struct{}
	logs          *lockedBuffer
	initialCluser string
}

// lockedBuffer is an etcd member's log, written and read at once.
type lockedBuffer = logbuf.Buffer

// freeLoopbackPort returns a port nobody listens on now, below the
// ephemeral range (freeport.Port): etcd binds it later, while other tests
// connect out.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Port("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// etcdBinary is Debian's etcd-server (`etcd`); the test is skipped without
// it unless OSPREY_REQUIRE_ETCD is set (CI sets it: .ci/run installs the
// package, and a silent skip there would hide a lost test).
func etcdBinary(t *testing.T) string {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("OSPREY_REQUIRE_ETCD") != "" {
			t.Fatalf("OSPREY_REQUIRE_ETCD is set and there is no etcd binary: %v", err)
		}
		t.Skip("no etcd binary: apt-get install etcd-server")
	}
	return bin
}

// startEtcdCluster starts n etcd members on loopback, as n hosts would
// run them, and stops them at the end of the test.
func startEtcdCluster(t *testing.T, bin string, n int) []*etcdMember {
	t.Helper()
	dir := t.TempDir()
	members := make([]*etcdMember, n)
	var initial []string
	for i := range members {
		m := &etcdMember{name: fmt.Sprintf("e%d", i), dir: filepath.Join(dir, fmt.Sprintf("e%d", i)),
			client: fmt.Sprintf("http://127.0.0.1:%d", freeLoopbackPort(t)),
			peer:   fmt.Sprintf("http://127.0.0.1:%d", freeLoopbackPort(t)), logs: &lockedBuffer{}}
		members[i] = m
		initial = append(initial, m.name+"="+m.peer)
	}
	for _, m := range members {
		m.initialCluser = strings.Join(initial, ",")
		m.start(t, bin)
	}
	t.Cleanup(func() {
		for _, m := range members {
			m.kill()
		}
		if t.Failed() {
			for _, m := range members {
				t.Logf("etcd %s log (tail):\n%s", m.name, tailString(m.logs.String(), 2000))
			}
		}
	})
	return members
}

func (m *etcdMember) start(t *testing.T, bin string) {
	t.Helper()
	m.cmd = exec.Command(bin, "--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
		"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
		"--initial-cluster", m.initialCluser, "--initial-cluster-token", "osprey-test",
		"--initial-cluster-state", "new", "--logger", "zap", "--log-outputs", "stderr")
	m.cmd.Stdout, m.cmd.Stderr = m.logs, m.logs
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m.done = make(chan struct{})
	go func() {
		m.cmd.Wait()
		close(m.done)
	}()
}

func (m *etcdMember) kill() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
	m.cmd = nil
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestRealEtcdCluster runs two mons on a three-member etcd cluster of
// separate `etcd` processes (Debian's etcd-server), the way several hosts
// deploy it (`osprey mon --etcd URL,...`): one mon leads; OSDs boot; with
// one etcd member SIGKILLed the map still changes (quorum is 2 of 3); with
// two gone a change fails with an error within its deadline instead of
// hanging, and goes through once a member is back; and when the leader
// mon dies without resigning, the standby takes over and map changes go
// on. Every epoch the mons wrote is in the history, once.
func TestRealEtcdCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs etcd processes")
	}
	bin := etcdBinary(t)
	members := startEtcdCluster(t, bin, 3)
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, m.client)
	}
	cfg := func(name string) Config {
		c := Config{Name: name, NoAuth: true, // one client plays the OSDs
			Listen: "tcp://127.0.0.1:0", Etcd: endpoints,
			HeartbeatGrace: 30 * time.Second, DownOutInterval: time.Hour,
			Pool:   &osdpb.Pool{Id: 1, Name: "default", Size: 3, PgCount: 16},
			Logger: testLogger().With("test", "mon"), sessionTTL: 2}
		return c
	}
	// The mons' first dial waits for the cluster to elect its leader.
	a := startTestMon(t, cfg("a"))
	b := startTestMon(t, cfg("b"))
	eventually(t, 10*time.Second, "exactly one leader", func() bool { return a.IsLeader() != b.IsLeader() })
	leader, standby := a, b
	if b.IsLeader() {
		leader, standby = b, a
	}
	c := newTestClient(t, nil, a.Addr(), b.Addr())
	for i := range 3 {
		mustBoot(t, c, bootOf(i))
	}

	// Every etcd member up: no ETCD_MEMBER_DOWN.
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	st, err := standby.StatusDetail(sctx)
	scancel()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range st.Health.Detail {
		if d.Code == "ETCD_MEMBER_DOWN" {
			t.Fatalf("all 3 etcd members up, yet: %v", d)
		}
	}

	// One etcd member gone: quorum holds, and health says how close it is.
	members[0].kill()
	eventually(t, 10*time.Second, "ETCD_MEMBER_DOWN in the health", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := standby.StatusDetail(ctx)
		if err != nil {
			return false
		}
		for _, d := range st.Health.Detail {
			if d.Code == "ETCD_MEMBER_DOWN" && d.Summary == "1/3 etcd members down: one more loss stops every map change" &&
				len(d.Detail) == 1 && strings.Contains(d.Detail[0], members[0].client) {
				return true
			}
		}
		return false
	})
	rep := mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd out", Ids: []uint32{1}})
	t.Logf("with 2 of 3 etcd members: osd out at epoch %d", rep.Epoch)
	if in, _ := standby.Map().OSD(1); in.GetIn() {
		eventually(t, 5*time.Second, "the standby sees the change", func() bool {
			info, _ := standby.Map().OSD(1)
			return !info.GetIn()
		})
	}

	// Two gone: no quorum. A change fails within its deadline.
	members[1].kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	start := time.Now()
	_, err = c.Command(ctx, &osdpb.MonCommand{Prefix: "osd in", Ids: []uint32{1}})
	cancel()
	took := time.Since(start)
	var nm *monclient.NoMonError
	if !errors.As(err, &nm) || !errors.Is(err, context.DeadlineExceeded) || took > 6*time.Second {
		t.Fatalf("a map change with 1 of 3 etcd members, after %v: %v; want every mon's answer at the deadline", took, err)
	}
	t.Logf("without quorum: %v after %v", err, took.Round(time.Millisecond))
	// Neither mon is ready: the leader's etcd session ends (a TTL of
	// 2 s), and the standby names no leader it can no longer vouch for.
	eventually(t, 15*time.Second, "both mons unready without quorum", func() bool { return a.Ready() != nil && b.Ready() != nil })
	// By now the member left has no etcd leader, and a mon's read through
	// it is refused at once instead of waiting for the mon's deadline: the
	// client hears "no leader" well within one attempt's wait (the etcd
	// client retries the read on its endpoints for about 2.5 s first).
	patient, err := monclient.New(context.Background(), monclient.Options{Addrs: []string{standby.Addr()}, Name: "client.test",
		Logger: testLogger().With("test", "monclient"), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer patient.Close()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	_, err = patient.Command(ctx, &osdpb.MonCommand{Prefix: "get map", Epoch: 1})
	cancel()
	if !errors.As(err, &nm) || len(nm.Answers) != 1 || !errors.Is(nm.Answers[0].Err, ops.ErrServiceUnavailable) ||
		!strings.Contains(nm.Answers[0].Err.Error(), "no leader") {
		t.Fatalf("a read from a mon whose etcd member has no leader: %v; want its answer, unavailable for want of a leader", err)
	}
	members[1].start(t, bin)
	rep = mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd in", Ids: []uint32{1}})
	t.Logf("quorum back: osd in at epoch %d", rep.Epoch)

	// The leader mon dies without resigning: the standby leads once its
	// etcd session expires, and map changes go on. Which mon leads now is
	// found again: without quorum the leader's etcd session could not be
	// kept alive, and the mons elected one afresh once quorum was back.
	eventually(t, 10*time.Second, "exactly one leader after quorum came back", func() bool { return a.IsLeader() != b.IsLeader() })
	leader, standby = a, b
	if b.IsLeader() {
		leader, standby = b, a
	}
	leader.abandon.Store(true)
	crashed := time.Now()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	leader.Close(cctx)
	ccancel()
	rep = mustCommand(t, c, &osdpb.MonCommand{Prefix: "osd down", Ids: []uint32{2}})
	t.Logf("the standby applied osd down at epoch %d, %v after the leader died", rep.Epoch, time.Since(crashed).Round(time.Millisecond))
	if !standby.IsLeader() {
		t.Fatal("the standby does not lead")
	}

	// Every epoch is in the history once, in order, each one the previous
	// one plus one change.
	newest := standby.Map().Epoch()
	if newest != rep.Epoch {
		t.Fatalf("the standby's map is at %d, the command said %d", newest, rep.Epoch)
	}
	for e := uint64(1); e <= newest; e++ {
		got := mustCommand(t, c, &osdpb.MonCommand{Prefix: "get map", Epoch: e})
		if got.Map.GetEpoch() != e {
			t.Fatalf("get map %d answered epoch %d", e, got.Map.GetEpoch())
		}
	}
}
