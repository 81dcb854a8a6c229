package mon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ospreystore/osprey/internal/dirlock"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is a single-node etcd server running inside this process: for a
// one-mon cluster, `osprey up`, and tests. A production cluster runs etcd
// on its own (three or five members) and gives the mons its endpoints.
//
// The embedded etcd has no TLS and no auth of its own, and it holds the
// cluster's secrets (the CA's key, every keyring, the S3 keys); so it opens
// no TCP port at all. Clients reach it on a Unix socket in a directory only
// this user may enter (DIR/sock, or a private temporary one: see
// etcdSocketPath), and it has no peer listener: a single member never
// hears from a peer.
type Etcd struct {
	e         *embed.Etcd
	dir       string
	lock      *os.File // dirlock on dir, released after the server stopped
	tmpDir    string   // private temporary directory of the socket, removed on Close; "" when the socket is under dir
	endpoints []string
}

// etcdStartTimeout bounds how long StartEtcd waits for the server to be
// ready (it elects itself leader of its one-member raft group).
const etcdStartTimeout = 30 * time.Second

// etcdSocket is the name of the client socket in its directory, and
// etcdSockDir the name of that directory in etcd's.
const (
	etcdSocket  = "client.sock"
	etcdSockDir = "sock"
)

// maxSocketPath is the longest path a Unix socket may have (sun_path less
// its terminating NUL).
var maxSocketPath = len(syscall.RawSockaddrUnix{}.Path) - 1

// etcdPeerPlaceholder is the peer URL the member advertises, for etcd's
// bookkeeping of its one-member cluster: nothing listens there (port 0 is
// never a listener), and no peer ever dials it. It is the URL earlier
// versions both advertised and listened on, so their data directories
// start unchanged. The advertised client URL is the same placeholder:
// etcd wants a host:port there, which a socket path is not, and no client
// of the embedded etcd learns its endpoints from the member list.
const etcdPeerPlaceholder = "http://127.0.0.1:0"

// StartEtcd starts a single-node etcd with its data in dir, serving clients
// on a Unix socket that only this user can reach (see Etcd) and listening
// on no TCP port. etcd's own (zap) logs are dropped; a fatal server error
// after the start goes to logger, and the mon logs what matters through
// slog. A directory another etcd (of this process or another) has fails at
// once with *dirlock.InUseError: etcd's own database lock waits for ever.
func StartEtcd(ctx context.Context, dir string, logger *slog.Logger) (*Etcd, error) {
	if logger == nil {
		logger = slog.Default()
	}
	// etcd makes its directory 0700 itself; so does this, before the lock
	// file goes in it.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mon: embedded etcd: %w", err)
	}
	lock, err := dirlock.Lock(dir)
	if err != nil {
		return nil, fmt.Errorf("mon: embedded etcd: %w", err)
	}
	sock, tmpDir, err := etcdSocketPath(dir)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("mon: embedded etcd in %s: %w", dir, err)
	}
	ee, err := startEtcd(ctx, dir, sock, logger)
	if err != nil {
		if tmpDir != "" {
			os.RemoveAll(tmpDir)
		}
		lock.Close()
		return nil, err
	}
	ee.lock, ee.tmpDir = lock, tmpDir
	return ee, nil
}

// etcdSocketPath is where the client socket of an etcd with its data in
// dir goes: in dir's subdirectory etcdSockDir, made to give group and
// others no access, when dir is ours and nobody else may write in it (so
// nobody can swap the subdirectory for one of theirs) and the path fits
// in a socket address; else in a new private directory under
// os.TempDir(), which it returns as well for the caller to remove. Never
// on a TCP port.
func etcdSocketPath(dir string) (sock, tmpDir string, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", "", err
	}
	sub := filepath.Join(abs, etcdSockDir)
	sock = filepath.Join(sub, etcdSocket)
	if len(sock) <= maxSocketPath && ownDir(abs, 0o022) {
		if err := os.Mkdir(sub, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", "", err
		}
		// One left by an earlier start, or made under another umask:
		// Lstat saw no link, and nobody else can have replaced it since.
		if ownDir(sub, 0) {
			if err := os.Chmod(sub, 0o700); err != nil {
				return "", "", err
			}
		}
		if ownDir(sub, 0o077) {
			return sock, "", nil
		}
	}
	// os.MkdirTemp makes the directory 0700, with a name nobody can
	// guess or take first.
	if tmpDir, err = os.MkdirTemp("", "osprey-etcd-"); err != nil {
		return "", "", err
	}
	if tmpDir, err = filepath.Abs(tmpDir); err != nil {
		os.RemoveAll(tmpDir)
		return "", "", err
	}
	sock = filepath.Join(tmpDir, etcdSocket)
	if len(sock) > maxSocketPath || !ownDir(tmpDir, 0o077) {
		os.RemoveAll(tmpDir)
		return "", "", fmt.Errorf("no private directory for etcd's client socket: %s is too long for a socket address or not private (set TMPDIR to a shorter, private path)", sock)
	}
	return sock, tmpDir, nil
}

// ownDir reports whether path is a directory (not a link to one) that
// this process's user owns and whose mode has none of the bits in deny.
func ownDir(path string, deny fs.FileMode) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&deny != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// embeddedCatchUpEntries is the embedded etcd's SnapshotCatchUpEntries.
const embeddedCatchUpEntries = 100

func startEtcd(ctx context.Context, dir, sock string, logger *slog.Logger) (*Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "osprey-mon"
	cfg.Dir = dir
	// etcd listens on Host+Path of a unix URL.
	client := url.URL{Scheme: "unix", Path: sock}
	placeholder, _ := url.Parse(etcdPeerPlaceholder)
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{*placeholder}
	// No peer listener: etcd would serve raft, /members and /version on
	// it, to anyone, and a lone member needs none. (A unix peer URL is no
	// way out: etcd listens on its host alone, a path relative to the
	// working directory.)
	cfg.ListenPeerUrls = nil
	cfg.AdvertisePeerUrls = []url.URL{*placeholder}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Keep the revision history bounded: the mon only ever reads the
	// newest values and watches from the present.
	cfg.AutoCompactionMode = embed.CompactorModeRevision
	cfg.AutoCompactionRetention = "10000"
	// etcd keeps this many applied raft entries in memory for followers
	// that fall behind (5000 by default); a lone member has none. Each
	// OSD stats write is an entry of about 5 KB, so the default held some
	// 45 MB of old writes, and a soak saw the mon's heap grow by it for
	// hours.
	cfg.SnapshotCatchUpEntries = embeddedCatchUpEntries

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("mon: starting embedded etcd in %s: %w", dir, err)
	}
	t := time.NewTimer(etcdStartTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("mon: embedded etcd in %s: %w", dir, err)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	case <-t.C:
		e.Close()
		return nil, fmt.Errorf("mon: embedded etcd in %s not ready within %v", dir, etcdStartTimeout)
	}
	ee := &Etcd{e: e, dir: dir}
	for _, l := range e.Clients {
		if l.Addr().Network() != "unix" {
			e.Close()
			return nil, fmt.Errorf("mon: embedded etcd in %s listens for clients on %s %s, want only its unix socket", dir, l.Addr().Network(), l.Addr())
		}
	}
	if len(e.Peers) != 0 {
		e.Close()
		return nil, fmt.Errorf("mon: embedded etcd in %s opened %d peer listeners, want none", dir, len(e.Peers))
	}
	// The directory keeps everyone else out already; the socket itself
	// (made as the umask allows) need not let them in either.
	if err := os.Chmod(sock, 0o600); err != nil {
		e.Close()
		return nil, fmt.Errorf("mon: embedded etcd in %s: %w", dir, err)
	}
	// clientv3 reads unix:///abs/path as the socket at /abs/path.
	ee.endpoints = []string{"unix://" + sock}
	go func() {
		// A fatal server error after start (disk full, say) is logged;
		// the mons see it as etcd being unavailable.
		if err, ok := <-e.Err(); ok && err != nil {
			logger.Error("embedded etcd failed", "dir", dir, "err", err)
		}
	}()
	return ee, nil
}

// Endpoints are the client URLs to give clientv3 (and Config.Etcd): one,
// unix:// and the absolute path of the socket, which only this Unix user
// can reach.
func (e *Etcd) Endpoints() []string { return append([]string(nil), e.endpoints...) }

// Dir is the directory that holds its data, as StartEtcd was given it.
func (e *Etcd) Dir() string { return e.dir }

// Close stops the server, then frees its directory; its data stays there.
func (e *Etcd) Close() {
	e.e.Close()
	if e.tmpDir != "" {
		os.RemoveAll(e.tmpDir)
	}
	e.lock.Close()
}

// newEtcdClient connects to endpoints with etcd's own logging off.
func newEtcdClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		// Notice a dead etcd member and move to another endpoint.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
	})
}
