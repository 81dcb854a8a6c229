package mon

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/ospreystore/osprey/internal/dirlock"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is a single-node etcd server running inside this process: for a
// one-mon cluster, `osprey up`, and tests. A production cluster runs etcd
// on its own (three or five members) and gives the mons its endpoints.
type Etcd struct {
	e         *embed.Etcd
	dir       string
	lock      *os.File // dirlock on dir, released after the server stopped
	endpoints []string
}

// etcdStartTimeout bounds how long StartEtcd waits for the server to be
// ready (it elects itself leader of its one-member raft group).
const etcdStartTimeout = 30 * time.Second

// StartEtcd starts a single-node etcd with its data in dir, serving clients
// and its (unused) peer port on free loopback ports. etcd's own (zap) logs
// are dropped; a fatal server error after the start goes to logger, and
// the mon logs what matters through slog. A directory another etcd (of
// this process or another) has fails at once with *dirlock.InUseError:
// etcd's own database lock waits for ever.
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
	ee, err := startEtcd(ctx, dir, logger)
	if err != nil {
		lock.Close()
		return nil, err
	}
	ee.lock = lock
	return ee, nil
}

func startEtcd(ctx context.Context, dir string, logger *slog.Logger) (*Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "osprey-mon"
	cfg.Dir = dir
	loop, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls = []url.URL{*loop}
	cfg.AdvertiseClientUrls = []url.URL{*loop}
	cfg.ListenPeerUrls = []url.URL{*loop}
	cfg.AdvertisePeerUrls = []url.URL{*loop}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Keep the revision history bounded: the mon only ever reads the
	// newest values and watches from the present.
	cfg.AutoCompactionMode = embed.CompactorModeRevision
	cfg.AutoCompactionRetention = "10000"

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
		ee.endpoints = append(ee.endpoints, "http://"+l.Addr().String())
	}
	go func() {
		// A fatal server error after start (disk full, say) is logged;
		// the mons see it as etcd being unavailable.
		if err, ok := <-e.Err(); ok && err != nil {
			logger.Error("embedded etcd failed", "dir", dir, "err", err)
		}
	}()
	return ee, nil
}

// Endpoints are the client URLs to give clientv3 (and Config.Etcd).
func (e *Etcd) Endpoints() []string { return append([]string(nil), e.endpoints...) }

// Dir is the directory that holds its data, as StartEtcd was given it.
func (e *Etcd) Dir() string { return e.dir }

// Close stops the server, then frees its directory; its data stays there.
func (e *Etcd) Close() {
	e.e.Close()
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
