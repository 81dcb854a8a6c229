package mon

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The embedded etcd has no TLS and no auth, and it holds the CA's key,
// every keyring and the S3 keys: nobody but its own Unix user may reach
// it. Its clients go through a Unix socket in a private directory, and no
// TCP port of the process answers an etcd client or peer request.

// TestEmbeddedEtcdOnlyForItsUser: every endpoint is a socket in a
// directory of ours that group and others cannot enter, and every TCP
// port StartEtcd opened (none, now) refuses an etcd client's Get and a
// peer request (/version, /members) made without credentials.
func TestEmbeddedEtcdOnlyForItsUser(t *testing.T) {
	scan := runtime.GOOS == "linux"
	var before map[string]bool
	if scan {
		checkListenerScan(t)
		before = tcpListeners(t)
	}
	dir := t.TempDir()
	e, err := StartEtcd(context.Background(), dir, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	var opened []string
	if scan {
		for addr := range tcpListeners(t) {
			if !before[addr] {
				opened = append(opened, addr)
			}
		}
	}
	// The server's own listeners, should the scan have missed one.
	for _, l := range e.e.Clients {
		if l.Addr().Network() != "unix" {
			t.Errorf("etcd client listener on %s %s, want only a unix socket", l.Addr().Network(), l.Addr())
			opened = append(opened, l.Addr().String())
		}
	}
	for _, p := range e.e.Peers {
		t.Logf("etcd peer listener on %s %s", p.Addr().Network(), p.Addr())
		if p.Addr().Network() == "tcp" {
			opened = append(opened, p.Addr().String())
		}
	}

	// The mon's way in works.
	putGet(t, e.Endpoints())

	// (a) Only through a socket only we can reach.
	eps := e.Endpoints()
	if len(eps) == 0 {
		t.Fatal("no endpoints")
	}
	for _, ep := range eps {
		checkPrivateSocket(t, ep)
	}
	// t.TempDir() is ours, and short enough: the socket is under etcd's
	// directory.
	if want := "unix://" + filepath.Join(dir, "sock", "client.sock"); len(want) < len("unix://")+len(syscall.RawSockaddrUnix{}.Path) && !slices.Equal(eps, []string{want}) {
		t.Errorf("endpoints %v, want [%s]", eps, want)
	}

	// (b) No TCP port the embedded etcd opened serves anyone who asks.
	slices.Sort(opened)
	opened = slices.Compact(opened)
	t.Logf("TCP listeners StartEtcd opened: %v", opened)
	for _, addr := range opened {
		if err := etcdGet(addr); err == nil {
			t.Errorf("an etcd client with no credentials read the embedded etcd through TCP %s", addr)
		}
		for _, path := range []string{"/version", "/members"} {
			if status, err := plainHTTPGet(addr, path); err == nil && status/100 == 2 {
				t.Errorf("plain HTTP GET %s on TCP %s: %d, want the request refused", path, addr, status)
			}
		}
	}
}

// TestEmbeddedEtcdSocketFallback: where the socket cannot go under etcd's
// directory (a path too long for a socket address, a directory others may
// write in, so swap its socket directory for theirs), it goes in a new
// private directory, removed on Close; never on a TCP port.
func TestEmbeddedEtcdSocketFallback(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil { // whatever the umask
		t.Fatal(err)
	}
	for _, dir := range []string{long, open} {
		t.Run(filepath.Base(dir)[:4], func(t *testing.T) {
			e, err := StartEtcd(context.Background(), dir, testLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if e != nil {
					e.Close()
				}
			}()
			eps := e.Endpoints()
			if len(eps) != 1 {
				t.Fatalf("endpoints %v, want one", eps)
			}
			sock := checkPrivateSocket(t, eps[0])
			if sock == "" {
				return
			}
			if strings.HasPrefix(sock, dir+string(filepath.Separator)) {
				t.Errorf("socket %s in %s, want it elsewhere", sock, dir)
			}
			putGet(t, eps)
			e.Close()
			e = nil
			if _, err := os.Lstat(filepath.Dir(sock)); !os.IsNotExist(err) {
				t.Errorf("socket directory %s after Close: %v, want it removed", filepath.Dir(sock), err)
			}
		})
	}
}

// TestEmbeddedEtcdTightensItsSocketDir: a socket directory left under
// etcd's directory with access for others (by an older start, another
// umask) is closed to them before the socket goes in it.
func TestEmbeddedEtcdTightensItsSocketDir(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sock")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sub, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	e, err := StartEtcd(context.Background(), dir, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if want := []string{"unix://" + filepath.Join(sub, "client.sock")}; !slices.Equal(e.Endpoints(), want) {
		t.Errorf("endpoints %v, want %v", e.Endpoints(), want)
	}
	checkPrivateSocket(t, e.Endpoints()[0])
	putGet(t, e.Endpoints())
}

// checkPrivateSocket fails t unless ep is unix:// and the absolute path of
// a socket in a directory this user owns that gives group and others no
// access; it returns the path.
func checkPrivateSocket(t *testing.T, ep string) string {
	t.Helper()
	sock, ok := strings.CutPrefix(ep, "unix://")
	if !ok || !filepath.IsAbs(sock) {
		t.Errorf("endpoint %q: want unix:// and the absolute path of a socket", ep)
		return ""
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("endpoint %q: %v, want a socket there", ep, err)
	}
	dir := filepath.Dir(sock)
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Errorf("endpoint %q: %v", ep, err)
		return sock
	}
	if !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("endpoint %q: its directory has mode %v, want a directory with no access for group or others", ep, fi.Mode())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		t.Errorf("endpoint %q: its directory is not this user's", ep)
	}
	return sock
}

func putGet(t *testing.T, endpoints []string) {
	t.Helper()
	cli, err := newEtcdClient(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/lockdown", "v"); err != nil {
		t.Fatalf("put through %v: %v", endpoints, err)
	}
	r, err := cli.Get(ctx, "/lockdown")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("get through %v: %v, %v", endpoints, r, err)
	}
}

// etcdGet is a stranger's etcd client Get on addr: plain gRPC, no
// certificate, no user.
func etcdGet(addr string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithLimit(1))
	return err
}

// plainHTTPGet is a stranger's peer request: HTTP, no TLS.
func plainHTTPGet(addr, path string) (int, error) {
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// checkListenerScan: tcpListeners finds a TCP listener of this process.
func checkListenerScan(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := tcpListeners(t); !got[l.Addr().String()] {
		t.Fatalf("scan of this process's TCP listeners %v misses %s", got, l.Addr())
	}
}

// tcpListeners are the addresses (to dial: loopback for a wildcard) of
// the TCP sockets in LISTEN state that this process has open, from
// /proc/net/tcp{,6} and the socket inodes of /proc/self/fd.
func tcpListeners(t *testing.T) map[string]bool {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil {
			continue // closed since
		}
		if ino, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	addrs := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if os.IsNotExist(err) {
			continue // no IPv6
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			const local, state, inode = 1, 3, 9
			if len(f) <= inode || f[state] != "0A" || !inodes[f[inode]] { // 0A: LISTEN
				continue
			}
			addr, err := procNetAddr(f[local])
			if err != nil {
				t.Fatalf("%s: %q: %v", table, line, err)
			}
			addrs[addr] = true
		}
	}
	return addrs
}

// procNetAddr reads a local address of /proc/net/tcp{,6}: the IP as
// 32-bit words in host order, in hex, a colon, the port in hex.
func procNetAddr(s string) (string, error) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok || (len(ipHex) != 8 && len(ipHex) != 32) {
		return "", fmt.Errorf("bad address %q", s)
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return "", err
	}
	ip := make(net.IP, 0, len(ipHex)/2)
	for i := 0; i < len(ipHex); i += 8 {
		w, err := hex.DecodeString(ipHex[i : i+8])
		if err != nil {
			return "", err
		}
		ip = binary.NativeEndian.AppendUint32(ip, binary.BigEndian.Uint32(w))
	}
	if ip.IsUnspecified() {
		if len(ip) == net.IPv4len {
			ip = net.IPv4(127, 0, 0, 1)
		} else {
			ip = net.IPv6loopback
		}
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port))), nil
}
