package mon

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/buildinfo"
	"github.com/ospreystore/osprey/internal/guard"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/transports"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/osdpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/protobuf/proto"
)

// Config configures one mon.
type Config struct {
	// Name is the mon's name ("a"); its messenger is "mon.NAME". Default "a".
	Name string
	// Listen is the msgr address to serve on, e.g. "tcp://0.0.0.0:3300".
	// Default "tcp://127.0.0.1:0".
	Listen string
	// Etcd lists the endpoints of an etcd cluster; EmbedEtcdDir instead
	// runs a single-node etcd in this process with its data there.
	// Exactly one of the two.
	Etcd         []string
	EmbedEtcdDir string
	// HeartbeatGrace is how long an OSD may go without a beacon (its
	// lease's TTL, rounded up to seconds) or be reported unreachable
	// before it is marked down. Default 20s, Ceph's osd_heartbeat_grace.
	HeartbeatGrace time.Duration
	// DownOutInterval is how long an OSD stays down before the mon marks
	// it out, so its PGs move elsewhere. Default (0) 10m, Ceph's
	// mon_osd_down_out_interval; NeverOut: never (only an operator's osd
	// out moves data).
	DownOutInterval time.Duration
	// MinInRatio: the mon marks no more down OSDs out once fewer than
	// this fraction of the OSDs are in (Ceph's mon_osd_min_in_ratio): a
	// whole rack down is not re-replicated onto the rest. Default (0)
	// 0.75; negative: no floor.
	MinInRatio float64
	// MinDownReporters is how many reporters (hosts) must report an OSD
	// before it is marked down. Default 2.
	MinDownReporters int
	// Pool is the pool of the first map, when this mon creates the
	// cluster. Default {Id: 1, Name: "default", Size: 3, PgCount: 128}.
	Pool *osdpb.Pool
	// NearfullRatio, BackfillfullRatio and FullRatio are the first map's
	// full ratios, when this mon creates the cluster (Ceph's
	// mon_osd_nearfull_ratio and its siblings); 0: Ceph's defaults (0.85,
	// 0.90, 0.95). Later, `osd set-nearfull-ratio` and its siblings change
	// them.
	NearfullRatio, BackfillfullRatio, FullRatio float64
	// NoAuth turns authentication off: sessions use method "none", a peer
	// is whoever its HELLO claims, and no caps are checked. For tests and
	// closed networks only; Start logs a warning. By default the mon
	// authenticates every session and checks every request against the
	// peer's caps (docs/auth.md).
	NoAuth bool
	// ServiceModes are the connection modes the mon accepts, from clients
	// and daemons alike, in order of preference (Ceph's
	// ms_mon_service_mode): "secure" seals every frame after the
	// handshake (docs/auth.md); it needs authentication. Nil: crc.
	ServiceModes []msgr.Mode
	// Transports are the messenger's (tests); nil: the build's defaults
	// (transports.Default), which Close closes.
	Transports []wire.Transport
	// Logger defaults to slog.Default(), with mon=NAME.
	Logger *slog.Logger
	// RequestTTL is how long the mon keeps the reply of a command that
	// carried a request id, to answer the client's repeats of it with
	// that reply instead of applying the command again. Default 10m: far
	// beyond any client's retries. Rounded up to whole seconds.
	RequestTTL time.Duration

	// sessionTTL is the etcd session's TTL in seconds: how long a dead
	// leader holds the election. Default 3; etcd's minimum is 2.
	sessionTTL int
	// prefix is the etcd key prefix. Default "/osprey/".
	prefix string
	// dropReply, when set, is asked before each reply is sent; true drops
	// it, as a lost reply would be (tests of retried commands).
	dropReply func(t osdpb.MsgType) bool
	// requestGranted, when set, is called once a command's request record
	// has its lease and before the command's transaction: a test runs a
	// copy of the request there, which wins, so that this one loses.
	requestGranted func()
	// requestRan, when set, may replace what a command with a request id
	// returned: a test fails one whose transaction wrote its record, as
	// one whose commit etcd applied but whose answer was lost fails.
	requestRan func(*osdpb.MonCommandReply, error) (*osdpb.MonCommandReply, error)
}

// NeverOut as Config.DownOutInterval: the mon never marks a down OSD
// out (Ceph's mon_osd_down_out_interval = 0).
const NeverOut time.Duration = -1

func (c *Config) setDefaults() error {
	if c.Name == "" {
		c.Name = "a"
	}
	if err := msgr.EntityName("mon." + c.Name).Validate(); err != nil {
		return fmt.Errorf("mon: name %q: %w", c.Name, err)
	}
	if c.Listen == "" {
		c.Listen = "tcp://127.0.0.1:0"
	}
	if (len(c.Etcd) == 0) == (c.EmbedEtcdDir == "") {
		return errors.New("mon: give either etcd endpoints (Etcd) or a directory for an embedded etcd (EmbedEtcdDir), not both or neither")
	}
	if c.HeartbeatGrace <= 0 {
		c.HeartbeatGrace = 20 * time.Second
	}
	if c.DownOutInterval == 0 {
		c.DownOutInterval = 10 * time.Minute
	}
	switch {
	case c.MinInRatio == 0:
		c.MinInRatio = 0.75
	case c.MinInRatio > 1:
		return fmt.Errorf("mon: MinInRatio %g: want a fraction of the OSDs, at most 1", c.MinInRatio)
	}
	if c.MinDownReporters <= 0 {
		c.MinDownReporters = 2
	}
	if c.Pool == nil {
		c.Pool = &osdpb.Pool{Id: placement.DefaultPoolID, Name: placement.DefaultPoolName, Size: 3, PgCount: placement.DefaultPGCount}
	}
	if err := placement.CheckRatios(c.firstMap("")); err != nil {
		return fmt.Errorf("mon: %w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("mon", c.Name)
	if c.sessionTTL <= 0 {
		c.sessionTTL = 3
	}
	if c.RequestTTL <= 0 {
		c.RequestTTL = defaultRequestTTL
	}
	if c.prefix == "" {
		c.prefix = defaultPrefix
	}
	return nil
}

// firstMap is the map this mon creates a cluster with, at epoch 1.
func (c *Config) firstMap(fsid string) *osdpb.ClusterMap {
	return &osdpb.ClusterMap{Epoch: 1, Fsid: fsid, Pools: []*osdpb.Pool{c.Pool},
		NearfullRatio: c.NearfullRatio, BackfillfullRatio: c.BackfillfullRatio, FullRatio: c.FullRatio}
}

// tick is how often the leader looks for OSDs to mark out and for failure
// reports that have aged enough: every second, or DownOutInterval/10 when
// that is shorter, but not more often than every 100ms.
func (c *Config) tick() time.Duration {
	return max(100*time.Millisecond, min(time.Second, c.DownOutInterval/10))
}

// statsEvery is how often the leader writes an OSD's beacon record to
// etcd while only its counters change (leadership.storeStats): 5 s, as
// Ceph's OSDs report PG stats to the mgr, and well within the grace a
// standby's status takes a record for fresh in (twice the grace).
func (c *Config) statsEvery() time.Duration {
	return min(5*time.Second, c.HeartbeatGrace/2)
}

// leaseTTL is an OSD lease's TTL in seconds: the grace, rounded up.
func (c *Config) leaseTTL() int64 {
	return max(1, int64((c.HeartbeatGrace+time.Second-1)/time.Second))
}

// Mon is a running monitor.
type Mon struct {
	cfg   Config
	log   *slog.Logger
	k     keys
	cli   *clientv3.Client
	etcd  *Etcd // the embedded etcd, if this mon runs one
	store *mapStore
	auth  *authStore
	ms    *msgr.Messenger
	addr  string
	fsid  string
	// monAddrs are the addresses of the mons up now, sorted (watchMons),
	// for subscribers (MonMap.mons).
	monAddrs atomic.Pointer[[]string]
	// failLog limits the "request failed" lines to one per message type
	// every 10 s: an OSD held down beacons every second, refused each time.
	failLog guard.RateLog

	// pastMu guards pastMaps, older maps read for PG reports
	// (reportMaps): a map of an epoch never changes.
	pastMu   sync.Mutex
	pastMaps map[uint64]*placement.Map

	mapMu sync.Mutex // orders adopt: maps are stored and pushed in epoch order
	mapv  atomic.Pointer[placement.Map]
	// mapAt is when this mon adopted its map (unix ns): the map carries
	// no time of its own.
	mapAt atomic.Int64

	subMu sync.Mutex
	subs  map[*msgr.Conn]bool // MON_SUBSCRIBE'd conns; true: also the auth table
	// authTable is the latest auth table (watchAuth), nil until read.
	authTable atomic.Pointer[osdpb.AuthTable]
	// keeper checks peers and requests against authTable (access.go).
	keeper auth.Keeper
	// keyrings are the keyring files WriteKeyrings wrote, kept current.
	keyrings keyringFiles
	// etcdSeen is the last round of watchEtcdHealth, nil before one.
	etcdSeen atomic.Pointer[etcdProbe]

	lead    atomic.Pointer[leadership] // nil while a standby
	hint    atomic.Pointer[string]     // the leader's address, as last seen
	settled chan struct{}              // closed once a leader is known
	settle  sync.Once

	ctx    context.Context // ends at Close: loops and handlers stop
	cancel context.CancelFunc
	// etcdCtx outlives ctx for the clean-up that needs etcd at Close:
	// resigning and revoking the session, so a standby leads at once.
	etcdCtx    context.Context
	etcdCancel context.CancelFunc
	wg         sync.WaitGroup // loops
	hmu        sync.Mutex     // guards closing; handlers.Go under it
	closing    bool
	handlers   sync.WaitGroup // requests in progress
	slots      chan struct{}  // one per request in progress, maxHandlers
	closeOnce  sync.Once
	// abandon makes Close leave the etcd session to expire instead of
	// revoking it, as a crash would (tests).
	abandon  atomic.Bool
	closeErr error

	// releaseTransports closes ms's transports if Start made them.
	releaseTransports func()
}

// settleTimeout bounds how long Start waits to learn who leads.
const settleTimeout = 10 * time.Second

// etcdWaitNotice is how often a starting mon says that it still waits for
// etcd (a var for tests).
var etcdWaitNotice = 5 * time.Second

// noticeEtcdWait logs, every etcdWaitNotice until stop is called, that
// the mon waits for etcd at endpoints. The etcd client retries an
// endpoint that does not answer for as long as the context allows (a mon
// may well start before its etcd does), and a mon given a wrong address
// would otherwise wait without a word.
func (m *Mon) noticeEtcdWait(endpoints []string) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	start, every := time.Now(), etcdWaitNotice
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				m.log.Warn("mon: waiting for etcd", "endpoints", endpoints, "waited", time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// Start connects to etcd (or starts the embedded one), creates the cluster
// if etcd holds none yet, listens, and joins the election. It returns once
// it knows who leads (itself or another mon), or after settleTimeout.
// ctx bounds the start only; Close stops the mon.
func Start(ctx context.Context, cfg Config) (*Mon, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m := &Mon{cfg: cfg, log: cfg.Logger, k: keys{cfg.prefix}, subs: map[*msgr.Conn]bool{}, settled: make(chan struct{}), slots: make(chan struct{}, maxHandlers)}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.etcdCtx, m.etcdCancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			m.abort()
		}
	}()

	endpoints := cfg.Etcd
	if cfg.EmbedEtcdDir != "" {
		e, err := StartEtcd(ctx, cfg.EmbedEtcdDir, m.log)
		if err != nil {
			return nil, err
		}
		m.etcd = e
		endpoints = e.Endpoints()
	}
	cli, err := newEtcdClient(endpoints)
	if err != nil {
		return nil, fmt.Errorf("mon: etcd client for %v: %w", endpoints, err)
	}
	m.cli = cli
	m.store = &mapStore{cli: cli, k: m.k}
	stopNotice := m.noticeEtcdWait(endpoints)
	first, _, err := m.store.create(ctx, cfg.firstMap(newUUID()))
	stopNotice()
	if err != nil {
		return nil, err
	}
	m.fsid = first.FSID()
	m.auth = &authStore{cli: cli, k: m.k, fsid: m.fsid, keepAdmins: !cfg.NoAuth}
	m.adopt(first)

	var ts []wire.Transport
	if ts, m.releaseTransports, err = transports.OrDefault(cfg.Transports); err != nil {
		return nil, err
	}
	var authOpts *msgr.AuthOptions
	if cfg.NoAuth {
		m.log.Warn("authentication is off (NoAuth): anyone who reaches the mon may change the map; for tests and closed networks only")
		if slices.Contains(cfg.ServiceModes, msgr.ModeSecure) {
			return nil, fmt.Errorf("mon: %w (NoAuth is set)", msgr.ErrSecureNeedsAuth)
		}
	} else if authOpts, err = m.startAuth(ctx); err != nil {
		return nil, err
	} else {
		authOpts.Modes = cfg.ServiceModes
	}
	m.ms, err = msgr.New(msgr.Options{
		Name: msgr.EntityName("mon." + cfg.Name), Dispatcher: dispatcher{m}, Auth: authOpts,
		// Everyone talks to the mon as a lossy client and retries.
		DefaultPolicy: msgr.StatelessServer,
		Logger:        m.log.With("net", "msgr"),
		Keepalive:     time.Second,
		Transports:    ts,
	})
	if err != nil {
		return nil, err
	}
	if m.addr, err = m.ms.Listen(ctx, cfg.Listen); err != nil {
		return nil, fmt.Errorf("mon: listen on %s: %w", cfg.Listen, err)
	}
	if other, err := m.nameTaken(ctx); err != nil {
		return nil, err
	} else if other != "" {
		return nil, fmt.Errorf("mon: mon.%s runs already, at %s: each mon needs a name of its own (--name); if that mon is gone, its registration ends within %d s", cfg.Name, other, cfg.sessionTTL)
	}
	m.wg.Go(m.watchMap)
	m.wg.Go(m.watchMons)
	m.wg.Go(m.watchAuth)
	m.wg.Go(m.watchEtcdHealth)
	m.wg.Go(m.runElection)
	t := time.NewTimer(settleTimeout)
	defer t.Stop()
	select {
	case <-m.settled:
	case <-t.C:
		m.log.Warn("no leader known yet; serving as a standby")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	ok = true
	m.log.Info("mon started", "addr", m.addr, "fsid", m.fsid, "leader", m.IsLeader(), "epoch", m.Map().Epoch(), "version", buildinfo.Version())
	return m, nil
}

// abort undoes a failed Start.
func (m *Mon) abort() {
	m.cancel()
	m.hmu.Lock()
	m.closing = true
	m.hmu.Unlock()
	if m.ms != nil {
		m.ms.Kill()
	}
	if m.releaseTransports != nil {
		m.releaseTransports()
	}
	m.wg.Wait()
	m.handlers.Wait()
	m.etcdCancel()
	if m.cli != nil {
		m.cli.Close()
	}
	if m.etcd != nil {
		m.etcd.Close()
	}
}

// Addr is the msgr address the mon serves on.
func (m *Mon) Addr() string { return m.addr }

// IsLeader reports whether this mon leads now.
func (m *Mon) IsLeader() bool { return m.lead.Load() != nil }

// Map is the newest map this mon has seen in etcd.
func (m *Mon) Map() *placement.Map { return m.mapv.Load() }

// MapChangedAt is when this mon adopted its newest map.
func (m *Mon) MapChangedAt() time.Time { return time.Unix(0, m.mapAt.Load()) }

// Messenger is the mon's messenger, for its counters.
func (m *Mon) Messenger() *msgr.Messenger { return m.ms }

// FSID is the cluster's id.
func (m *Mon) FSID() string { return m.fsid }

// Leader is the leading mon's address as this mon last saw it; "" if none.
func (m *Mon) Leader() string {
	if m.IsLeader() {
		return m.addr
	}
	// A standby that sees its own address as the leader's holds a stale
	// observation (its leadership ended while it could not reach etcd's
	// quorum): naming itself would send clients round in a circle.
	if p := m.hint.Load(); p != nil && *p != m.addr {
		return *p
	}
	return ""
}

// Ready says why the mon cannot answer for the cluster now, nil when it
// can (a readiness probe: /readyz of --metrics-addr): it leads, or knows
// a leader to relay to, which it does only while its etcd session lasts.
func (m *Mon) Ready() error {
	if m.ctx.Err() != nil {
		return errors.New("the mon is stopping")
	}
	if m.Leader() == "" {
		return errors.New("no mon leads, or this one cannot reach etcd's quorum")
	}
	return nil
}

// Close leaves the election (a standby leads at once), stops serving and
// disconnects from etcd; an embedded etcd stops too.
func (m *Mon) Close(ctx context.Context) error {
	m.closeOnce.Do(func() {
		m.cancel()
		m.hmu.Lock()
		m.closing = true
		m.hmu.Unlock()
		done := make(chan struct{})
		go func() { m.wg.Wait(); m.handlers.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			m.closeErr = fmt.Errorf("mon: close: %w", ctx.Err())
		}
		if err := m.ms.Shutdown(ctx); err != nil && m.closeErr == nil {
			m.closeErr = err
		}
		m.releaseTransports()
		m.etcdCancel()
		m.cli.Close()
		if m.etcd != nil {
			m.etcd.Close()
		}
		m.log.Info("mon stopped")
	})
	return m.closeErr
}

// adopt makes mp the mon's map if it is newer, and pushes it to the
// subscribers.
func (m *Mon) adopt(mp *placement.Map) {
	m.mapMu.Lock()
	defer m.mapMu.Unlock()
	if cur := m.mapv.Load(); mp.FSID() != m.fsid || (cur != nil && mp.Epoch() <= cur.Epoch()) {
		return
	}
	m.mapv.Store(mp)
	m.mapAt.Store(time.Now().UnixNano())
	m.push(mp)
}

// watchMap follows the map key in etcd: every mon serves the newest map,
// whoever wrote it.
func (m *Mon) watchMap() {
	backoff := newBackoff()
	for m.ctx.Err() == nil {
		resp, err := m.cli.Get(m.ctx, m.k.current())
		if err != nil {
			m.log.Warn("reading the map from etcd", "err", err)
			backoff.wait(m.ctx)
			continue
		}
		if len(resp.Kvs) > 0 {
			m.adoptBytes(resp.Kvs[0].Value)
		}
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(m.ctx))
		wch := m.cli.Watch(wctx, m.k.current(), clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				m.log.Debug("map watch ended", "err", err)
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					m.adoptBytes(ev.Kv.Value)
				}
			}
			backoff.reset()
		}
		wcancel()
		backoff.wait(m.ctx)
	}
}

// watchMons keeps monAddrs: the mons registered (up) in etcd. A change
// is pushed to the subscribers, so that they know every mon that runs,
// not only the ones they were started with (Ceph pushes its monmap).
func (m *Mon) watchMons() {
	backoff := newBackoff()
	read := func() (int64, bool) {
		resp, err := m.cli.Get(m.ctx, m.k.monsPrefix(), clientv3.WithPrefix())
		if err != nil {
			if m.ctx.Err() == nil {
				m.log.Debug("reading the mons from etcd", "err", err)
			}
			return 0, false
		}
		var addrs []string
		for _, kv := range resp.Kvs {
			addrs = append(addrs, string(kv.Value))
		}
		slices.Sort(addrs)
		addrs = slices.Compact(addrs)
		// Under mapMu, as map pushes (which carry the list too): a
		// subscriber takes each list as the whole, so an older one must
		// never come after a newer.
		m.mapMu.Lock()
		if old := m.monAddrs.Swap(&addrs); old == nil || !slices.Equal(*old, addrs) {
			mm := &osdpb.MonMap{Mons: addrs}
			m.pushTo(false, osdpb.MsgType_MSG_MON_MAP, func(*msgr.Conn) proto.Message { return mm })
		}
		m.mapMu.Unlock()
		return resp.Header.Revision, true
	}
	for m.ctx.Err() == nil {
		rev, ok := read()
		if !ok {
			backoff.wait(m.ctx)
			continue
		}
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(m.ctx))
		for wr := range m.cli.Watch(wctx, m.k.monsPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				break
			}
			if _, ok := read(); !ok {
				break
			}
			backoff.reset()
		}
		wcancel()
		backoff.wait(m.ctx)
	}
}

// upMons is monAddrs: the mons up now, as far as this mon knows.
func (m *Mon) upMons() []string {
	if p := m.monAddrs.Load(); p != nil {
		return *p
	}
	return nil
}

func (m *Mon) adoptBytes(b []byte) {
	mp, err := unmarshalMap(b)
	if err != nil {
		m.log.Error("etcd holds an invalid map", "err", err)
		return
	}
	m.adopt(mp)
}

// runElection campaigns for leadership, leads while it holds it, and
// campaigns again after losing it, until Close.
func (m *Mon) runElection() {
	backoff := newBackoff()
	for m.ctx.Err() == nil {
		sess, err := concurrency.NewSession(m.cli, concurrency.WithTTL(m.cfg.sessionTTL), concurrency.WithContext(m.etcdCtx))
		if err != nil {
			m.log.Warn("etcd session", "err", err)
			backoff.wait(m.ctx)
			continue
		}
		m.serveSession(sess)
		backoff.wait(m.ctx)
	}
}

// serveSession registers the mon and campaigns on one etcd session, and
// leads if elected, until the session ends or the mon closes.
func (m *Mon) serveSession(sess *concurrency.Session) {
	sctx, cancel := context.WithCancel(m.ctx)
	var observers sync.WaitGroup
	defer func() {
		cancel()
		observers.Wait()
		// The leader we saw is no longer known to be one: a mon out of
		// etcd's quorum names none (NOT_LEADER without a hint, so
		// clients hunt on; /readyz 503), as a Ceph mon out of quorum
		// serves no one. The next session's observer names it again.
		m.hint.Store(nil)
		if m.abandon.Load() {
			sess.Orphan() // as if the process died: the lease runs out
			return
		}
		// Revoking the lease drops our registration and election key now,
		// rather than after the TTL: a standby takes over at once.
		if err := sess.Close(); err != nil && m.ctx.Err() == nil {
			m.log.Debug("closing the etcd session", "err", err)
		}
	}()
	observers.Go(func() {
		select {
		case <-sess.Done():
			cancel()
		case <-sctx.Done():
		}
	})
	// Up (on the session's lease) and known (kept after it stops), in
	// one transaction, unless another mon is up under our name at
	// another address (Start refused that; this catches two starting at
	// once): it would take over our registration, and "mon rm" of the
	// one that stopped would remove the one that runs.
	key := m.k.mon(m.cfg.Name)
	resp, err := m.cli.Txn(sctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "!=", 0), clientv3.Compare(clientv3.Value(key), "!=", m.addr)).
		Then(clientv3.OpGet(key)).
		Else(clientv3.OpPut(key, m.addr, clientv3.WithLease(sess.Lease())), clientv3.OpPut(m.k.knownMon(m.cfg.Name), m.addr),
			clientv3.OpPut(m.k.monVersion(m.cfg.Name), buildinfo.Version(), clientv3.WithLease(sess.Lease()))).
		Commit()
	if err != nil {
		m.log.Warn("registering in etcd", "err", err)
		return
	}
	if resp.Succeeded {
		other := ""
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			other = string(kvs[0].Value)
		}
		m.failLog.Log(m.log, slog.LevelError, "name taken", "another mon runs under this mon's name: this one stays out of the election until its registration ends",
			"name", m.cfg.Name, "other", other)
		return
	}
	el := concurrency.NewElection(sess, m.k.election())
	observers.Go(func() {
		for resp := range el.Observe(sctx) {
			if len(resp.Kvs) > 0 {
				addr := string(resp.Kvs[0].Value)
				m.hint.Store(&addr)
				// Our own key settles Start only once m.lead is set
				// below; settling here let Start return a leader whose
				// IsLeader was still false.
				if addr != m.addr {
					m.settle.Do(func() { close(m.settled) })
				}
			}
		}
	})
	if err := el.Campaign(sctx, m.addr); err != nil {
		if sctx.Err() == nil {
			m.log.Warn("campaign", "err", err)
		}
		return
	}
	l := newLeadership(sctx, m, el)
	m.lead.Store(l)
	m.settle.Do(func() { close(m.settled) })
	m.log.Info("leading", "addr", m.addr, "epoch", m.Map().Epoch())
	l.run()
	m.lead.Store(nil)
	if m.ctx.Err() == nil {
		m.log.Warn("no longer leading; campaigning again")
	}
}

// nameTaken returns the address of another mon registered (up) under
// this mon's name, "" for none: a registration at our own address is
// ours, from before a restart, and runs out with its lease.
func (m *Mon) nameTaken(ctx context.Context) (string, error) {
	resp, err := m.cli.Get(ctx, m.k.mon(m.cfg.Name))
	if err != nil {
		return "", unavailable("reading the mons' registrations", err)
	}
	if len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) == m.addr {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// Status gathers what "status" returns: the map, the OSDs' last beacons
// and the registered mons, from etcd.
func (m *Mon) Status(ctx context.Context) (*Status, error) {
	in, err := m.statusInput(ctx)
	if err != nil {
		return nil, err
	}
	return computeStatus(in), nil
}

// StatusDetail is Status with the health checks by code (Health.Detail),
// as "health detail" has them: what the metrics export.
func (m *Mon) StatusDetail(ctx context.Context) (*Status, error) {
	in, err := m.statusInput(ctx)
	if err != nil {
		return nil, err
	}
	in.detail = true
	return computeStatus(in), nil
}

// statusInput reads what the status is computed from.
func (m *Mon) statusInput(ctx context.Context) (statusInput, error) {
	mp := m.Map()
	beacons, err := m.beacons(ctx)
	if err != nil {
		return statusInput{}, err
	}
	mons, err := m.mons(ctx)
	if err != nil {
		return statusInput{}, err
	}
	in := statusInput{mp: mp, beacons: beacons, mons: mons, now: time.Now(), fresh: 2 * m.cfg.HeartbeatGrace,
		past: m.reportMaps(ctx, mp, beacons)}
	if h := m.etcdSeen.Load(); h != nil && time.Since(h.at) < etcdHealthFresh {
		in.etcdMembers, in.etcdDown = h.members, h.down
	}
	return in, nil
}

// etcdProbe is what watchEtcdHealth last saw of the etcd members.
type etcdProbe struct {
	at      time.Time
	members int
	down    []string
}

const (
	// etcdProbeEvery is how often watchEtcdHealth dials the members, and
	// etcdProbeTimeout bounds a round. It runs apart from the status,
	// which must not wait on a member whose host drops packets.
	etcdProbeEvery   = 5 * time.Second
	etcdProbeTimeout = 3 * time.Second
	// etcdHealthFresh: an older round (the prober stuck) says nothing.
	etcdHealthFresh = 30 * time.Second
)

// watchEtcdHealth asks the etcd members for their status every
// etcdProbeEvery, for the status's ETCD_MEMBER_DOWN (m.etcdSeen).
func (m *Mon) watchEtcdHealth() {
	t := time.NewTicker(etcdProbeEvery)
	defer t.Stop()
	for {
		n, down := m.etcdHealth(m.ctx)
		m.etcdSeen.Store(&etcdProbe{at: time.Now(), members: n, down: down})
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// etcdHealth dials each member of the etcd cluster's client URL, at once:
// how many members there are, and a line for each that could not be
// reached. A member down leaves the quorum one loss from gone, which would
// stop every map change; the mons' reads go on meanwhile, so nothing else
// shows it. A TCP dial, not an etcd call: the client's Status of a member
// whose host drops packets did not end with its context (the status
// waited for it), and a member that answers a dial is up as far as the
// quorum's margin goes. Zero and nil when the member list cannot be read
// (the mon's reads fail then too) or has one member.
func (m *Mon) etcdHealth(ctx context.Context) (int, []string) {
	ctx, cancel := context.WithTimeout(ctx, etcdProbeTimeout)
	defer cancel()
	list, err := m.cli.MemberList(ctx)
	if err != nil || len(list.Members) < 2 {
		// One member (the embedded etcd, whose advertised URL is no
		// address to dial): down, the mon's reads fail too.
		return 0, nil
	}
	down := make([]string, len(list.Members))
	var wg sync.WaitGroup
	for i, mb := range list.Members {
		name := cmp.Or(mb.Name, fmt.Sprintf("%x", mb.ID))
		if len(mb.ClientURLs) == 0 {
			down[i] = fmt.Sprintf("etcd member %s: not started (no client URL)", name)
			continue
		}
		wg.Go(func() {
			if err := dialURL(ctx, mb.ClientURLs[0]); err != nil {
				down[i] = fmt.Sprintf("etcd member %s (%s): %v", name, mb.ClientURLs[0], err)
			}
		})
	}
	wg.Wait()
	return len(list.Members), slices.DeleteFunc(down, func(s string) bool { return s == "" })
}

// dialURL opens and closes a connection to an etcd client URL
// (http://HOST:PORT, https://..., unix://PATH).
func dialURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	network, addr := "tcp", u.Host
	if u.Scheme == "unix" || u.Scheme == "unixs" {
		network, addr = "unix", cmp.Or(u.Host+u.Path, u.Opaque)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// maxReportMaps bounds the older maps statusInput reads for PG reports:
// beacons come every second, so reports lag the newest map by an epoch or
// a few; a PG whose report is older than those is unknown until its next.
const maxReportMaps = 4

// reportMaps reads the maps of the newest epochs, before mp's, that the up
// OSDs' PG reports were made at (statusInput.past). One it cannot read is
// left out: its PGs are unknown until their next report, as before.
func (m *Mon) reportMaps(ctx context.Context, mp *placement.Map, beacons map[uint32]*beaconRecord) map[uint64]*placement.Map {
	var epochs []uint64
	for _, b := range upBeacons(mp, beacons) {
		for _, p := range b.PGs {
			if p.Epoch < mp.Epoch() && !slices.Contains(epochs, p.Epoch) {
				epochs = append(epochs, p.Epoch)
			}
		}
	}
	slices.Sort(epochs)
	epochs = epochs[max(0, len(epochs)-maxReportMaps):]
	m.pastMu.Lock()
	defer m.pastMu.Unlock()
	out := make(map[uint64]*placement.Map, len(epochs))
	for _, e := range epochs {
		old := m.pastMaps[e]
		if old == nil {
			var err error
			if old, err = m.store.get(ctx, e); err != nil {
				continue
			}
		}
		out[e] = old
	}
	m.pastMaps = out // what the next status needs is these, or newer
	return out
}

// beacons reads every OSD's last beacon record.
func (m *Mon) beacons(ctx context.Context) (map[uint32]*beaconRecord, error) {
	resp, err := m.cli.Get(ctx, m.k.statsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable("reading OSD stats from etcd", err)
	}
	out := map[uint32]*beaconRecord{}
	for _, kv := range resp.Kvs {
		id, ok := idOf(string(kv.Key), m.k.statsPrefix())
		if !ok {
			continue
		}
		var r beaconRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			m.log.Warn("bad stats record in etcd", "key", string(kv.Key), "err", err)
			continue
		}
		out[id] = &r
	}
	if l := m.lead.Load(); l != nil {
		l.overlayStats(out)
	}
	return out, nil
}

// forgetMon serves "mon rm NAME": the cluster no longer counts mon name
// (retired for good) among its mons, so status stops warning it is down.
// A mon that runs is refused: stop it first. Ceph's "mon remove".
func (m *Mon) forgetMon(ctx context.Context, name string) (map[string]any, error) {
	resp, err := m.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(m.k.mon(name)), "=", 0)).
		Then(clientv3.OpDelete(m.k.knownMon(name))).
		Commit()
	if err != nil {
		return nil, unavailable("forgetting a mon in etcd", err)
	}
	if !resp.Succeeded {
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "mon rm: mon.%s runs; stop it first", name)
	}
	if resp.Responses[0].GetResponseDeleteRange().Deleted == 0 {
		return map[string]any{"removed": false, "message": fmt.Sprintf("nothing to change (no mon.%s)", name)}, nil
	}
	m.log.Info("mon removed", "name", name)
	return map[string]any{"removed": true, "message": fmt.Sprintf("removed mon.%s", name)}, nil
}

// mons lists the cluster's mons: those registered now (up, the leader
// marked) and those that ever were and are not now (down).
func (m *Mon) mons(ctx context.Context) ([]MonStatus, error) {
	live, err := m.cli.Get(ctx, m.k.monsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable("reading the mons from etcd", err)
	}
	known, err := m.cli.Get(ctx, m.k.knownMonsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable("reading the mons from etcd", err)
	}
	versions, err := m.cli.Get(ctx, m.k.monVersionsPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable("reading the mons from etcd", err)
	}
	leader := m.Leader()
	byName := map[string]MonStatus{}
	for _, kv := range known.Kvs {
		name := strings.TrimPrefix(string(kv.Key), m.k.knownMonsPrefix())
		byName[name] = MonStatus{Name: name, Addr: string(kv.Value)}
	}
	for _, kv := range live.Kvs {
		name := strings.TrimPrefix(string(kv.Key), m.k.monsPrefix())
		byName[name] = MonStatus{Name: name, Addr: string(kv.Value), Up: true, Leader: string(kv.Value) == leader}
	}
	if self, ok := byName[m.cfg.Name]; ok && !self.Up {
		// This mon answers, so it runs: its registration lapsed with its
		// etcd session (a stall past the session's TTL) and comes back
		// with the next one. Called down, a lone mon said "1/1 mons down"
		// of itself.
		self.Up = true
		byName[m.cfg.Name] = self
	}
	for _, kv := range versions.Kvs {
		name := strings.TrimPrefix(string(kv.Key), m.k.monVersionsPrefix())
		if st, ok := byName[name]; ok && st.Up {
			st.Version = string(kv.Value)
			byName[name] = st
		}
	}
	return slices.SortedFunc(maps.Values(byName), func(a, b MonStatus) int { return strings.Compare(a.Name, b.Name) }), nil
}

// backoff is a capped exponential delay for retry loops.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 50 * time.Millisecond} }

func (b *backoff) reset() { b.d = 50 * time.Millisecond }

// wait sleeps the current delay (or until ctx ends) and doubles it, up to
// 2s.
func (b *backoff) wait(ctx context.Context) {
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	b.d = min(2*b.d, 2*time.Second)
}

// newUUID returns a random (version 4) UUID: a new cluster's fsid.
func newUUID() string {
	var u [16]byte
	rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
