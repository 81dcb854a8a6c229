//go:build linux

package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnavailable says this machine cannot build a lab: not root, or no
// `ip` or `tc` command. Check's error wraps it.
var ErrUnavailable = errors.New("netns: network namespaces unavailable")

// CommandError is an `ip` or `tc` command that failed, with its output.
type CommandError struct {
	Args   []string
	Output string
	Err    error
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("netns: %s: %v: %s", strings.Join(e.Args, " "), e.Err, strings.TrimSpace(e.Output))
}

func (e *CommandError) Unwrap() error { return e.Err }

// Check says whether a lab can be built here: it needs root (to make
// namespaces and links) and iproute2's `ip` and `tc`.
func Check() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), running as uid %d", ErrUnavailable, os.Geteuid())
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: no %s command (apt-get install iproute2): %v", ErrUnavailable, tool, err)
		}
	}
	return nil
}

// Options shape a lab.
type Options struct {
	// Prefix starts every namespace's name (default "osprey"); a lab is
	// PREFIX-PID-RANDOM, its namespaces PREFIX-PID-RANDOM-NODE.
	Prefix string
	Logger *slog.Logger
}

// Lab is one run's set of namespaces: a switch namespace holding a bridge
// per network, and a namespace per node.
type Lab struct {
	name   string
	sw     string // the switch namespace
	logger *slog.Logger

	mu     sync.Mutex
	nets   []*Network
	nodes  []*Node
	closed bool
}

// Network is one bridge with its subnet; nodes get consecutive addresses
// on it from .2 up.
type Network struct {
	Name   string
	Prefix netip.Prefix
	bridge string
	next   netip.Addr
}

// Node is one namespace, a host with one link per network it joined.
type Node struct {
	Name  string
	NS    string // the namespace, for `ip netns exec NS`
	lab   *Lab
	links []link
}

type link struct {
	net   *Network
	addr  netip.Addr
	outer string // the bridge's end, in the switch namespace
}

// New removes what crashed runs with the same prefix left (RemoveStale)
// and makes an empty lab: its switch namespace.
func New(ctx context.Context, opts Options) (*Lab, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = "osprey"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := RemoveStale(ctx, opts.Prefix); err != nil {
		opts.Logger.Warn("removing namespaces of earlier runs", "err", err)
	}
	var r [3]byte
	rand.Read(r[:])
	l := &Lab{name: fmt.Sprintf("%s-%d-%s", opts.Prefix, os.Getpid(), hex.EncodeToString(r[:])), logger: opts.Logger}
	l.sw = l.name + "-sw"
	if _, err := run(ctx, "ip", "netns", "add", l.sw); err != nil {
		return nil, err
	}
	return l, nil
}

// Name is the lab's name, the start of each of its namespaces' names.
func (l *Lab) Name() string { return l.name }

// AddNetwork makes a bridge for prefix (an IPv4 /8 to /30) named name,
// which is also the name of the interface each node gets on it (at most
// 15 bytes, as any Linux interface name).
func (l *Lab) AddNetwork(ctx context.Context, name string, prefix netip.Prefix) (*Network, error) {
	if len(name) == 0 || len(name) > 15 || strings.ContainsAny(name, "/ \t\n:") {
		return nil, fmt.Errorf("netns: network name %q: want 1 to 15 bytes, no '/', ':' or spaces", name)
	}
	if !prefix.Addr().Is4() || prefix.Bits() < 8 || prefix.Bits() > 30 {
		return nil, fmt.Errorf("netns: network %s: want an IPv4 prefix /8 to /30, not %s", name, prefix)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := &Network{Name: name, Prefix: prefix.Masked(), bridge: fmt.Sprintf("br%d", len(l.nets))}
	n.next = n.Prefix.Addr().Next().Next()
	if _, err := run(ctx, "ip", "-n", l.sw, "link", "add", n.bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	if _, err := run(ctx, "ip", "-n", l.sw, "link", "set", n.bridge, "up"); err != nil {
		return nil, err
	}
	l.nets = append(l.nets, n)
	return n, nil
}

// AddNode makes a namespace, with loopback up (daemons that bind
// 127.0.0.1 inside it, such as an embedded etcd, need it), joined to each
// network in nets by a veth pair with the network's next free address.
func (l *Lab) AddNode(ctx context.Context, name string, nets ...*Network) (*Node, error) {
	if name == "" || name == "sw" || strings.ContainsAny(name, "/ \t\n") {
		return nil, fmt.Errorf("netns: node name %q: want a name without '/' or spaces, not \"sw\"", name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	idx := len(l.nodes)
	nd := &Node{Name: name, NS: l.name + "-" + name, lab: l}
	if _, err := run(ctx, "ip", "netns", "add", nd.NS); err != nil {
		return nil, err
	}
	// Recorded before the links, so Close removes a half-built node.
	l.nodes = append(l.nodes, nd)
	if _, err := run(ctx, "ip", "-n", nd.NS, "link", "set", "lo", "up"); err != nil {
		return nil, err
	}
	for j, n := range nets {
		if !n.Prefix.Contains(n.next) || n.next == lastAddr(n.Prefix) {
			return nil, fmt.Errorf("netns: network %s (%s) has no address left for %s", n.Name, n.Prefix, name)
		}
		lk := link{net: n, addr: n.next, outer: fmt.Sprintf("n%dx%d", idx, j)}
		n.next = n.next.Next()
		// Both ends are made inside namespaces: the host's never sees them.
		for _, args := range [][]string{
			{"-n", l.sw, "link", "add", lk.outer, "type", "veth", "peer", "name", n.Name, "netns", nd.NS},
			{"-n", l.sw, "link", "set", lk.outer, "master", n.bridge, "up"},
			{"-n", nd.NS, "addr", "add", netip.PrefixFrom(lk.addr, n.Prefix.Bits()).String(), "dev", n.Name},
			{"-n", nd.NS, "link", "set", n.Name, "up"},
		} {
			if _, err := run(ctx, "ip", args...); err != nil {
				return nil, err
			}
		}
		nd.links = append(nd.links, lk)
		if err := nd.waitCarrier(ctx, lk); err != nil {
			return nil, err
		}
	}
	return nd, nil
}

// waitCarrier waits until the node's end of lk is up with a carrier and
// the bridge forwards on the other end, so that the link carries traffic:
// the kernel passes a carrier's change on asynchronously, up to a second
// later (linkwatch).
func (nd *Node) waitCarrier(ctx context.Context, lk link) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		inner, err := linkState(ctx, nd.NS, lk.net.Name)
		if err != nil {
			return err
		}
		outer, err := linkState(ctx, nd.lab.sw, lk.outer)
		if err != nil {
			return err
		}
		if inner.Operstate == "UP" && outer.LinkInfo.SlaveData.State == "forwarding" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("netns: %s of %s did not come up: %w", lk.net.Name, nd.Name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lastAddr is p's broadcast address.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ifState is what waitCarrier reads of `ip -details -json link show`.
type ifState struct {
	Operstate string `json:"operstate"`
	LinkInfo  struct {
		SlaveData struct {
			State string `json:"state"` // a bridge port's: "forwarding", "disabled", ...
		} `json:"info_slave_data"`
	} `json:"linkinfo"`
}

func linkState(ctx context.Context, ns, dev string) (ifState, error) {
	out, err := run(ctx, "ip", "-n", ns, "-details", "-json", "link", "show", "dev", dev)
	if err != nil {
		return ifState{}, err
	}
	var st []ifState
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
		return ifState{}, fmt.Errorf("netns: ip -json link show dev %s: %v: %q", dev, err, out)
	}
	return st[0], nil
}

// Addr is the node's address on n (invalid when it did not join n).
func (nd *Node) Addr(n *Network) netip.Addr {
	for _, lk := range nd.links {
		if lk.net == n {
			return lk.addr
		}
	}
	return netip.Addr{}
}

// Command is prog run inside the node's namespace (`ip netns exec`). It
// gets SIGKILL when the process that started it dies (Pdeathsig; strictly,
// when the OS thread that started it ends), so a test killed midway
// leaves no daemon running, only namespaces for RemoveStale.
func (nd *Node) Command(ctx context.Context, prog string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", nd.NS, prog}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Do runs fn on a thread that is inside the node's namespace, so the
// sockets fn opens (a listener, a dialed connection) belong to it; they
// keep working from any goroutine afterwards. Other goroutines fn starts
// run in the caller's namespace.
func (nd *Node) Do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: %w", err)
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + nd.NS)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: node %s: %w", nd.Name, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: entering %s: %w", nd.NS, err)
	}
	ferr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it ends with this goroutine instead
		// of running other goroutines in the wrong namespace.
		return errors.Join(ferr, fmt.Errorf("netns: leaving %s: %w", nd.NS, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// SetLink sets the node's link on n up or down at the bridge's end, as a
// pulled cable or a switch port shut: the node keeps its address and
// sees its carrier go, and packets either way are dropped. Setting it up
// returns once the node sees its carrier again.
func (nd *Node) SetLink(ctx context.Context, n *Network, up bool) error {
	lk, err := nd.link(n)
	if err != nil {
		return err
	}
	state := "down"
	if up {
		state = "up"
	}
	if _, err = run(ctx, "ip", "-n", nd.lab.sw, "link", "set", lk.outer, state); err != nil || !up {
		return err
	}
	return nd.waitCarrier(ctx, lk)
}

// Cut sets every link of the node down; Restore sets them up again.
func (nd *Node) Cut(ctx context.Context) error { return nd.setAll(ctx, false) }

// Restore undoes Cut.
func (nd *Node) Restore(ctx context.Context) error { return nd.setAll(ctx, true) }

func (nd *Node) setAll(ctx context.Context, up bool) error {
	var errs []error
	for _, lk := range nd.links {
		errs = append(errs, nd.SetLink(ctx, lk.net, up))
	}
	return errors.Join(errs...)
}

// Blackhole drops what the node sends to addr (on: a blackhole route in
// the node's namespace; off: the route removed), its other traffic
// untouched: a partition between two hosts that both still reach the
// rest. What addr sends still arrives, so cut both ways by blackholing
// each from the other; a connection then neither starts nor carries data
// (its segments are sent, their replies or acks dropped).
func (nd *Node) Blackhole(ctx context.Context, addr netip.Addr, on bool) error {
	verb := "del"
	if on {
		verb = "add"
	}
	_, err := run(ctx, "ip", "-n", nd.NS, "route", verb, "blackhole", netip.PrefixFrom(addr, addr.BitLen()).String())
	return err
}

// Shaping is a token bucket (tc's tbf) on a link.
type Shaping struct {
	// BitsPerSec is the rate each way.
	BitsPerSec int64
	// BurstBytes is the bucket's depth (default 64 KiB: a GSO segment of
	// a veth fits, at the rates tests use the burst is milliseconds).
	BurstBytes int64
	// LatencyMs bounds how long a packet may wait in the queue before it
	// is dropped (default 200 ms), which sets the queue's length.
	LatencyMs int
}

// Shape limits the node's link on n to s.BitsPerSec in each direction: a
// tbf on the node's end limits what it sends, one on the bridge's end
// what it receives. A zero rate removes the limits.
func (nd *Node) Shape(ctx context.Context, n *Network, s Shaping) error {
	lk, err := nd.link(n)
	if err != nil {
		return err
	}
	ends := [][2]string{{nd.NS, n.Name}, {nd.lab.sw, lk.outer}}
	if s.BitsPerSec == 0 {
		var errs []error
		for _, e := range ends {
			if _, err := run(ctx, "tc", "-n", e[0], "qdisc", "del", "dev", e[1], "root"); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	if s.BitsPerSec < 8000 {
		return fmt.Errorf("netns: shaping %s of %s: %d bit/s is below tc's resolution", n.Name, nd.Name, s.BitsPerSec)
	}
	if s.BurstBytes <= 0 {
		s.BurstBytes = 64 << 10
	}
	if s.LatencyMs <= 0 {
		s.LatencyMs = 200
	}
	for _, e := range ends {
		if _, err := run(ctx, "tc", "-n", e[0], "qdisc", "replace", "dev", e[1], "root", "tbf",
			"rate", strconv.FormatInt(s.BitsPerSec, 10)+"bit", "burst", strconv.FormatInt(s.BurstBytes, 10),
			"latency", strconv.Itoa(s.LatencyMs)+"ms"); err != nil {
			return err
		}
	}
	return nil
}

func (nd *Node) link(n *Network) (link, error) {
	for _, lk := range nd.links {
		if lk.net == n {
			return lk, nil
		}
	}
	return link{}, fmt.Errorf("netns: node %s is not on network %s", nd.Name, n.Name)
}

// Close kills whatever still runs in the lab's namespaces (by process id,
// from `ip netns pids`) and deletes them, nodes first; the bridges and
// veth pairs go with them. It tries everything and reports every failure.
func (l *Lab) Close(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var errs []error
	for _, nd := range l.nodes {
		errs = append(errs, removeNS(ctx, nd.NS))
	}
	errs = append(errs, removeNS(ctx, l.sw))
	return errors.Join(errs...)
}

// removeNS kills the processes in ns and deletes it.
func removeNS(ctx context.Context, ns string) error {
	out, err := run(ctx, "ip", "netns", "pids", ns)
	if err != nil {
		return err
	}
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		// ESRCH: it ended on its own meanwhile.
		syscall.Kill(pid, syscall.SIGKILL)
	}
	_, err = run(ctx, "ip", "netns", "del", ns)
	return err
}

// RemoveStale deletes the namespaces of labs with this prefix whose
// process is gone (a run that crashed or was killed before its Close),
// killing what still runs in them. Labs of live processes are left alone,
// so concurrent runs do not disturb each other.
func RemoveStale(ctx context.Context, prefix string) error {
	out, err := run(ctx, "ip", "-json", "netns", "list")
	if err != nil {
		return err
	}
	var list []struct {
		Name string `json:"name"`
	}
	if strings.TrimSpace(out) != "" {
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return fmt.Errorf("netns: ip -json netns list: %w", err)
		}
	}
	var errs []error
	for _, ns := range list {
		pid, ok := ParseName(prefix, ns.Name)
		if !ok || processAlive(pid) {
			continue
		}
		errs = append(errs, removeNS(ctx, ns.Name))
	}
	return errors.Join(errs...)
}

// ParseName reads the creating process's id from a namespace name of a
// lab with this prefix (PREFIX-PID-RANDOM[-NODE]); ok is false for any
// other name.
func ParseName(prefix, name string) (pid int, ok bool) {
	rest, found := strings.CutPrefix(name, prefix+"-")
	if !found || prefix == "" {
		return 0, false
	}
	pidStr, rest, found := strings.Cut(rest, "-")
	if !found || pidStr == "" || len(pidStr) > 10 || pidStr[0] == '0' {
		return 0, false
	}
	for _, c := range pidStr {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return 0, false
	}
	random, _, _ := strings.Cut(rest, "-")
	if len(random) != 6 {
		return 0, false
	}
	if _, err := hex.DecodeString(random); err != nil {
		return 0, false
	}
	return pid, true
}

// processAlive says whether pid exists (EPERM: it does, as another user's).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// run runs an iproute2 command and returns its standard output.
func run(ctx context.Context, prog string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, prog, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &CommandError{Args: append([]string{prog}, args...), Output: stderr.String(), Err: err}
	}
	return stdout.String(), nil
}
