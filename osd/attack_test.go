package osd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
	"google.golang.org/protobuf/proto"
)

// The attack tests run hostile peers against a real OSD process, as issue
// reports did by hand, at a scale CI can afford: oversized frames trickled
// before the handshake, hundreds of connections that send a banner and
// wait, and hundreds of peers that each come with a new name. Throughout,
// the daemon's RSS and goroutines stay bounded, come back afterwards, and an
// honest client's puts and gets succeed.

// debugAddrEnv, in an OSD child process of this test binary, makes it
// serve its goroutine count over HTTP at that address (the daemon exposes
// none, and the count is what shows a per-connection goroutine leak). At
// /free it first collects and hands freed memory back to the OS, so that
// RSS afterwards is what the daemon still holds, not what Go's scavenger
// has yet to return.
const debugAddrEnv = "OSPREY_TEST_DEBUG_ADDR"

func init() {
	addr := os.Getenv(debugAddrEnv)
	if addr == "" || os.Getenv("OSPREY_TEST_OSD") == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "debug listener:", err)
		os.Exit(2)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/free" {
			// Twice: a sync.Pool keeps what it held through one
			// collection (its victim cache).
			debug.FreeOSMemory()
			debug.FreeOSMemory()
		}
		fmt.Fprintln(w, runtime.NumGoroutine())
	}))
}

// daemon is the OSD child under attack, seen from outside.
type daemon struct {
	t     *testing.T
	pid   int
	debug string
	pub   string // host:port of the public network
	clu   string // and of the cluster network
	logs  func() string
}

// rss is the process's resident set (VmRSS), in bytes.
func (d *daemon) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.pid))
	if err != nil {
		d.t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				d.t.Fatalf("VmRSS line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	d.t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// goroutines asks the child how many goroutines it runs.
func (d *daemon) goroutines() int { return d.ask("/") }

// ask gets the child's debug path and returns the goroutine count it
// answers with.
func (d *daemon) ask(path string) int {
	resp, err := http.Get("http://" + d.debug + path)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		d.t.Fatalf("goroutine count %q: %v", b, err)
	}
	return n
}

// usage is a sample of what the daemon spends.
type usage struct {
	rss        int64
	goroutines int
}

func (u usage) String() string {
	return fmt.Sprintf("RSS %.1f MiB, %d goroutines", float64(u.rss)/(1<<20), u.goroutines)
}

func (d *daemon) usage() usage { return usage{d.rss(), d.goroutines()} }

// watch samples the daemon's usage until stop is called, which returns the
// highest RSS and goroutine count seen.
func (d *daemon) watch() (stop func() usage) {
	var peak usage
	var mu sync.Mutex
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			u := usage{d.rss(), d.goroutines()}
			mu.Lock()
			peak.rss, peak.goroutines = max(peak.rss, u.rss), max(peak.goroutines, u.goroutines)
			mu.Unlock()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() usage {
		close(done)
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// settle waits until the daemon's goroutines are back within slack of
// base, has it hand freed memory back to the OS, and returns its usage then.
func (d *daemon) settle(base usage, slack int) usage {
	d.t.Helper()
	var u usage
	deadline := time.Now().Add(20 * time.Second)
	for {
		u = d.usage()
		if u.goroutines <= base.goroutines+slack {
			d.ask("/free")
			return d.usage()
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("the daemon did not come back: %v, before the attack %v", u, base)
		}
		time.Sleep(20 * time.Millisecond) // polling the child
	}
}

// honestClient puts and gets small objects in a loop until stopped, which
// reports how many round trips succeeded, the slowest, and the first
// failure.
func honestClient(ctx context.Context, t *testing.T, cl *client.Client, name string) (stop func() (int, time.Duration, error)) {
	var ok atomic.Int64
	var slowest time.Duration
	var firstErr error
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			key := fmt.Sprintf("%s/%d", name, i)
			data := osdtest.Payload(4<<10, uint64(i))
			start := time.Now()
			if _, err := osdtest.Put(ctx, cl, "honest", key, data, client.PutOptions{}); err != nil {
				firstErr = fmt.Errorf("put %s: %w", key, err)
				return
			}
			got, _, err := osdtest.Get(ctx, cl, "honest", key, client.GetOptions{})
			if err == nil && !bytes.Equal(got, data) {
				err = errors.New("wrong bytes")
			}
			if err != nil {
				firstErr = fmt.Errorf("get %s: %w", key, err)
				return
			}
			slowest = max(slowest, time.Since(start))
			ok.Add(1)
		}
	}()
	return func() (int, time.Duration, error) {
		close(done)
		<-finished
		return int(ok.Load()), slowest, firstErr
	}
}

// raceDetector reports whether this binary was built with -race.
func raceDetector() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// attackConns is how many idle connections and new peer names the tests
// use: OSPREY_ATTACK_CONNS, default 500 (the issue measured 5,000).
func attackConns() int {
	if n, err := strconv.Atoi(os.Getenv("OSPREY_ATTACK_CONNS")); err == nil && n > 0 {
		return n
	}
	return 500
}

var attackBanner = wire.Banner{Version: wire.Version, Supported: wire.KnownFeatures}

// dialBanner connects to addr and exchanges banners, as any peer starts.
func dialBanner(t *testing.T, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wire.ExchangeBanner(c, attackBanner); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// handshakeAs completes a handshake on c as peer name (lossy or not) and
// returns once the session is ready.
func handshakeAs(t *testing.T, c net.Conn, name string, nonce uint64, lossy bool) {
	link := wire.NewStreamLink(c, 0, wire.LinkOptions{Limits: wire.Limits{MaxFront: 1 << 20, MaxData: 1 << 20}})
	frame := func(tag wire.Tag, pb proto.Message) wire.Frame {
		front, err := proto.Marshal(pb)
		if err != nil {
			t.Fatal(err)
		}
		return wire.Frame{Preamble: wire.Preamble{Tag: tag}, Front: front}
	}
	if err := link.WriteFrames([]wire.Frame{
		frame(wire.TagHello, &msgrpb.Hello{EntityName: name, InstanceNonce: nonce}),
		frame(wire.TagAuthRequest, &msgrpb.AuthRequest{Methods: []string{"none"}}),
		frame(wire.TagSessionReq, &msgrpb.SessionRequest{Cookie: nonce, Lossy: lossy,
			WindowMsgs: 64, WindowBytes: 1 << 20, GrantMsgs: 64, GrantBytes: 1 << 20}),
	}); err != nil {
		t.Fatal(err)
	}
	for {
		var f wire.Frame
		if err := link.ReadFrame(&f); err != nil {
			t.Fatalf("handshake as %s: %v", name, err)
		}
		f.Release()
		if f.Tag == wire.TagSessionReady {
			return
		}
	}
}

// TestDaemonUnderAttack runs the attacks one after the other against one
// OSD process.
func TestDaemonUnderAttack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	debug := fmt.Sprintf("127.0.0.1:%d", osdtest.FreePort(t))
	t.Setenv(debugAddrEnv, debug)
	pc := startProcCluster(t, osdtest.Options{OSDs: 1, PGs: 8})
	info, _ := pc.m.OSD(0)
	pub, _ := msgr.ParseAddr(info.PublicAddr)
	clu, _ := msgr.ParseAddr(info.ClusterAddr)
	d := &daemon{t: t, pid: pc.procs[0].cmd.Process.Pid, debug: debug, pub: pub.Host, clu: clu.Host, logs: func() string {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		return pc.logs[0].String()
	}}
	ctx := ctxT(t, 2*time.Minute)
	cl, err := client.New(ctx, client.Options{Seeds: []string{info.PublicAddr}, RetryFor: 5 * time.Second,
		OpTimeout: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.MakeBucket(ctx, "honest"); err != nil {
		t.Fatal(err)
	}
	warm := honestClient(ctx, t, cl, "warm-up")
	for {
		if n, _, err := warm(); err != nil {
			t.Fatal(err)
		} else if n > 0 {
			break
		}
		warm = honestClient(ctx, t, cl, "warm-up")
	}
	n := attackConns()

	// Each attack: what it spends at its peak, and what is left after.
	run := func(name string, attack func() (peers int), perPeer int64, goroutinesPerPeer float64) {
		t.Run(name, func(t *testing.T) {
			d.t = t
			base := d.usage()
			stopHonest := honestClient(ctx, t, cl, name)
			stopWatch := d.watch()
			peers := attack()
			peak := stopWatch()
			ok, slowest, err := stopHonest()
			after := d.settle(base, 10)
			t.Logf("%d peers: before %v, peak %v, after %v; %d honest round trips, the slowest %v",
				peers, base, peak, after, ok, slowest.Round(time.Millisecond))
			if err != nil || ok == 0 {
				t.Errorf("the honest client failed during the attack (%d round trips): %v", ok, err)
			}
			if slowest > 2*time.Second {
				t.Errorf("an honest put and get took %v during the attack", slowest)
			}
			if raceDetector() {
				// Shadow memory, and a sync.Pool that drops what it is
				// given at random, make RSS say little under -race: a
				// loose bound here catches a gross leak, and make test
				// runs this test again without -race for the real one.
				perPeer *= 8
			}
			if grew := peak.rss - base.rss; grew > 32<<20+int64(peers)*perPeer {
				t.Errorf("RSS grew by %.1f MiB for %d peers, over %d KiB each", float64(grew)/(1<<20), peers, perPeer>>10)
			}
			if grew := float64(peak.goroutines - base.goroutines); grew > 20+goroutinesPerPeer*float64(peers) {
				t.Errorf("%v goroutines more for %d peers", grew, peers)
			}
			// settle had the daemon return what it freed, so what it
			// still holds over before is what the attack left behind
			// (about 10 MiB here, most of it the honest client's puts
			// in Pebble's memtable; the trickled buffers of 20 peers,
			// kept, come to 35 MiB).
			if after.rss > base.rss+24<<20 && !raceDetector() {
				t.Errorf("RSS did not come back: %v after, %v before", after, base)
			}
		})
	}

	// (a) 20 peers claim a 16 MiB front and 65 MiB of data before their
	// handshake, and trickle bytes after the claim.
	run("oversized frames before the handshake", func() int {
		const peers = 20
		var wg sync.WaitGroup
		var refused atomic.Int64
		for i := range peers {
			c := dialBanner(t, d.pub)
			wg.Go(func() {
				defer c.Close()
				p := wire.Preamble{Tag: wire.TagMessage, Seq: 1, FrontLen: 16 << 20, DataLen: 65 << 20}
				b := make([]byte, wire.PreambleSize)
				p.Put(b)
				c.Write(b)
				chunk := bytes.Repeat([]byte{byte(i)}, 64<<10)
				tick := time.NewTicker(10 * time.Millisecond) // ~6 MB/s each, as the trickle
				defer tick.Stop()
				for range 100 {
					if _, err := c.Write(chunk); err != nil {
						refused.Add(1) // the daemon closed the connection
						return
					}
					<-tick.C
				}
			})
		}
		wg.Wait()
		if refused.Load() != peers {
			t.Errorf("%d of %d peers with oversized frames before the handshake were not cut off", peers-refused.Load(), peers)
		}
		return peers
	}, 64<<10, 0.5)

	// (a') 20 peers complete a handshake, claim a 60 MiB message and
	// trickle it (4 KiB every 10 ms, for 3 s). Each costs at most the
	// first buffer of a large frame (8 MiB, msgr/wire's growFrom, taken
	// while the budget is calm), whose pages Go may or may not touch,
	// never the 60 MiB it claimed; the buffers grow only with what they
	// send, and the receive budget, charged as they grow, is not spent on
	// what they only claimed: honest clients go on.
	const trickled = 300 * 4 << 10
	const firstBuffer = 8 << 20
	run("large messages claimed and trickled", func() int {
		const peers = 20
		var wg sync.WaitGroup
		for i := range peers {
			c := dialBanner(t, d.pub)
			handshakeAs(t, c, fmt.Sprintf("client.trickle-%d", i), uint64(i+1), true)
			wg.Go(func() {
				defer c.Close()
				p := wire.Preamble{Tag: wire.TagMessage, Seq: 1, FrontLen: 100, DataLen: 60 << 20, GrantMsgs: 64, GrantBytes: 1 << 20}
				b := make([]byte, wire.PreambleSize)
				p.Put(b)
				if _, err := c.Write(b); err != nil {
					t.Error(err)
					return
				}
				chunk := bytes.Repeat([]byte{byte(i)}, trickled/300)
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for range 300 {
					if _, err := c.Write(chunk); err != nil {
						t.Errorf("the daemon cut a peer that was sending: %v", err)
						return
					}
					<-tick.C
				}
			})
		}
		wg.Wait()
		return peers
	}, max(trickled, firstBuffer)+64<<10, 2.2) // a session: its reader and writer

	// (b) Peers that send a banner and wait.
	run("idle banner-only connections", func() int {
		conns := make([]net.Conn, 0, n)
		for range n {
			conns = append(conns, dialBanner(t, d.pub))
		}
		// All are accepted and waiting for their HELLO in the daemon.
		deadline := time.Now().Add(20 * time.Second)
		for u := d.usage(); u.goroutines < n; u = d.usage() {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections: %v", n, u)
			}
			time.Sleep(20 * time.Millisecond) // polling the child
		}
		for _, c := range conns {
			c.Close()
		}
		return n
	}, 32<<10, 1.2)

	// (c) Peers that each come with a new name, on both networks, and
	// leave: lossy client sessions end with their link; lossless ones wait
	// (without a goroutine) until StandbyTimeout reaps them.
	run("new peer names", func() int {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := range n {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				addr, name, lossy := d.pub, fmt.Sprintf("client.attacker-%d", i), true
				if i%2 == 1 {
					addr, name, lossy = d.clu, fmt.Sprintf("osd.%d", 1000+i), false
				}
				c := dialBanner(t, addr)
				defer c.Close()
				handshakeAs(t, c, name, uint64(i+1), lossy)
			})
		}
		wg.Wait()
		return n
	}, 32<<10, 0.2)

	// Nothing a peer did above may flood the log: repeated lines are
	// rate-limited (at most one per kind per 10 s).
	if lines := strings.Count(d.logs(), "\n"); lines > 100 {
		t.Errorf("the daemon wrote %d log lines under attack:\n%s", lines, tail(d.logs(), 3000))
	}
}
