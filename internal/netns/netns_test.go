//go:build linux

package netns

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// newLab builds a lab for the test and closes it at its end; it skips
// where labs cannot be built, unless OSPREY_REQUIRE_NETNS=1 (make test).
func newLab(t *testing.T) *Lab {
	t.Helper()
	if err := Check(); err != nil {
		if os.Getenv("OSPREY_REQUIRE_NETNS") == "1" {
			t.Fatalf("%v (OSPREY_REQUIRE_NETNS=1)", err)
		}
		t.Skipf("%v (OSPREY_REQUIRE_NETNS=1 makes this a failure)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := New(ctx, Options{Prefix: "osprey-nstest"})
	if err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()
	t.Cleanup(func() {
		// Registered first, so it runs last: the listeners are closed.
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > goroutines {
			if time.Now().After(deadline) {
				t.Errorf("%d goroutines left running, %d before the lab", runtime.NumGoroutine(), goroutines)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("closing the lab: %v", err)
		}
		if left := namespaces(t, l.Name()); len(left) > 0 {
			t.Errorf("namespaces left after Close: %v", left)
		}
	})
	return l
}

// namespaces lists the namespaces whose names start with prefix.
func namespaces(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			names = append(names, f[0])
		}
	}
	return names
}

// listen opens a TCP listener on nd's address on n that echoes what it
// reads, until the test ends.
func listen(t *testing.T, nd *Node, n *Network) string {
	t.Helper()
	var ln net.Listener
	if err := nd.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(nd.Addr(n), 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(nd *Node, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := nd.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	return c, err
}

// TestLabLinksCutAndShape: two nodes on a bridge reach each other on
// their private addresses, which the host's namespace does not have; a
// cut link stops traffic and a restored one carries it again; a shaped
// link carries about its rate; Close leaves no namespace behind.
func TestLabLinksCutAndShape(t *testing.T) {
	l := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pub, err := l.AddNetwork(ctx, "public", netip.MustParsePrefix("10.99.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.AddNode(ctx, "a", pub)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.AddNode(ctx, "b", pub)
	if err != nil {
		t.Fatal(err)
	}
	if a.Addr(pub).String() != "10.99.0.2" || b.Addr(pub).String() != "10.99.0.3" {
		t.Fatalf("addresses %v and %v, want 10.99.0.2 and 10.99.0.3", a.Addr(pub), b.Addr(pub))
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, ad := range addrs {
		if p, err := netip.ParsePrefix(ad.String()); err == nil && pub.Prefix.Contains(p.Addr()) {
			t.Fatalf("the host's namespace has the lab's address %s", ad)
		}
	}

	addr := listen(t, a, pub)
	echo := func() error {
		c, err := dial(b, addr, 500*time.Millisecond)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != "ping" {
			return errors.New("echo changed the bytes")
		}
		return nil
	}
	if err := echo(); err != nil {
		t.Fatalf("b to a: %v", err)
	}
	// A program in a namespace sees only the node's interfaces.
	out, err := b.Command(ctx, "ip", "-brief", "addr").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "10.99.0.3/24") || strings.Contains(string(out), "10.99.0.2/") {
		t.Fatalf("ip addr inside b: %v: %s", err, out)
	}

	if err := b.Cut(ctx); err != nil {
		t.Fatal(err)
	}
	if err := echo(); err == nil {
		t.Fatal("b reached a over a cut link")
	}
	if err := b.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	// Restore returns with the carrier back and the bridge forwarding, yet
	// the first connection can still time out (b's neighbour entry for a,
	// which failed during the cut, is the likely cause): poll.
	deadline := time.Now().Add(5 * time.Second)
	for err := echo(); err != nil; err = echo() {
		if time.Now().After(deadline) {
			t.Fatalf("b to a after the link came back: %v", err)
		}
	}

	// A blackhole route from b to a's address stops b's traffic to a;
	// once removed, it flows again.
	if err := b.Blackhole(ctx, a.Addr(pub), true); err != nil {
		t.Fatal(err)
	}
	if err := echo(); err == nil {
		t.Fatal("b reached a through a blackhole route")
	}
	if err := b.Blackhole(ctx, a.Addr(pub), false); err != nil {
		t.Fatal(err)
	}
	if err := echo(); err != nil {
		t.Fatalf("b to a once the blackhole route is gone: %v", err)
	}

	// 16 Mbit/s is 2 MB/s: 1 MiB takes about half a second each way.
	const rate = 16_000_000
	if err := b.Shape(ctx, pub, Shaping{BitsPerSec: rate}); err != nil {
		t.Fatal(err)
	}
	c, err := dial(b, addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 1 << 20
	start := time.Now()
	go c.Write(make([]byte, size))
	if _, err := io.ReadFull(c, make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	// Sent and echoed at once, so each direction carried size bytes in
	// the elapsed time.
	got := float64(size*8) / time.Since(start).Seconds()
	t.Logf("1 MiB echoed over a %d bit/s link: %.1f Mbit/s each way", rate, got/1e6)
	if got > rate*1.15 || got < rate/4 {
		t.Fatalf("%.0f bit/s over a link shaped to %d", got, rate)
	}
	if err := b.Shape(ctx, pub, Shaping{}); err != nil {
		t.Fatalf("removing the shaping: %v", err)
	}
}

// TestRemoveStale: a namespace of a lab whose process is gone is removed,
// one of a live process (this one) is kept.
func TestRemoveStale(t *testing.T) {
	l := newLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	const prefix = "osprey-nsstale"
	stale := prefix + "-" + strconv.Itoa(gone.Process.Pid) + "-abcdef-osd0"
	live := prefix + "-" + strconv.Itoa(os.Getpid()) + "-abcdef-osd0"
	for _, ns := range []string{stale, live} {
		if _, err := run(ctx, "ip", "netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeNS(context.Background(), ns) })
	}
	if err := RemoveStale(ctx, prefix); err != nil {
		t.Fatal(err)
	}
	left := namespaces(t, prefix)
	if len(left) != 1 || left[0] != live {
		t.Fatalf("after RemoveStale: %v, want only %s", left, live)
	}
	if len(namespaces(t, l.Name())) != 1 {
		t.Fatal("RemoveStale of another prefix touched this lab")
	}
}

func TestParseName(t *testing.T) {
	for _, c := range []struct {
		name string
		pid  int
		ok   bool
	}{
		{"osprey-123-abcdef-sw", 123, true},
		{"osprey-123-abcdef", 123, true},
		{"osprey-123-abcdef-osd-0", 123, true},
		{"osprey-0-abcdef-sw", 0, false},
		{"osprey-12a-abcdef-sw", 0, false},
		{"osprey-123-abcde-sw", 0, false},
		{"osprey-123-zzzzzz-sw", 0, false},
		{"ospreyx-123-abcdef-sw", 0, false},
		{"other-123-abcdef-sw", 0, false},
		{"osprey--abcdef", 0, false},
		{"osprey-99999999999-abcdef", 0, false},
		{"osprey-0123-abcdef", 0, false},
	} {
		pid, ok := ParseName("osprey", c.name)
		if pid != c.pid || ok != c.ok {
			t.Errorf("ParseName(%q) = %d, %v; want %d, %v", c.name, pid, ok, c.pid, c.ok)
		}
	}
}

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"osprey-123-abcdef-sw", "osprey-1-000000", "osprey--", "osprey-1-", "", "-"} {
		f.Add("osprey", s)
	}
	f.Fuzz(func(t *testing.T, prefix, name string) {
		pid, ok := ParseName(prefix, name)
		if ok && (pid <= 0 || !strings.HasPrefix(name, prefix+"-"+strconv.Itoa(pid)+"-")) {
			t.Fatalf("ParseName(%q, %q) = %d, true", prefix, name, pid)
		}
		if !ok && pid != 0 {
			t.Fatalf("ParseName(%q, %q) = %d, false", prefix, name, pid)
		}
	})
}
