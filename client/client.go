// Package client is Osprey's Go SDK: an S3-like API (buckets, objects,
// listings) over the cluster's public messenger. A Client fetches the
// cluster map from any OSD, computes each object's placement itself and
// sends every op straight to the primary of the object's PG, as a Ceph
// client does. Ops carry request ids, so a resend after a fault or a map
// change is answered from the PG log rather than applied twice.
//
// The client must never hide an OSD's answer: errors are typed (*Error,
// matched with errors.Is against ErrNoSuchKey and friends) and carry the
// S3 error code.
package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/guard"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/pending"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/transports"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/osdpb"
	"golang.org/x/sync/singleflight"
	"google.golang.org/protobuf/proto"
)

// Error is an OSD's non-OK answer; errors.Is matches the sentinels below.
// (It is internal/ops's Error, which go doc does not show here.) Its
// fields: Status, the osdpb.Status (the S3 error code by ErrorCode), and
// Message, what the OSD said. Its methods: Error, "Code: Message"; Is,
// true for the sentinel of the same Status; Retriable, true for the
// statuses the client retries itself (ServiceUnavailable, WrongPrimary,
// StaleEpoch), which reach a caller only once RetryFor ran out.
type Error = ops.Error

// Map is an immutable cluster map: its OSDs, its pools, and the placement
// function that puts each object's PG on its OSDs (Client.Map). It is an
// alias, so SDK users can name it without importing a package of the
// module's internals.
type Map = placement.Map

// Sentinel errors, for errors.Is.
var (
	ErrNoSuchBucket        = ops.ErrNoSuchBucket
	ErrNoSuchKey           = ops.ErrNoSuchKey
	ErrBucketNotEmpty      = ops.ErrBucketNotEmpty
	ErrBucketAlreadyExists = ops.ErrBucketAlreadyExists
	ErrInvalidRange        = ops.ErrInvalidRange
	ErrInvalidBucketName   = ops.ErrInvalidBucketName
	ErrInvalidKey          = ops.ErrInvalidKey
	ErrKeyTooLong          = ops.ErrKeyTooLong
	ErrEntityTooLarge      = ops.ErrEntityTooLarge
	ErrBadDigest           = ops.ErrBadDigest
	ErrServiceUnavailable  = ops.ErrServiceUnavailable
	ErrEntityTooSmall      = ops.ErrEntityTooSmall
	ErrInvalidPart         = ops.ErrInvalidPart
	ErrInvalidPartOrder    = ops.ErrInvalidPartOrder
	ErrNoSuchUpload        = ops.ErrNoSuchUpload
	ErrInvalidArgument     = ops.ErrInvalidArgument
	ErrAccessDenied        = ops.ErrAccessDenied
	// ErrStorageFull: an OSD the object maps to is full; reads and deletes
	// still work, and writes do once space is freed.
	ErrStorageFull = ops.ErrStorageFull
	// ErrPreconditionFailed: a conditional write's condition
	// (PutOptions.IfMatch, IfNoneMatch, RemoveObjectIf's ifMatch) is
	// false; nothing was written or deleted.
	ErrPreconditionFailed = ops.ErrPreconditionFailed
)

// ErrClosed is returned by ops on a closed Client.
var ErrClosed = errors.New("client: closed")

// Options configure a Client.
type Options struct {
	// Seeds are OSD public addresses ("tcp://10.0.0.1:6800", or a bare
	// "10.0.0.1:6800" for tcp; see ParseAddrs); the map is fetched from the
	// first that answers. Required without Mon.
	Seeds []string
	// Mon lists the mons' addresses ("tcp://10.0.0.1:3300", or a bare
	// HOST:PORT as in Seeds). With them the client takes its map from the
	// mons and subscribes: every map change (an OSD down, out, added)
	// reaches it at once, rather than when an OSD's reply or a failed op
	// shows it a newer epoch.
	Mon []string
	// Pool is the pool's name; default the pool with the lowest id.
	Pool string
	// Keyring authenticates the client (docs/auth.md): it talks to the
	// OSDs and mons as the keyring's entity, and what it may do is that
	// entity's caps. Nil: no authentication, which only a cluster run
	// without auth accepts.
	Keyring *auth.Keyring
	// Modes are the connection modes the client accepts with OSDs and
	// mons, in order of preference (Ceph's ms_client_mode): "secure" seals
	// every frame after the handshake (docs/auth.md). Nil: crc. Secure
	// needs Keyring.
	Modes []msgr.Mode
	// OpTimeout bounds one attempt of one op. Default 30s.
	OpTimeout time.Duration
	// RetryFor bounds the retries of an op that keeps failing with a
	// retriable error (an OSD down, a map change); ctx bounds it too.
	// Default 60s.
	RetryFor time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// MD5 makes the ETag of an object put in one op S3's: the hex MD5 of
	// its bytes, and checks every uploaded part's ETag (the OSD's MD5)
	// against the client's. Off, no MD5 is computed in the client and such
	// an ETag is "crc32c:" and the body's CRC32C in hex, which the client
	// computes anyway; a multipart object's ETag is S3's either way. MD5
	// costs about 1.2 CPU-s per GB on the critical path of every put: an
	// S3 gateway, which owes its clients MD5 ETags, turns it on.
	MD5 bool
	// Transports are the messengers' (tests); nil: the build's defaults
	// (transports.Default), which Close closes.
	Transports []wire.Transport
	// Deprecated: DisableDataCRC has no effect. The client's messenger
	// never computes a data CRC for what it sends: every body it sends
	// carries a CRC32C that the OSD checks before it commits (a mismatch
	// is retried, see do), so a second CRC over the same bytes would only
	// cost CPU.
	DisableDataCRC bool
}

// recvWindow is the receive window (msgr.Options.RecvWindowBytes) of the
// client's sessions: many get replies (readWindow) in flight at once.
const recvWindow = 64 << 20

// Client talks to one cluster. It is safe for concurrent use.
type Client struct {
	opts Options
	log  *slog.Logger
	m    *msgr.Messenger
	mapv atomic.Pointer[placement.Map]
	// refreshing joins the map refreshes of ops retrying at once (a
	// gateway's ops at a dead OSD): one fetch serves them all.
	refreshing singleflight.Group
	nonce      uint64
	tid        atomic.Uint64

	pending pending.Calls
	// closed: Close was called; an op that fails then is not retried.
	closed atomic.Bool

	// ratelog limits the lines a damaged copy can make us repeat (every
	// get of an object no replica can repair would log one).
	ratelog guard.RateLog

	held holds // bytes of the windows Objects keep

	mon *monclient.Client // nil without Options.Mon

	// transports are m's and the mon client's; releaseTransports closes
	// them if New made them.
	transports        []wire.Transport
	releaseTransports func()
}

// New connects to the cluster: it fetches the map from a seed.
func New(ctx context.Context, opts Options) (*Client, error) {
	opts.Seeds, opts.Mon = ParseAddrs(opts.Seeds...), ParseAddrs(opts.Mon...)
	if len(opts.Seeds) == 0 && len(opts.Mon) == 0 {
		return nil, errors.New("client: no seed or mon addresses")
	}
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = 30 * time.Second
	}
	if opts.RetryFor <= 0 {
		opts.RetryFor = 60 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	var nb [8]byte
	rand.Read(nb[:])
	c := &Client{opts: opts, log: opts.Logger, nonce: binary.LittleEndian.Uint64(nb[:]) | 1}
	ts, release, err := transports.OrDefault(opts.Transports)
	if err != nil {
		return nil, err
	}
	c.transports, c.releaseTransports = ts, release
	name := msgr.EntityName(fmt.Sprintf("client.%d", c.nonce%1_000_000_000))
	if opts.Keyring != nil {
		name = msgr.EntityName(opts.Keyring.Entity)
	}
	authOpts, err := msgr.NewAuthOptions(opts.Keyring, monclient.AuthorizeTypes("osd", "mon"), opts.Modes)
	if err != nil {
		release()
		return nil, err
	}
	m, err := msgr.New(msgr.Options{
		Name: name, Dispatcher: dispatcher{c}, Auth: authOpts,
		DefaultPolicy: msgr.LossyClient, MaxMessageSize: ops.MaxMessageSize, Logger: opts.Logger,
		Transports: ts, DisableDataCRC: true, RecvWindowBytes: recvWindow,
	})
	if err != nil {
		release()
		return nil, err
	}
	c.m = m
	if len(opts.Mon) > 0 {
		err = c.subscribe(ctx)
	} else {
		err = c.fetchMap(ctx, opts.Seeds)
	}
	if err != nil {
		m.Kill()
		release()
		return nil, err
	}
	if opts.Pool != "" {
		if _, ok := c.Map().PoolByName(opts.Pool); !ok {
			c.Close()
			return nil, fmt.Errorf("client: no pool %q in the map", opts.Pool)
		}
	}
	return c, nil
}

// subscribe gets the map from the mons and keeps their newer maps coming.
func (c *Client) subscribe(ctx context.Context) error {
	name := msgr.EntityName(fmt.Sprintf("client.%d.mon", c.nonce%1_000_000_000))
	if c.opts.Keyring != nil {
		name = msgr.EntityName(c.opts.Keyring.Entity)
	}
	mc, err := monclient.New(ctx, monclient.Options{Addrs: c.opts.Mon, Name: name, Keyring: c.opts.Keyring, Modes: c.opts.Modes,
		Transports: c.transports, Logger: c.log, OnMap: func(mp *placement.Map) { c.adoptMap(mp) }})
	if err != nil {
		return err
	}
	// The first map waits no longer than an op would, one attempt
	// (OpTimeout) retried up to RetryFor: a mistyped mon address must not
	// hang a program's start (the mon client retries until its context
	// ends).
	wait := max(c.opts.RetryFor, c.opts.OpTimeout)
	sctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	mp, err := mc.Subscribe(sctx)
	if err != nil {
		mc.Close()
		if ctx.Err() == nil && sctx.Err() != nil {
			return fmt.Errorf("client: no map from the mons %v within %v (OpTimeout, RetryFor): %w", c.opts.Mon, wait, err)
		}
		return fmt.Errorf("client: map from the mons %v: %w", c.opts.Mon, err)
	}
	c.mon = mc
	c.adoptMap(mp)
	return nil
}

// Messenger is the client's messenger, for its counters (the S3
// gateway's metrics).
func (c *Client) Messenger() *msgr.Messenger { return c.m }

// SetKeyring has the client authenticate with k from its next sessions on,
// to the OSDs and the mons: its entity's key rotated while it runs
// (auth.WatchKeyring, as the S3 gateway does for --keyring). k must be the
// same entity's, under the same CA.
func (c *Client) SetKeyring(k *auth.Keyring) error {
	if err := c.m.SetKeyring(k); err != nil {
		return err
	}
	if c.mon != nil {
		return c.mon.SetKeyring(k)
	}
	return nil
}

// Close ends the client's sessions; ops in progress fail.
func (c *Client) Close() error {
	c.closed.Store(true)
	if !c.pending.Close() {
		return nil
	}
	if c.mon != nil {
		c.mon.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.m.Shutdown(ctx)
	c.releaseTransports()
	return err
}

// Map is the client's current cluster map.
func (c *Client) Map() *Map { return c.mapv.Load() }

// pool is the pool ops go to.
func (c *Client) pool(mp *placement.Map) *osdpb.Pool {
	if c.opts.Pool != "" {
		p, _ := mp.PoolByName(c.opts.Pool)
		return p
	}
	return mp.MetaPool()
}

// adopt installs a newer map.
func (c *Client) adopt(pb *osdpb.ClusterMap) {
	if pb == nil {
		return
	}
	if cur := c.Map(); cur != nil && (pb.Epoch <= cur.Epoch() || pb.Fsid != cur.FSID()) {
		return
	}
	m, err := placement.FromProto(pb)
	if err != nil {
		c.log.Warn("client: ignoring an invalid map", "err", err)
		return
	}
	c.adoptMap(m)
}

// adoptMap installs m if it is newer and of our cluster; maps arrive from
// OSD replies and the mons concurrently.
func (c *Client) adoptMap(m *placement.Map) {
	for {
		cur := c.Map()
		if cur != nil && (m.Epoch() <= cur.Epoch() || m.FSID() != cur.FSID()) {
			return
		}
		if c.mapv.CompareAndSwap(cur, m) {
			c.abandonDown(m)
			return
		}
	}
}

// abandonDown fails, as if their connections were lost, the ops waiting
// for a reply from an OSD that m marks down: they retry at once on the new
// acting set instead of waiting out OpTimeout for a hung OSD, whose
// connections stay open.
func (c *Client) abandonDown(m *placement.Map) {
	c.pending.FailIf(func(p *pending.Call) bool {
		id, ok := ops.ParseOSDName(string(p.Conn.Peer()))
		if !ok {
			return false
		}
		info, ok := m.OSD(id)
		return !ok || !info.Up
	})
}

// fetchMap asks the addresses for the map, the next one whenever the last
// has failed or has not answered within seedStagger (see firstOf), and
// adopts the first map that arrives. The connections it opened and does
// not keep (a seed that never answered, or answered second) are closed.
func (c *Client) fetchMap(ctx context.Context, addrs []string) error {
	addrs = uniqueAddrs(addrs)
	had := map[*msgr.Conn]bool{} // in use already (refreshMap): never closed here
	for conn := range c.m.Conns() {
		had[conn] = true
	}
	have := uint64(0)
	if mp := c.Map(); mp != nil {
		have = mp.Epoch()
	}
	type answer struct {
		conn *msgr.Conn
		mp   *osdpb.ClusterMap
	}
	win, others, err := firstOf(ctx, len(addrs), seedStagger, func(ctx context.Context, i int) (answer, error) {
		conn, err := c.m.Connect(ctx, addrs[i], "")
		if err != nil {
			return answer{}, fmt.Errorf("%s: %w", addrs[i], err)
		}
		var rep osdpb.GetMapReply
		_, err = c.roundTrip(ctx, conn, osdpb.MsgType_MSG_GET_MAP, &osdpb.GetMap{HaveEpoch: have}, nil, &rep, false)
		if err == nil && rep.Map == nil {
			err = errors.New("the reply has no map")
		}
		if err != nil {
			if !had[conn] {
				c.dropConn(conn)
			}
			return answer{}, fmt.Errorf("%s: %w", addrs[i], err)
		}
		return answer{conn, rep.Map}, nil
	})
	for _, o := range others {
		c.adopt(o.mp)
		if !had[o.conn] && o.conn != win.conn {
			c.dropConn(o.conn)
		}
	}
	if err != nil {
		return fmt.Errorf("client: no OSD answered with a map: %w", err)
	}
	c.adopt(win.mp)
	return nil
}

// uniqueAddrs drops repeated addresses (a seed that is also an OSD of the
// map), in the form the messenger keys its sessions by.
func uniqueAddrs(addrs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range addrs {
		k := a
		if pa, err := msgr.ParseAddr(a); err == nil {
			k = pa.String()
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, a)
		}
	}
	return out
}

// dropConn closes a connection the client does not keep, and fails the
// calls waiting on it (a local close raises no event), so an op that took
// the same session meanwhile retries at once.
func (c *Client) dropConn(conn *msgr.Conn) {
	conn.Close()
	c.pending.FailConn(conn)
}

// refreshMap fetches the map from any OSD of the current map (seeds first,
// staggered as in fetchMap).
func (c *Client) refreshMap(ctx context.Context) {
	c.refreshing.Do("map", func() (any, error) {
		addrs := append([]string(nil), c.opts.Seeds...)
		for info := range c.Map().OSDs() {
			if info.Up {
				addrs = append(addrs, info.PublicAddr)
			}
		}
		if err := c.fetchMap(ctx, addrs); err != nil {
			c.log.Debug("client: map refresh", "err", err)
		}
		return nil, nil
	})
}

// target says where an op goes: the pool, the PG and its primary.
type target struct {
	bucket, key string
	meta        bool   // a bucket op: the meta PG
	pg          uint32 // with hasPG: this PG (listings)
	hasPG       bool
	via         *routed // the first attempt's route, if already found
	// regroup: the op names PGs grouped by their primary under the map
	// of the first attempt (a listing); once that map is stale its
	// caller must group them again, so do returns WrongPrimary and
	// StaleEpoch at once (with the newer map adopted) instead of sending
	// the same group to another primary.
	regroup bool
}

// routed is where an op goes under map mp: its pool, PG, and the session
// with the PG's primary.
type routed struct {
	mp   *Map
	pool *osdpb.Pool
	pg   uint32
	conn *msgr.Conn
}

// reply is any reply message: its header is field 1.
type reply interface {
	proto.Message
	GetHeader() *osdpb.ReplyHeader
}

// do runs one op with retries: it sends build(header) (and payload) to the
// primary of tg, waits for the reply, decodes it into rep and returns the
// reply message when keep is set (the caller releases it: its data is the
// object's bytes). Retriable failures are retried with backoff, with the
// same request id, after refreshing the map when the OSD says so.
//
// A payload (a put's body) is sent without a messenger data CRC: the
// CRC32C in the op covers it and the OSD checks it before it commits. So a
// BadDigest answer means the bytes changed on the way, not in our buffer
// (from which the CRC32C was computed), and the op is sent again, at most
// maxDigestRetries times; a BadDigest changes nothing at the OSD.
func (c *Client) do(ctx context.Context, t osdpb.MsgType, tg target, build func(h *osdpb.Header) proto.Message, payload *wire.Buffer, rep reply, keep bool) (*msgr.Message, error) {
	if err := ctx.Err(); err != nil {
		// Not sent at all, as net/http sends no request on a done
		// context: sent, it could be applied after the caller was told
		// it failed.
		return nil, err
	}
	req := &osdpb.ReqID{Client: c.nonce, Tid: c.tid.Add(1)}
	deadline := time.Now().Add(c.opts.RetryFor)
	backoff := 10 * time.Millisecond
	digestRetries := 0
	for attempt := 0; ; attempt++ {
		mp := c.Map()
		var (
			pool *osdpb.Pool
			pg   uint32
			conn *msgr.Conn
		)
		if v := tg.via; attempt == 0 && v != nil && v.mp == mp {
			pool, pg, conn = v.pool, v.pg, v.conn
		} else {
			pool, pg = c.route(mp, tg)
		}
		hdr := &osdpb.Header{Epoch: mp.Epoch(), Req: req, Pool: pool.Id, Pg: pg, Attempt: uint32(attempt)}
		msg, err := c.attempt(ctx, mp, pool.Id, pg, conn, t, build(hdr), payload, rep, keep)
		answered := err == nil
		if err == nil {
			err = ops.FromReply(rep.GetHeader())
			if h := rep.GetHeader(); h != nil {
				c.adopt(h.Map)
			}
		}
		if err == nil {
			return msg, nil
		}
		if msg != nil {
			msg.Release()
		}
		var oe *ops.Error
		retriable := !errors.As(err, &oe) || oe.Retriable()
		if oe != nil && oe.Status == osdpb.Status_BAD_DIGEST && payload != nil && digestRetries < maxDigestRetries {
			retriable = true
			digestRetries++
		}
		if c.closed.Load() {
			// Its messenger is shut down: every retry would fail the same
			// way until RetryFor ran out.
			return nil, ErrClosed
		}
		if !retriable || ctx.Err() != nil || time.Now().After(deadline) {
			if ctx.Err() != nil && !errors.As(err, &oe) {
				return nil, ctx.Err()
			}
			return nil, err
		}
		// The primary said the map moved, or did not answer at all: it
		// may be down (or frozen) in a map we have not seen, which a
		// client without a mon learns only by asking (a client with one
		// gets it pushed, and asks the OSDs all the same).
		moved := mapMoved(oe)
		if moved || attempt > 2 || !answered && c.Map().Epoch() == mp.Epoch() {
			c.refreshMap(ctx)
		}
		if moved && tg.regroup {
			return nil, err
		}
		c.log.Debug("client: retrying", "op", t, "attempt", attempt+1, "err", err)
		sleep := backoff/2 + time.Duration(mrand.Int64N(int64(backoff)))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(sleep):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// refused is a session the peer (or we) refused at authentication: not
// retried, since the same credential is refused again, and said as it is
// ("client.x has no auth record", "osd.3 showed another certificate").
func refused(err error) error { return ops.Errorf(osdpb.Status_ACCESS_DENIED, "%v", err) }

// maxDigestRetries bounds how often a body the OSD found corrupt is sent
// again (see do).
const maxDigestRetries = 2

// route is the pool and PG an op for tg goes to under mp.
func (c *Client) route(mp *placement.Map, tg target) (*osdpb.Pool, uint32) {
	pool := c.pool(mp)
	if tg.meta {
		pool = mp.MetaPool()
	}
	pg := uint32(placement.MetaPG)
	switch {
	case tg.hasPG:
		pg = tg.pg
	case !tg.meta:
		pg = ops.StoredPG(pool, tg.bucket, tg.key)
	}
	return pool, pg
}

// primaryConn is the session with the primary of (pool, pg) under mp.
func (c *Client) primaryConn(ctx context.Context, mp *placement.Map, pool, pg uint32) (*msgr.Conn, error) {
	primary, ok := mp.Primary(pool, pg)
	if !ok {
		return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s has no OSD up and in (map epoch %d)", placement.PGID{Pool: pool, Seed: pg}, mp.Epoch())
	}
	addr, _ := mp.PublicAddr(primary)
	return c.m.Connect(ctx, addr, msgr.EntityName(ops.OSDName(primary)))
}

// attempt sends one op to the primary of (pool, pg) (on conn when the
// caller has its session already) and waits for its reply.
func (c *Client) attempt(ctx context.Context, mp *placement.Map, pool, pg uint32, conn *msgr.Conn, t osdpb.MsgType, front proto.Message, payload *wire.Buffer, rep reply, keep bool) (*msgr.Message, error) {
	if conn == nil {
		var err error
		if conn, err = c.primaryConn(ctx, mp, pool, pg); err != nil {
			return nil, err
		}
	}
	return c.roundTrip(ctx, conn, t, front, payload, rep, keep)
}

// roundTrip sends front (and payload) on conn with a fresh tid in its
// envelope and waits for the reply that echoes it; keep returns the reply
// message (see do). A retry is a new round trip, so a late reply to an
// earlier attempt finds nobody waiting and is dropped. The
// message takes a reference of its own on payload, so the caller's stays
// for a retry; the messenger drops the message's when it is done with it,
// which may be after roundTrip returns.
func (c *Client) roundTrip(ctx context.Context, conn *msgr.Conn, t osdpb.MsgType, front proto.Message, payload *wire.Buffer, rep proto.Message, keep bool) (*msgr.Message, error) {
	b, err := proto.Marshal(front)
	if err != nil {
		return nil, err
	}
	key := c.tid.Add(1)
	p := c.pending.Start(key, conn)
	if p == nil {
		return nil, ErrClosed
	}
	defer c.pending.End(key)
	m := msgr.NewMessage(uint16(t), b, nil)
	m.SetTid(key)
	if payload != nil {
		payload.Ref()
		m.SetPayload(payload)
	}
	actx, cancel := context.WithTimeout(ctx, c.opts.OpTimeout)
	defer cancel()
	ticket, err := conn.SendTicket(actx, m)
	if err != nil {
		m.Release()
		if errors.Is(err, msgr.ErrAuth) {
			return nil, refused(err)
		}
		return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "sending to %s: %v", connName(conn), err)
	}
	select {
	case r, ok := <-p.Reply:
		if !ok || r == nil {
			if err := conn.Err(); errors.Is(err, msgr.ErrAuth) {
				return nil, refused(err)
			}
			return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "connection to %s lost", connName(conn))
		}
		if err := r.DecodeFront(rep); err != nil {
			r.Release()
			return nil, fmt.Errorf("client: malformed reply from %s: %w", connName(conn), err)
		}
		if keep {
			return r, nil
		}
		r.Release()
		return nil, nil
	case <-actx.Done():
		c.abandon(conn, ticket, payload, ctx.Err() != nil)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "no reply from %s within %v", connName(conn), c.opts.OpTimeout)
	}
}

// mapMoved reports whether an OSD's answer says the client's map is
// stale: the op goes to the PG's primary under a newer one.
func mapMoved(oe *ops.Error) bool {
	return oe != nil && (oe.Status == osdpb.Status_WRONG_PRIMARY || oe.Status == osdpb.Status_STALE_EPOCH)
}

// abandon lets go of a request its caller stopped waiting for: out of the
// send queue if no link had it yet (a request queued behind others to an
// OSD that hangs never reaches it). One that a link had already is held
// for resending until the OSD acks it; if its payload is a caller's bytes
// (PutObjectBytes, which returns only once they are released), its Conn is
// closed instead, so that they go back now: an OSD stopped (SIGSTOP) acks
// nothing while its link stays up. The next op dials the OSD again.
// Only when the caller's context ended (final): after an attempt's
// OpTimeout the op is sent again with the same bytes, so closing would
// return nothing sooner and fail every other op on the session. The other
// ops waiting on the session are failed with it (dropConn), to be retried
// at once, not after their OpTimeout.
func (c *Client) abandon(conn *msgr.Conn, t msgr.Ticket, payload *wire.Buffer, final bool) {
	if conn.Withdraw(t) || payload == nil || !final {
		return
	}
	if _, lent := payload.Owner.(callersBytes); lent {
		c.dropConn(conn)
	}
}

// connName names the other end of conn in errors: its entity and address
// (a seed's name is not known before it answers).
func connName(conn *msgr.Conn) string {
	if p := conn.Peer(); p != "" {
		return fmt.Sprintf("%s at %s", p, conn.Addr())
	}
	return conn.Addr()
}

// dispatcher hands replies to their waiting calls. Its Dispatch only
// takes a lock, looks the call up and sends on the call's buffered channel,
// which never blocks (a call gets one reply: Dispatch removes it from
// pending first), so it runs on the link's reader (msgr.FastDispatcher):
// a reply that went through the Conn's queue started a goroutine to
// deliver it, one goroutine start and wakeup per op that a small op's
// client CPU was mostly made of. Events still go through the queue.
type dispatcher struct{ c *Client }

// CanFastDispatch: every message the client gets is a reply (see
// dispatcher).
func (dispatcher) CanFastDispatch(uint16) bool { return true }

func (d dispatcher) Dispatch(m *msgr.Message) {
	d.c.pending.Deliver(m, false)
}

// HandleEvent fails the calls waiting on a conn that reset.
func (d dispatcher) HandleEvent(ev msgr.Event) { d.c.pending.HandleEvent(ev) }

// ErrorCode is the S3 error code of err ("NoSuchKey", "BucketNotEmpty",
// ...) when it is, or wraps, an OSD's answer (*Error); "" otherwise.
func ErrorCode(err error) string {
	var e *Error
	if !errors.As(err, &e) {
		return ""
	}
	return ops.Code(e.Status)
}
