// Package monclient is how OSDs, clients and the CLI talk to the mons: boot
// and beacon (OSDs), failure reports, operator commands, and a subscription
// that keeps the newest cluster map flowing.
//
// A Client holds a list of mon addresses. Every request goes to the mon it
// believes leads; a standby answers NOT_LEADER with the leader's address,
// and the client follows it. A mon that does not answer (within
// Options.Timeout; within firstTry while no mon has answered yet and
// there are others to try), drops the connection, or answers
// SERVICE_UNAVAILABLE (its etcd member lost its leader, say) is skipped
// for the next; once every mon failed, the client backs off (capped
// exponential, with jitter) and goes round again. It retries like this
// until the request's context ends, and then returns a *NoMonError with
// each mon's last answer. Every other reply status comes back as an
// *ops.Error (WRONG_CLUSTER, or SERVICE_UNAVAILABLE "marked down; boot
// again" to a beacon, which is never retried, ...), which the caller acts
// on.
//
// It must never deliver an older map after a newer one, nor another
// cluster's map after the first one it saw.
package monclient

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/guard"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/pending"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/transports"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// Options configure a Client.
type Options struct {
	// Addrs are the mons' msgr addresses, e.g. "tcp://10.0.0.1:3300".
	// Required.
	Addrs []string
	// Name is the client's entity name, e.g. "client.osd3". Default: the
	// keyring's entity, or "client.admin" without one.
	Name msgr.EntityName
	// Keyring, if set, authenticates the client to the mons (msgr
	// AuthOptions): they must run with auth, and prove they are mons.
	// Nil: no authentication, which mons with auth refuse.
	Keyring *auth.Keyring
	// Modes are the connection modes the client accepts with the mons, in
	// order of preference (msgr.AuthOptions.Modes; Ceph's
	// ms_mon_client_mode). Nil: crc. Secure needs Keyring.
	Modes []msgr.Mode
	// Transports are the client's messenger's; nil: the build's defaults
	// (transports.Default), which Close closes.
	Transports []wire.Transport
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// OnMap is called, one call at a time and in increasing epoch order,
	// with every newer map the client sees (pushed, or in a reply); never
	// with an older or equal epoch, nor with another cluster's map. It
	// runs on a goroutine of its own, so it may call the client. Close
	// waits for a call in progress and none follows.
	OnMap func(*placement.Map)
	// OnAuth, if set, subscribes to the auth table too (entities, caps and
	// certificate serials, no keyrings; S3 secrets only for an S3
	// gateway's entity) and is called with every newer table, in
	// increasing revision order, one call at a time. It runs under the
	// client's lock: it must not block or call the client (keeping the
	// table in an atomic pointer is what it is for).
	OnAuth func(*osdpb.AuthTable)
	// Timeout bounds one attempt of a request at one mon. Default 5s.
	Timeout time.Duration
	// LeaderRetry is how long beacons go on through a standby that relays
	// them (the leader out of reach) before the leader is tried again.
	// Default 10s.
	LeaderRetry time.Duration
}

// ErrClosed is returned by requests after Close.
var ErrClosed = errors.New("monclient: closed")

// resubscribeEvery renews the subscription even when nothing failed: a
// mon that hangs without dropping the connection is left within this.
const resubscribeEvery = 10 * time.Second

// ReadCommands are the commands any mon answers, and all that mon
// 'allow r' may run; the rest go to the leader.
var ReadCommands = []string{"status", "health detail", "df", "osd tree", "osd df", "osd pool ls", "pg ls", "get map",
	"osd ok-to-stop", "osd safe-to-destroy"}

// Mutating reports whether the command prefix changes something (the map,
// an auth record): Command gives such a command a request id, so that
// the mon applies it once however often it is sent.
func Mutating(prefix string) bool {
	return !slices.Contains(ReadCommands, prefix) && prefix != "auth get" && prefix != "auth ls"
}

// RequestIDLen is the length of a mon command's request id: 128 random
// bits, unique without coordination among clients.
const RequestIDLen = 16

// NewRequestID is a new request id for a mon command.
func NewRequestID() []byte {
	id := make([]byte, RequestIDLen)
	crand.Read(id) // never fails (crypto/rand)
	return id
}

// Client talks to a cluster's mons. It is safe for concurrent use.
type Client struct {
	o   Options
	log *slog.Logger
	ms  *msgr.Messenger
	tid atomic.Uint64
	// releaseTransports closes ms's transports if New made them.
	releaseTransports func()
	pending           pending.Calls

	mu     sync.Mutex
	leader string // the address to try first; "" when unknown
	next   int    // the next of addrs to try when no leader is known
	// addrs are the mons to try: o.Addrs, then those the mons said are up
	// (MonMap.mons) that o.Addrs lacks (learnMons).
	addrs []string
	// forms: each given mon's addresses, as resolveGiven found them;
	// lastUp the mons a mon last said are up (learnMons).
	forms  atomic.Pointer[[]map[string]bool]
	lastUp []string
	// Beacons while the leader is out of reach (beaconRoute): relay is
	// the standby relaying them ("" when none), relayLeader the leader it
	// names, relaySince when it started or the leader was last tried;
	// leaderFailed is when an attempt at the leader last failed.
	relay, relayLeader       string
	relaySince, leaderFailed time.Time
	// failedLeader is the leader whose attempt failed at leaderFailed.
	failedLeader string

	mapMu sync.Mutex // orders map adoption and the OnMap queue
	// authMu orders OnAuth calls; authRev is the last table's revision.
	authMu  sync.Mutex
	authRev int64
	mapv    atomic.Pointer[placement.Map]
	queue   []*placement.Map // for OnMap, in epoch order
	wake    chan struct{}    // the OnMap goroutine has work

	subOnce    sync.Once
	subscribed chan struct{} // closed at the first subscription reply
	// refused is closed, with refusedErr, when a mon refused the session
	// at authentication: Subscribe fails with it instead of waiting.
	refused    chan struct{}
	refusedErr error
	refuseOnce sync.Once
	// rekeyed cuts a refused subscription's wait short: SetKeyring gave
	// the client the key the mons now want.
	rekeyed chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New makes a client with a messenger of its own. It does not contact the
// mons: the first request does.
func New(ctx context.Context, o Options) (*Client, error) {
	if len(o.Addrs) == 0 {
		return nil, errors.New("monclient: no mon addresses")
	}
	if o.Name == "" {
		o.Name = "client.admin"
		if o.Keyring != nil {
			o.Name = msgr.EntityName(o.Keyring.Entity)
		}
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.LeaderRetry <= 0 {
		o.LeaderRetry = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Addrs = slices.Clone(o.Addrs)
	c := &Client{
		o: o, log: o.Logger, addrs: o.Addrs,
		wake: make(chan struct{}, 1), subscribed: make(chan struct{}), refused: make(chan struct{}), rekeyed: make(chan struct{}, 1),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	ts, release, err := transports.OrDefault(o.Transports)
	if err != nil {
		return nil, err
	}
	authOpts, err := msgr.NewAuthOptions(o.Keyring, AuthorizeTypes("mon"), o.Modes)
	if err != nil {
		release()
		return nil, err
	}
	ms, err := msgr.New(msgr.Options{
		Name: o.Name, Dispatcher: dispatcher{c}, DefaultPolicy: msgr.LossyClient, Auth: authOpts,
		Logger: o.Logger.With("net", "monclient"), Transports: ts,
		// A mon that stops answering is noticed within seconds.
		Keepalive: time.Second, IdleTimeout: 10 * time.Second,
	})
	if err != nil {
		release()
		return nil, err
	}
	c.releaseTransports = release
	c.ms = ms
	c.wg.Go(c.resolveGiven)
	if o.OnMap != nil {
		c.wg.Go(c.deliverMaps)
	}
	return c, nil
}

// Close ends the client: requests in progress fail with ErrClosed.
func (c *Client) Close() error {
	if !c.pending.Close() {
		return nil
	}
	c.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.ms.Shutdown(ctx)
	c.releaseTransports()
	c.wg.Wait()
	return err
}

// SetKeyring has the client authenticate with k from its next session on
// (msgr.Messenger.SetKeyring): a daemon's key rotated while it runs
// (auth.WatchKeyring). A subscription the mons refused asks again at once.
func (c *Client) SetKeyring(k *auth.Keyring) error {
	if err := c.ms.SetKeyring(k); err != nil {
		return err
	}
	select {
	case c.rekeyed <- struct{}{}:
	default:
	}
	return nil
}

// Map is the newest map the client has seen; nil before any.
func (c *Client) Map() *placement.Map { return c.mapv.Load() }

// Subscribe returns the mons' current map, waiting for it, and keeps newer
// maps coming (to OnMap and Map) until Close: it subscribes again after a
// mon fails or the connection drops. A refusal (the session refused at
// authentication, or ACCESS_DENIED: caps without mon 'allow r') ends the
// wait at once with the mons' reason: errors.Is matches msgr.ErrAuth or
// ops.ErrAccessDenied.
func (c *Client) Subscribe(ctx context.Context) (*placement.Map, error) {
	c.subOnce.Do(func() { c.wg.Go(c.subscribeLoop) })
	select {
	case <-c.subscribed: // a refusal an operator has since fixed is past
		return c.Map(), nil
	default:
	}
	select {
	case <-c.subscribed:
		return c.Map(), nil
	case <-c.refused:
		return nil, c.refusedErr
	case <-ctx.Done():
		return nil, fmt.Errorf("monclient: waiting for a map: %w", ctx.Err())
	case <-c.ctx.Done():
		return nil, ErrClosed
	}
}

func (c *Client) subscribeLoop() {
	var (
		refusedWait time.Duration // the wait after the last refusal; 0 after a success
		refusals    guard.RateLog
	)
	refusals.Every = time.Minute
	for c.ctx.Err() == nil {
		var rep osdpb.MonSubscribeReply
		conn, err := c.call(c.ctx, osdpb.MsgType_MSG_MON_SUBSCRIBE, func() proto.Message {
			have := uint64(0)
			if mp := c.Map(); mp != nil {
				have = mp.Epoch()
			}
			return &osdpb.MonSubscribe{HaveEpoch: have, Auth: c.o.OnAuth != nil}
		}, &rep, true)
		if refusal(err) {
			// Refused: Subscribe says why (its first refusal is its
			// caller's to report: no log line). The loop goes on, asking
			// ever more slowly (to 30 s), for a key that an operator
			// fixes at the mon ("auth caps", a record restored) while
			// this client runs, and logs the refusal once a minute.
			if !errors.Is(err, msgr.ErrAuth) {
				err = fmt.Errorf("monclient: %v: %w", osdpb.MsgType_MSG_MON_SUBSCRIBE, err)
			}
			first := false
			c.refuseOnce.Do(func() {
				c.refusedErr = err
				close(c.refused)
				first = true
			})
			if c.ctx.Err() == nil {
				if !first {
					refusals.Log(c.log, slog.LevelWarn, "refused", "monclient: subscribing: refused", "err", err)
				}
				refusedWait = min(max(2*refusedWait, time.Second), 30*time.Second)
				t := time.NewTimer(refusedWait)
				select {
				case <-t.C:
				case <-c.rekeyed:
				case <-c.ctx.Done():
				}
				t.Stop()
			}
			continue
		}
		if err != nil {
			if c.ctx.Err() == nil {
				c.log.Warn("monclient: subscribing", "err", err)
				sleep(c.ctx, time.Second)
			}
			continue
		}
		refusedWait = 0
		c.noteMap(rep.Map)
		c.learnMons(rep.Mons)
		c.noteAuth(rep.Auth)
		select {
		case <-c.subscribed:
		default:
			close(c.subscribed)
		}
		t := time.NewTimer(resubscribeEvery)
		select {
		case <-c.ctx.Done():
		case <-conn.Done():
			c.log.Debug("monclient: subscription connection closed; subscribing again", "mon", conn.Addr())
		case <-t.C:
		}
		t.Stop()
	}
}

// refusal reports whether err is the mons refusing this client for
// good, not a failure that a retry may get past: the session refused at
// authentication (msgr.ErrAuth: bad key, unknown entity), or a request its
// caps do not allow (ACCESS_DENIED: a subscription without mon 'allow r').
// Every mon checks the same records, so asking the others, or again, only
// repeats the answer.
func refusal(err error) bool {
	return errors.Is(err, msgr.ErrAuth) || errors.Is(err, ops.ErrAccessDenied)
}

// Boot announces an OSD (MSG_MON_BOOT) and returns its id, the fsid and
// the map that marks it up.
func (c *Client) Boot(ctx context.Context, b *osdpb.MonBoot) (*osdpb.MonBootReply, error) {
	var rep osdpb.MonBootReply
	_, err := c.call(ctx, osdpb.MsgType_MSG_MON_BOOT, func() proto.Message { return b }, &rep, false)
	if err != nil {
		return nil, err
	}
	c.noteMap(rep.Map)
	return &rep, nil
}

// Beacon tells the leader the OSD is alive and what its PGs do. An
// *ops.Error with SERVICE_UNAVAILABLE means the OSD is marked down: it
// must boot again. A standby may take it and relay it to the leader, when
// the leader did not answer (served).
func (c *Client) Beacon(ctx context.Context, b *osdpb.MonBeacon) error {
	var rep osdpb.MonBeaconReply
	_, err := c.call(ctx, osdpb.MsgType_MSG_MON_BEACON, func() proto.Message { return b }, &rep, false)
	return err
}

// ReportFailure reports that one OSD cannot reach another (or, with
// Alive, that it can again).
func (c *Client) ReportFailure(ctx context.Context, f *osdpb.MonFailure) error {
	var rep osdpb.MonFailureReply
	_, err := c.call(ctx, osdpb.MsgType_MSG_MON_FAILURE, func() proto.Message { return f }, &rep, false)
	return err
}

// MarkMeDown asks the leader to mark the OSD down now, as it stops
// cleanly, and returns the epoch of a map that has it down, or 0 when a
// standby took the request for the leader (relayed; the leader was out of
// reach). Callers bound ctx tightly: with no mon answering, the grace
// marks the OSD down anyway.
func (c *Client) MarkMeDown(ctx context.Context, r *osdpb.MonMarkMeDown) (uint64, error) {
	var rep osdpb.MonMarkMeDownReply
	if _, err := c.call(ctx, osdpb.MsgType_MSG_MON_MARK_ME_DOWN, func() proto.Message { return r }, &rep, false); err != nil {
		return 0, err
	}
	if rep.RelayedBy != "" {
		return 0, nil
	}
	return rep.GetHeader().GetEpoch(), nil
}

// Command runs an operator command. ReadCommands go to any mon; the
// others to the leader.
//
// A command that changes something (Mutating) is sent with a request id,
// the same in every retry, so that it is applied once even when a reply
// is lost and the command sent again: a repeat gets the first one's
// reply. cmd's own RequestId is kept if set (a caller that retries a
// whole Command call sets it, once); else each call is a new request.
func (c *Client) Command(ctx context.Context, cmd *osdpb.MonCommand) (*osdpb.MonCommandReply, error) {
	if len(cmd.GetRequestId()) == 0 && Mutating(cmd.GetPrefix()) {
		cmd = proto.CloneOf(cmd)
		cmd.RequestId = NewRequestID()
	}
	var rep osdpb.MonCommandReply
	_, err := c.call(ctx, osdpb.MsgType_MSG_MON_COMMAND, func() proto.Message { return cmd }, &rep, slices.Contains(ReadCommands, cmd.GetPrefix()))
	if err != nil {
		return nil, err
	}
	if cmd.GetPrefix() != "get map" || cmd.GetEpoch() == 0 {
		c.noteMap(rep.Map)
	}
	return &rep, nil
}

// reply is any mon reply: header first.
type reply interface {
	proto.Message
	GetHeader() *osdpb.ReplyHeader
}

// call sends build() to a mon and decodes its reply into rep, moving
// over the mons (and following NOT_LEADER) until ctx ends. anyMon: a
// standby's answer will do. It returns the conn that answered.
//
// A mon that answers SERVICE_UNAVAILABLE (its etcd member has no leader,
// say) is passed over like one that does not answer: the others are
// tried at once, and a round in which every mon failed is followed by a
// backoff. Beacons are the exception: their SERVICE_UNAVAILABLE means
// "boot again", and the next beacon comes soon anyway.
func (c *Client) call(ctx context.Context, t osdpb.MsgType, build func() proto.Message, rep reply, anyMon bool) (*msgr.Conn, error) {
	var answers monAnswers
	sent := false // some attempt was sent and had no reply
	bo := backoff{next: minBackoff}
	misses := 0
	tries := 0 // attempts made
	// The first round, with no leader known yet, gives each mon only
	// firstTry: a dead mon first in the list (one that accepts and never
	// answers) must not cost a new client the whole Timeout while the
	// others are fine. Later rounds wait the full Timeout.
	round := 0
	// A request no mon serves for a while (all down, no etcd quorum, an
	// election) is said once after stallWarnAfter and then every
	// stallWarnEvery: an OSD started while its mons are away would
	// otherwise wait without a word.
	start := time.Now()
	warnAt := start.Add(stallWarnAfter)
	for {
		if err := ctx.Err(); err != nil {
			if len(answers) > 0 {
				return nil, &NoMonError{Type: t, Answers: answers, Err: err, Sent: sent}
			}
			return nil, err
		}
		addr := c.pick()
		tid := c.tid.Add(1)
		wait := c.o.Timeout
		mons := c.monAddrs()
		if round == 0 && len(mons) > 1 && !c.knowsLeader() {
			wait = min(wait, firstTry)
		}
		req := build()
		switch r := req.(type) {
		case *osdpb.MonBeacon:
			var unreachable bool
			if addr, wait, unreachable = c.beaconRoute(ctx, addr, wait); unreachable {
				c.markLeaderUnreachable(r)
			}
		case *osdpb.MonFailure, *osdpb.MonMarkMeDown, *osdpb.MonBoot:
			// The first attempt goes to the beacons' relay, if any; a
			// relay that answers NOT_LEADER (an older build, its etcd's
			// trouble) sends the request on toward the leader as before,
			// and stays the beacons' relay. Any attempt made while the
			// leader has lately failed says so, so that a standby relays
			// it: an OSD that starts during a cut knows no relay yet.
			var unreachable bool
			if tries == 0 {
				addr, unreachable = c.failureRoute(addr)
			} else {
				unreachable = c.leaderLatelyFailed()
			}
			if unreachable {
				c.markLeaderUnreachable(r)
			}
		}
		tries++
		conn, out, err := c.roundTrip(ctx, addr, t, tid, req, rep, wait)
		sent = sent || (out && err != nil)
		if errors.Is(err, ErrClosed) {
			return nil, err
		}
		if errors.Is(err, msgr.ErrAuth) {
			// Every mon checks the same records: retrying will not help,
			// and the reason (bad key, unknown entity, auth off on one
			// side) is what the caller needs to see.
			return nil, fmt.Errorf("monclient: %v: %w", t, err)
		}
		if err == nil {
			h := rep.GetHeader()
			c.noteMap(h.GetMap())
			switch st := h.GetStatus(); {
			case h == nil:
				err = fmt.Errorf("monclient: %s answered %v without a header", addr, t)
			case st == osdpb.Status_OK:
				if !anyMon {
					c.served(addr, rep)
				}
				return conn, nil
			case st == osdpb.Status_NOT_LEADER:
				err = ops.FromReply(h)
				if t == osdpb.MsgType_MSG_MON_BEACON {
					c.endRelay(addr) // it relays no more: another leader, or its etcd's trouble
				}
				if h.Leader != "" && h.Leader != addr {
					c.setLeader(h.Leader)
					answers.note(addr, err)
					misses++
					if misses <= 2*len(mons) {
						continue // follow the redirect at once
					}
				}
			case st == osdpb.Status_SERVICE_UNAVAILABLE && t != osdpb.MsgType_MSG_MON_BEACON:
				err = ops.FromReply(h)
			default:
				return conn, ops.FromReply(h)
			}
		}
		switch {
		case ctx.Err() == nil || !errors.Is(err, ctx.Err()):
			answers.note(addr, err)
		case !answers.has(addr):
			answers.note(addr, errors.New("no reply before the request's deadline"))
			// else: cut short by the deadline; what the mon said before
			// tells more than that it had no time left.
		}
		c.skip(addr)
		c.log.Debug("monclient: mon did not serve the request", "mon", addr, "type", t, "err", err)
		misses++
		if misses >= len(mons) {
			// Every mon failed once: wait before the next round (an
			// election takes a few seconds).
			misses = 0
			round++
			if now := time.Now(); now.After(warnAt) {
				c.log.Warn("monclient: no mon has served the request yet; retrying", "type", t,
					"waited", now.Sub(start).Round(time.Second), "mons", mons, "err", err)
				warnAt = now.Add(stallWarnEvery)
			}
			sleep(ctx, bo.wait())
		}
	}
}

// How soon, and how often after, a request that no mon serves is logged
// (variables for a test).
var (
	stallWarnAfter = 5 * time.Second
	stallWarnEvery = 30 * time.Second
)

// Backoff between rounds of a request in which every mon failed.
const (
	minBackoff = 20 * time.Millisecond
	maxBackoff = time.Second
)

// backoff is capped exponential backoff with jitter: each wait is drawn
// from [next/2, next], then next doubles up to maxBackoff. The jitter
// keeps the clients that one mon's trouble failed at the same moment
// from coming back in step.
type backoff struct{ next time.Duration }

func (b *backoff) wait() time.Duration {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, maxBackoff)
	return d
}

// NoMonError is a request's failure when its context ended before any mon
// served it: what each mon it tried answered last. errors.Is sees the
// context's error.
type NoMonError struct {
	Type    osdpb.MsgType
	Answers []MonAnswer // in the order the mons were first tried
	Err     error       // the context's
	// Sent: some attempt went out on an established session and no reply
	// came back (lost, timed out, or the connection dropped), so a mon
	// may have received, even applied, the request. False when none got
	// that far: every mon refused or failed the session, or answered
	// (NOT_LEADER, SERVICE_UNAVAILABLE) without applying it.
	Sent bool
}

// MonAnswer is one mon's last answer to a request: an *ops.Error
// (SERVICE_UNAVAILABLE, NOT_LEADER), or why there was none.
type MonAnswer struct {
	Addr string
	Err  error
}

func (e *NoMonError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "monclient: %v: no mon answered: ", e.Type)
	for i, a := range e.Answers {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %v", a.Addr, a.Err)
	}
	fmt.Fprintf(&b, " (%v)", e.Err)
	return b.String()
}

func (e *NoMonError) Unwrap() error { return e.Err }

// monAnswers keeps each mon's last answer to one request.
type monAnswers []MonAnswer

func (as *monAnswers) note(addr string, err error) {
	for i := range *as {
		if (*as)[i].Addr == addr {
			(*as)[i].Err = err
			return
		}
	}
	*as = append(*as, MonAnswer{Addr: addr, Err: err})
}

func (as monAnswers) has(addr string) bool {
	return slices.ContainsFunc(as, func(a MonAnswer) bool { return a.Addr == addr })
}

// firstTry bounds an attempt at one mon in a request's first round while
// no mon has answered this client yet (see call).
const firstTry = time.Second

// knowsLeader reports whether a mon has answered as the leader (or named
// one).
func (c *Client) knowsLeader() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader != ""
}

// pick is the mon to try: the leader if known, else the next in turn.
func (c *Client) pick() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader != "" {
		return c.leader
	}
	return c.addrs[c.next%len(c.addrs)]
}

// Mons are the mons this client tries, in order: those it was given
// (Options.Addrs), then those the mons said are up that it was not.
func (c *Client) Mons() []string { return slices.Clone(c.monAddrs()) }

// monAddrs are the mons this client tries (addrs).
func (c *Client) monAddrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrs
}

// learnMons takes up the mons a mon says are up: the client tries them
// too, after those it was given, so that a mon added since it started
// serves it when those are gone (Ceph's monmap). The list replaces the
// one learned before.
func (c *Client) learnMons(up []string) {
	if len(up) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastUp = up
	c.tryLocked()
}

// tryLocked sets the mons to try (addrs) from those given and lastUp.
// Caller holds mu.
func (c *Client) tryLocked() {
	addrs := slices.Clone(c.o.Addrs)
	same := c.givenAmong(c.lastUp)
	for _, a := range c.lastUp {
		if a != "" && !slices.Contains(addrs, a) && !same[a] {
			addrs = append(addrs, a)
		}
	}
	if slices.Equal(addrs, c.addrs) {
		return
	}
	c.log.Info("monclient: the mons up", "mons", c.lastUp, "trying", addrs)
	c.addrs = addrs
}

// resolveGiven finds, for each mon given (Options.Addrs), the addresses
// it may be listed at (learnMons): as given, and, for a name, each address
// it resolves to, so that a mon given as "tcp://mon1:3300" or
// "tcp://localhost:3300" and listed by its IP address is not tried twice
// (a failed attempt at a dead mon each time round). Run once, apart, at
// New: a slow resolver must not hold the client's replies. It then sorts
// the mons learned so far again.
func (c *Client) resolveGiven() {
	ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
	defer cancel()
	sets := make([]map[string]bool, len(c.o.Addrs))
	for i, s := range c.o.Addrs {
		sets[i] = map[string]bool{canonicalAddr(s): true}
		a, err := msgr.ParseAddr(s)
		if err != nil {
			continue
		}
		host, port, err := net.SplitHostPort(a.Host)
		if err != nil {
			continue
		}
		if _, err := netip.ParseAddr(host); err == nil {
			continue
		}
		ips, _ := net.DefaultResolver.LookupHost(ctx, host)
		for _, ip := range ips {
			sets[i][canonicalAddr(a.Scheme+"://"+net.JoinHostPort(ip, port))] = true
		}
	}
	c.forms.Store(&sets)
	c.mu.Lock()
	c.tryLocked()
	c.mu.Unlock()
}

// givenAmong returns the mons of up that are given ones under another
// spelling: for each given mon, the one of up its addresses match, if
// exactly one does; a name that matches several is one for every mon
// (round robin), and each of them is learned.
func (c *Client) givenAmong(up []string) map[string]bool {
	same := map[string]bool{}
	sets := c.forms.Load()
	if sets == nil {
		return same
	}
	for _, set := range *sets {
		var hits []string
		for _, a := range up {
			if set[canonicalAddr(a)] {
				hits = append(hits, a)
			}
		}
		if len(hits) == 1 {
			same[hits[0]] = true
		}
	}
	return same
}

// canonicalAddr spells a msgr address with an IP in one form (lower-case
// scheme, IPv4-mapped IPv6 unmapped, IPv6 compressed), so that two
// spellings of one IP compare equal; a name is left as it is.
func canonicalAddr(s string) string {
	a, err := msgr.ParseAddr(s)
	if err != nil {
		return s
	}
	if ap, err := netip.ParseAddrPort(a.Host); err == nil {
		a.Host = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return a.String()
}

// leaderProbe is the least an attempt at the leader gets that a beacon
// makes once every Options.LeaderRetry while a standby relays them: half
// the beacon's time, then the same beacon goes on to the relay. A cut that
// healed is seen within LeaderRetry, even by a slow leader, and one that
// did not costs no beacon.
const leaderProbe = 500 * time.Millisecond

// beaconRoute is where a beacon's attempt goes, for how long, and whether
// it says the leader is out of reach (MonBeacon.leader_unreachable): to
// the standby relaying our beacons, apart from requests of other kinds
// (their NOT_LEADER redirects send them to the leader, whatever it is);
// to the leader for a short probe once every LeaderRetry; else where pick
// says, saying the leader is out of reach when our last attempt at it
// failed within LeaderRetry.
func (c *Client) beaconRoute(ctx context.Context, addr string, wait time.Duration) (string, time.Duration, bool) {
	now := time.Now()
	probe := leaderProbe
	if dl, ok := ctx.Deadline(); ok {
		probe = max(probe, time.Until(dl)/2)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.relay != "" && now.Sub(c.relaySince) < c.o.LeaderRetry:
		return c.relay, wait, true
	case c.relay != "" && c.relayLeader != "":
		c.relaySince = now // the probe's failure goes back to the relay
		return c.relayLeader, min(wait, probe), false
	}
	return addr, wait, c.leaderFailedLocked()
}

// failureRoute is where a failure report or a mark-me-down goes, and
// whether it says the
// leader is out of reach (MonFailure.leader_unreachable): to the standby
// relaying our beacons, if one does (beaconRoute's probes decide when the
// leader is back), else where pick says, saying so when our last attempt
// at the leader failed within LeaderRetry.
func (c *Client) failureRoute(addr string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.relay != "" {
		return c.relay, true
	}
	return addr, c.leaderFailedLocked()
}

// leaderLatelyFailed reports whether an attempt at the leader failed
// within LeaderRetry.
func (c *Client) leaderLatelyFailed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaderFailedLocked()
}

func (c *Client) leaderFailedLocked() bool {
	return !c.leaderFailed.IsZero() && time.Since(c.leaderFailed) < c.o.LeaderRetry
}

// markLeaderUnreachable sets the leader_unreachable field of a request
// that a standby may relay, and unreachable_leader: which leader failed.
func (c *Client) markLeaderUnreachable(req proto.Message) {
	c.mu.Lock()
	failed := c.failedLeader
	if failed == "" {
		failed = c.relayLeader
	}
	c.mu.Unlock()
	switch r := req.(type) {
	case *osdpb.MonFailure:
		r.LeaderUnreachable, r.UnreachableLeader = true, failed
	case *osdpb.MonMarkMeDown:
		r.LeaderUnreachable, r.UnreachableLeader = true, failed
	case *osdpb.MonBoot:
		r.LeaderUnreachable, r.UnreachableLeader = true, failed
	case *osdpb.MonBeacon:
		r.LeaderUnreachable, r.UnreachableLeader = true, failed
	}
}

// served notes the mon that served a request for the leader: the leader
// itself, or a standby that relayed a beacon (MonBeaconReply.relayed_by),
// which beacons then keep to (beaconRoute), or a failure report (which
// changes no route). Neither is a relay any more once the leader answers a
// beacon itself.
func (c *Client) served(addr string, rep reply) {
	var by string
	if r, ok := rep.(interface{ GetRelayedBy() string }); ok {
		by = r.GetRelayedBy()
	}
	r, ok := rep.(*osdpb.MonBeaconReply)
	c.mu.Lock()
	defer c.mu.Unlock()
	if by == "" {
		c.leader = addr
		if ok {
			if c.relay != "" {
				c.log.Info("monclient: the leader takes beacons again", "leader", addr)
			}
			c.relay, c.leaderFailed = "", time.Time{}
		}
		return
	}
	if !ok {
		return // a relayed failure report
	}
	if c.relay != addr {
		c.log.Info("monclient: the leader is out of reach; a standby relays beacons to it", "via", addr, "leader", r.GetHeader().GetLeader())
		c.relay, c.relaySince = addr, time.Now()
	}
	c.relayLeader = r.GetHeader().GetLeader()
}

// endRelay stops sending beacons to addr as a relay: it failed, or relays
// no more.
func (c *Client) endRelay(addr string) {
	c.mu.Lock()
	if c.relay == addr {
		c.relay = ""
	}
	c.mu.Unlock()
}

func (c *Client) setLeader(addr string) {
	c.mu.Lock()
	c.leader = addr
	c.mu.Unlock()
}

// skip moves on from a mon that failed a request.
func (c *Client) skip(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader == addr || c.relayLeader == addr {
		c.leaderFailed, c.failedLeader = time.Now(), addr
	}
	if c.leader == addr {
		c.leader = ""
	}
	if c.relay == addr {
		c.relay = ""
	}
	if c.addrs[c.next%len(c.addrs)] == addr {
		c.next++
	}
}

// roundTrip sends one request to addr and waits (up to wait) for the
// reply with its tid. sent reports whether the request went out: it is
// sent only once the session is up, so that a mon that refused or failed
// the session is known not to have it (NoMonError.Sent).
func (c *Client) roundTrip(ctx context.Context, addr string, t osdpb.MsgType, tid uint64, req proto.Message, rep reply, wait time.Duration) (_ *msgr.Conn, sent bool, _ error) {
	front, err := proto.Marshal(req)
	if err != nil {
		return nil, false, err
	}
	conn, err := c.ms.Connect(ctx, addr, "")
	if err != nil {
		if errors.Is(err, msgr.ErrClosed) {
			return nil, false, ErrClosed
		}
		return nil, false, err
	}
	p := c.pending.Start(tid, conn)
	if p == nil {
		return nil, false, ErrClosed
	}
	defer c.pending.End(tid)
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// Connect does not wait for the network and Send only queues: without
	// this, a request to a mon that refused the connection would look
	// sent.
	if err := conn.WaitReady(actx); err != nil {
		if c.ctx.Err() != nil {
			return nil, false, ErrClosed
		}
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		if actx.Err() != nil {
			return nil, false, fmt.Errorf("no session with %s within %v", addr, wait)
		}
		return nil, false, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	m := msgr.NewMessage(uint16(t), front, nil)
	m.SetTid(tid)
	if err := conn.Send(actx, m); err != nil {
		m.Release()
		return nil, false, fmt.Errorf("sending to %s: %w", addr, err)
	}
	select {
	case r, ok := <-p.Reply:
		if !ok {
			if c.ctx.Err() != nil {
				return nil, true, ErrClosed
			}
			if err := conn.Err(); err != nil {
				return nil, true, fmt.Errorf("connection to %s lost: %w", addr, err)
			}
			return nil, true, fmt.Errorf("connection to %s lost", addr)
		}
		err := r.DecodeFront(rep)
		r.Release()
		if err != nil {
			return nil, true, fmt.Errorf("malformed %v from %s: %w", ops.ReplyType(t), addr, err)
		}
		return conn, true, nil
	case <-actx.Done():
		if ctx.Err() != nil {
			return nil, true, ctx.Err()
		}
		return nil, true, fmt.Errorf("no reply from %s within %v", addr, wait)
	}
}

// noteMap adopts pb if it is a newer map of our cluster, and queues it for
// OnMap.
func (c *Client) noteMap(pb *osdpb.ClusterMap) {
	if pb == nil {
		return
	}
	c.mapMu.Lock()
	defer c.mapMu.Unlock()
	cur := c.mapv.Load()
	if cur != nil && (pb.Epoch <= cur.Epoch() || pb.Fsid != cur.FSID()) {
		return
	}
	mp, err := placement.FromProto(pb)
	if err != nil {
		c.log.Warn("monclient: ignoring an invalid map", "epoch", pb.Epoch, "err", err)
		return
	}
	c.mapv.Store(mp)
	if c.o.OnMap != nil {
		c.queue = append(c.queue, mp)
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// noteAuth hands t to OnAuth if it is newer than the last table.
func (c *Client) noteAuth(t *osdpb.AuthTable) {
	if t == nil || c.o.OnAuth == nil {
		return
	}
	c.authMu.Lock()
	defer c.authMu.Unlock()
	if t.Revision <= c.authRev {
		return
	}
	c.authRev = t.Revision
	c.o.OnAuth(t)
}

// deliverMaps calls OnMap with the queued maps, in order, one at a time.
func (c *Client) deliverMaps() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.wake:
		}
		for {
			c.mapMu.Lock()
			if len(c.queue) == 0 {
				c.mapMu.Unlock()
				break
			}
			mp := c.queue[0]
			c.queue[0] = nil
			c.queue = c.queue[1:]
			c.mapMu.Unlock()
			c.o.OnMap(mp)
		}
	}
}

// dispatcher takes replies to their waiting calls and map pushes to
// noteMap.
type dispatcher struct{ c *Client }

func (d dispatcher) Dispatch(m *msgr.Message) {
	c := d.c
	if osdpb.MsgType(m.Type) == osdpb.MsgType_MSG_MON_AUTH {
		var ma osdpb.MonAuth
		err := m.DecodeFront(&ma)
		m.Release()
		if err != nil {
			c.log.Warn("monclient: malformed auth table push", "err", err)
			return
		}
		c.noteAuth(ma.Table)
		return
	}
	if osdpb.MsgType(m.Type) == osdpb.MsgType_MSG_MON_MAP {
		var mm osdpb.MonMap
		err := m.DecodeFront(&mm)
		m.Release()
		if err != nil {
			c.log.Warn("monclient: malformed map push", "err", err)
			return
		}
		c.noteMap(mm.Map)
		c.learnMons(mm.Mons)
		return
	}
	c.pending.Deliver(m, true) // a reply on another session is an old attempt's
}

// HandleEvent fails the calls waiting on a conn that closed.
func (d dispatcher) HandleEvent(ev msgr.Event) { d.c.pending.HandleEvent(ev) }

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
