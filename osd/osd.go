// Package osd is the object storage daemon: it serves client ops on a
// public messenger, replicates writes to its peers on a cluster messenger,
// keeps objects in osd/store, and brings peers that fell behind up to date.
//
// The model is Ceph's primary-copy replication. Objects live in placement
// groups; the first OSD of a PG's acting set (internal/placement) is its primary.
// The primary orders a PG's writes in a PG log with (epoch, seq) versions,
// applies each one to its store with a synced commit, forwards it to the
// replicas in parallel, and answers the client only when every replica has
// acknowledged its own synced commit. Ops of one PG are applied in order on
// one shard goroutine, which goes on to the next op while the WAL syncs of
// earlier ones are in flight (whenDurable); PGs run in parallel on
// different shards.
//
// Invariants the recovery relies on (docs/osd.md):
//   - a primary applies a write before any replica sees it, so a primary is
//     never behind its replicas;
//   - a replica applies RepOps only in version order; a gap, or a RepOp of
//     kind OP_NONE ("be at least at this version"), makes it pull the objects
//     it lacks from the primary before it applies anything else of that PG.
//
// A daemon must never panic on what arrives: malformed or unknown ops get an
// INVALID_ARGUMENT reply and the connection goes on serving.
package osd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/buildinfo"
	"github.com/ospreystore/osprey/internal/guard"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/pending"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/transports"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
)

// Config configures one OSD.
type Config struct {
	// Mon lists the mons' addresses. With them the OSD needs no map: it
	// gets its id from the mon on its first start (kept in DataDir), boots
	// (registers its addresses, is marked up and in), receives every map,
	// beacons, and reports peers it cannot reach. ID, Map and MapPath are
	// then ignored.
	Mon []string
	// Host labels the OSD in the map ("osprey osd tree"); default the
	// machine's host name. Weight is its straw2 weight at first boot
	// (default 1). With Mon only.
	Host   string
	Weight float64
	// PublicAddr and ClusterAddr are the addresses to register with the
	// mon when they differ from the bound ones (a wildcard bind).
	PublicAddr, ClusterAddr string
	// BeaconInterval is how often the OSD beacons to the mon. Default 1s.
	BeaconInterval time.Duration
	// Keyring authenticates the OSD, with Mon (docs/auth.md): its own
	// (osd.N), or a bootstrap key (client.bootstrap-osd's, or an
	// admin's) with which a new OSD gets its id and its own keyring from
	// the mon; the OSD keeps its own as DataDir/keyring (mode 0600) and
	// uses that on later starts, so Keyring may then be nil.
	Keyring *auth.Keyring
	// NoAuth turns authentication off (with Mon): the OSD's sessions use
	// method "none", peers are whoever they claim, and ops are not checked
	// against caps. For tests and closed networks only; Start logs a
	// warning. Without Mon (a static map) there is no mon to hold records,
	// and the OSD never authenticates.
	NoAuth bool
	// ClusterModes are the connection modes of the cluster network (OSD to
	// OSD) and of the OSD's sessions with the mon, in order of preference
	// (Ceph's ms_cluster_mode); ServiceModes those the OSD accepts from
	// clients on its public network (ms_service_mode). "secure" seals every
	// frame after the handshake (docs/auth.md); it needs authentication.
	// Nil: crc.
	ClusterModes, ServiceModes []msgr.Mode

	// ID is the OSD's id in the map. Required without Mon.
	ID uint32
	// Map is the cluster map to start with; MapPath, if Map is nil, is a
	// file to load it from (the offline bootstrap, without a mon). With
	// MapPath set the OSD reads the file again when a peer or client shows
	// a newer epoch.
	Map     *placement.Map
	MapPath string
	// DataDir holds the store. Required.
	DataDir string
	// PublicListen and ClusterListen are the addresses to listen on;
	// default the OSD's public and cluster addresses in the map. Set them
	// to listen on a wildcard address the map does not name.
	PublicListen, ClusterListen string
	// Store tunes the Pebble layer; its Dir is DataDir/store.
	Store store.Options
	// Shards is the number of op queues (PGs are spread over them by id).
	// Default 32.
	Shards int
	// ShardQueue bounds each shard's queue; a full queue stops the
	// dispatcher, which stops granting the client credit. Default 256.
	ShardQueue int
	// RepTimeout bounds how long a write waits for its replicas before it
	// fails with SERVICE_UNAVAILABLE (retriable). Default 10s.
	RepTimeout time.Duration
	// OpComplaintTime is how long a client op may be in flight before it
	// counts as slow (Ceph's osd_op_complaint_time): the OSD logs its slow
	// ops and reports them in its beacons, and the mon's status warns
	// SLOW_OPS. Default 30s.
	OpComplaintTime time.Duration
	// DiskStallTimeout: once a write, sync or read on the data disk has been in
	// flight this long (the store's disk health checks, Store.DiskStall),
	// the OSD stops serving reads and asks the mon to mark it down, and
	// boots again once the disk answers, so that its PGs move on instead
	// of hanging with it (Ceph's osd_op_thread_timeout; CockroachDB's
	// max_sync_duration). Default 20s; negative: never. It must exceed
	// Store.DiskSlowThreshold (5s) to be seen.
	DiskStallTimeout time.Duration
	// MaxMarkdownCount and MaxMarkdownPeriod bound how often an OSD that
	// finds itself marked down while it runs boots again (Ceph's
	// osd_max_markdown_count and osd_max_markdown_period): marked down
	// more than MaxMarkdownCount times within MaxMarkdownPeriod, it stays
	// down until the period since the first of them has passed, so that
	// one its peers cannot reach (its cluster network cut, while the mon
	// still hears it) does not flap, and take every PG it serves through
	// peering, twice a second for as long as the cut lasts. Defaults 5
	// and 10 minutes; a negative count boots again every time.
	MaxMarkdownCount  int
	MaxMarkdownPeriod time.Duration
	// HeartbeatInterval and HeartbeatGrace: peers are pinged every
	// interval; one silent for grace is down, and writes to PGs it serves
	// fail at once rather than after RepTimeout. Defaults 500ms and 4s.
	HeartbeatInterval, HeartbeatGrace time.Duration
	// ReadLease is how long a heartbeat reply lets a primary serve reads
	// without hearing that peer again (docs/osd.md, "Read leases"). It
	// should be below the time it takes to mark a silent OSD down, or new
	// primaries wait. Default: 0.8 of the mon's heartbeat grace, as its
	// boot reply says (Ceph's osd_pool_default_read_lease_ratio); without
	// a mon, no leases.
	ReadLease time.Duration
	// RecoveryMaxActive bounds how many PGs this OSD recovers or backfills
	// at once (Ceph's osd_recovery_max_active); default 3.
	// RecoveryBytesPerSec caps the bytes/s they copy together; 0, the
	// default, leaves them unthrottled. A new primary catching up before
	// it may serve is exempt from both: its PG's client I/O waits for it.
	RecoveryMaxActive   int
	RecoveryBytesPerSec int64
	// DeepScrubInterval is how often each PG copy this OSD holds is deep
	// scrubbed: every object read back and checked against its CRC32Cs,
	// a damaged one repaired from another member (scrub.go; Ceph's
	// osd_deep_scrub_interval). Default 7 days; negative: never.
	// ScrubBytesPerSec paces the scrub's reads; default 32 MiB/s,
	// negative: unpaced.
	DeepScrubInterval time.Duration
	ScrubBytesPerSec  int64
	// FailsafeFullRatio is the fraction of the data disk in use over which
	// this OSD applies no write that adds data, even a replica's (Ceph's
	// osd_failsafe_full_ratio); default 0.97. The map's full ratios stop
	// client writes before it (fullness.go).
	FailsafeFullRatio float64
	// Readers is the number of goroutines serving reads. Default 8.
	Readers int
	// StrayInterval is how often the OSD looks for copies of PGs whose
	// acting set it left and asks their primaries whether it may remove
	// them (stray.go). Default 10s.
	StrayInterval time.Duration
	// Logger defaults to slog.Default(), with osd=ID.
	Logger *slog.Logger
	// ClientMessageBytes bounds the bytes of client messages (front and
	// body) the OSD holds at once, from when it starts to receive one
	// until its write is done, replicas included, as Ceph's
	// osd_client_message_size_cap: the public messenger's receive budget
	// (msgr.Options.MaxRecvBytes). Over it, the OSD stops reading its
	// clients' links until writes complete. 0: DefaultClientMessageBytes
	// of the smallest registered-memory budget of the transports its
	// public and cluster addresses use (an RDMA domain's; none over TCP).
	// Negative: no bound.
	ClientMessageBytes int64
	// Transports are both messengers' (tests); nil: the build's defaults
	// (transports.Default), which the OSD closes when it stops.
	// Faults are passed to both messengers (tests).
	Transports []wire.Transport
	Faults     msgr.FaultInjection
	// DisableDataCRC turns off the public messenger's data CRCs; the store
	// keeps its own per chunk. The cluster messenger never checksums data:
	// every data segment an OSD receives from another (a RepOp's body, a
	// recovered object) goes through the store's check against the
	// object's CRC32C, which is the one pass over those bytes on the
	// replica; a corrupt one fails that apply, and the replica recovers
	// the object from its primary.
	DisableDataCRC bool
}

func (c *Config) setDefaults() error {
	if c.DataDir == "" {
		return errors.New("osd: DataDir is required")
	}
	if c.BeaconInterval <= 0 {
		c.BeaconInterval = time.Second
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	if len(c.Mon) > 0 {
		// The map comes from the mon, in Start.
	} else if c.Map == nil {
		if c.MapPath == "" {
			return errors.New("osd: a Map or a MapPath is required")
		}
		m, err := placement.Load(c.MapPath)
		if err != nil {
			return err
		}
		c.Map = m
	}
	if len(c.Mon) == 0 {
		if _, ok := c.Map.OSD(c.ID); !ok {
			return fmt.Errorf("osd: osd.%d is not in the map (epoch %d)", c.ID, c.Map.Epoch())
		}
	}
	if c.Shards <= 0 {
		c.Shards = 32
	}
	if c.ShardQueue <= 0 {
		c.ShardQueue = 256
	}
	if c.RepTimeout <= 0 {
		c.RepTimeout = 10 * time.Second
	}
	if c.OpComplaintTime <= 0 {
		c.OpComplaintTime = 30 * time.Second
	}
	if c.DiskStallTimeout == 0 {
		c.DiskStallTimeout = 20 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 500 * time.Millisecond
	}
	if c.HeartbeatGrace <= 0 {
		c.HeartbeatGrace = 4 * time.Second
	}
	// ReadLease stays 0 when unset: the mon's grace decides (setReadLease).
	if c.MaxMarkdownCount == 0 {
		c.MaxMarkdownCount = 5
	}
	if c.MaxMarkdownPeriod <= 0 {
		c.MaxMarkdownPeriod = 10 * time.Minute
	}
	if c.Readers <= 0 {
		c.Readers = 8
	}
	if c.StrayInterval <= 0 {
		c.StrayInterval = 10 * time.Second
	}
	if c.RecoveryMaxActive <= 0 {
		c.RecoveryMaxActive = 3
	}
	if c.DeepScrubInterval == 0 {
		c.DeepScrubInterval = 7 * 24 * time.Hour
	}
	if c.ScrubBytesPerSec == 0 {
		c.ScrubBytesPerSec = 32 << 20
	}
	switch r := c.FailsafeFullRatio; {
	case r == 0:
		c.FailsafeFullRatio = 0.97
	case !(r > 0 && r <= 1):
		return fmt.Errorf("osd: FailsafeFullRatio %v: want a fraction in (0, 1]", r)
	}
	if c.RecoveryBytesPerSec < 0 {
		return fmt.Errorf("osd: RecoveryBytesPerSec %d is negative", c.RecoveryBytesPerSec)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// OSD is a running object storage daemon.
type OSD struct {
	cfg   Config
	id    uint32
	log   *slog.Logger
	authz *authTables // the mon's auth table, what ops are checked against
	st    *store.Store
	pub   *msgr.Messenger // clients
	clu   *msgr.Messenger // other OSDs
	mapv  atomic.Pointer[placement.Map]
	mapMu sync.Mutex // serialises map changes
	// bucketGate orders bucket deletes (held exclusively around their
	// local apply) behind object writes between their Check and their
	// local apply (held shared): a write sent to its replicas before it is
	// applied here must not then fail here for a bucket deleted meanwhile.
	bucketGate sync.RWMutex
	// bucketDrops counts the bucket records this OSD removed, each under
	// bucketGate held exclusively (dropBuckets): a recovery that installs
	// a record the meta PG's primary sent checks, under the gate, that no
	// delete came in between (install).
	bucketDrops atomic.Uint64
	// fences are the buckets being deleted, whose puts this OSD refuses
	// as their primary (bucketfence.go).
	fences fences
	hist   history // past maps, for peering
	// freshStore: the store is new and the mon has not yet acknowledged a
	// boot that said so (MonBoot.fresh_store). Until then the OSD builds
	// no PG machine (advance), so it answers no PG query and serves
	// nothing: the map it holds may not say its store is new.
	freshStore atomic.Bool
	// bootEpoch is the epoch of the map our last boot made (0 before
	// the first): a later up_from at another address is another daemon.
	bootEpoch atomic.Uint64
	stoppedBy atomic.Pointer[error] // what fatal stopped the OSD with

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// durable runs whenDurable's waits, on goroutines it keeps.
	durable *waiters

	shards  []chan func()
	readers chan func()
	quit    chan struct{} // closed when the queues stop

	// dropNow, closed as a graceful stop begins, ends the wait of the
	// replaced parts' deletes (dropReplaced), counted in drops, so that
	// they run before the messengers go.
	dropNow  chan struct{}
	dropOnce sync.Once
	drops    atomic.Int64
	// partHolds: replaced multipart objects' parts held for readers.
	partHolds partHolds
	// stopping: Close began (Ready).
	stopping atomic.Bool

	pgMu sync.Mutex
	pgs  map[uint32]*pgState // by store PG id

	// lines keeps each PG's writes in arrival order behind one waiting
	// for its bucket to be vouched for (vouchedWrite).
	lines writeLines

	reps  pending.Table[*pendingRep] // RepOps waiting for replicas
	calls pending.Calls              // OSD-to-OSD requests waiting for replies

	peerMu sync.Mutex
	peers  map[uint32]*peerState
	// lastBeat is when the heartbeat loop last ran (unix ns), to tell a
	// stall of this process (stalled); stalls counts them.
	lastBeat atomic.Int64
	stalls   atomic.Uint64
	// noSide holds the peers that refused our heartbeat side sessions
	// (heartbeatConn); sideSessions is false when we take none ourselves
	// (a test's stand-in for a build without them).
	noSide       map[uint32]bool
	sideSessions bool
	started      time.Time

	trimEvery uint64 // trim a PG's log every this many versions

	// With a mon (Config.Mon).
	mon      *monclient.Client
	ident    identity
	rebootCh chan struct{}
	// markdowns are when this OSD booted again after finding itself
	// marked down, within MaxMarkdownPeriod (monLoop's alone); heldDown
	// is until when it stays down for having been marked down too often
	// (UnixNano; 0 while it is not held).
	markdowns  []time.Time
	markdownOf uint64 // the bootEpoch whose markdown the last entry counts
	heldDown   atomic.Int64
	// heldMarkdowns is how many markdowns started the hold, for beacons.
	heldMarkdowns atomic.Int32
	// monCtx is monLoop's: Close ends it (monStop) and waits for monDone
	// before it asks the mon to mark us down, so that no beacon or boot
	// of ours follows that request.
	monCtx         context.Context
	monStop        context.CancelFunc
	monDone        chan struct{}
	refused        refusedPeers
	reporting      failureReports
	recoveredBytes atomic.Uint64
	// repairs runs one read repair per object at a time (repair.go);
	// readRepairs and readRepairFailures count them.
	repairs                         singleflight.Group
	readRepairs, readRepairFailures atomic.Uint64
	scrub                           *scrubber
	fetchingMap                     atomic.Bool // learnEpoch has a fetch in flight
	fenced                          atomic.Bool // fatal stopped the OSD
	// recoverySlots and recoveryRate throttle recovery (Config); rate is
	// nil when unlimited.
	recoverySlots chan struct{}
	recoveryRate  *rate.Limiter
	// recoveryPaced counts the bytes recoveryRate granted (tests read it:
	// what recovery copied under the cap, beside recoveredBytes).
	recoveryPaced atomic.Uint64
	// removingStray: a stray PG copy is being removed (stray.go); one at
	// a time.
	removingStray atomic.Bool
	// strayAllowed and strayKept count this primary's answers to PG_STRAY: removals
	// allowed and refused.
	strayAllowed, strayKept atomic.Uint64
	// strayRounds counts the looks for stray copies (checkStrays).
	strayRounds atomic.Uint64
	// opsServed and the client byte counters are what beacons report for
	// the mon's throughput (ops a client sent us, bodies in and out).
	opsServed        atomic.Uint64
	clientReadBytes  atomic.Uint64
	clientWriteBytes atomic.Uint64
	// opTimes times client ops, lastBeacon is the last beacon built
	// (Stats).
	opTimes opTimer
	// repTimeouts counts the writes we led that a replica's ack did not
	// reach within RepTimeout, by replica (slowops.go).
	repTimeouts repTimeouts
	lastBeacon  atomic.Pointer[osdpb.MonBeacon]
	// beaconTaken is when the mon last took a beacon (Unix ns; 0: never):
	// an OSD cut off from the mons reports PG states that are its last.
	beaconTaken atomic.Int64
	// readLease is the read lease's length (time.Duration): Config's, or
	// set from the mon's grace at each boot (setReadLease).
	readLease atomic.Int64
	// noReads: we asked the mon to mark us down, stopping or with our disk
	// stalled, and serve no more reads (readLeaseErr).
	noReads atomic.Bool
	// diskStalled: the data disk is stuck past DiskStallTimeout; we asked
	// to be marked down and boot again only once it answers (monLoop's
	// checkDiskStall).
	diskStalled atomic.Bool
	// stallMarked: noReads was set for a stalled disk, to be cleared by
	// our next boot (rebootIfDown), not when the disk answers.
	stallMarked atomic.Bool
	// ratelog limits the lines a peer can make us repeat (bad requests,
	// refused RepOps) to one per kind per 10 s, with the count held back.
	ratelog guard.RateLog
	// space and fullness are the data disk's last measure and what it
	// makes us (fullness.go).
	space    atomic.Pointer[store.Space]
	fullness atomic.Int32 // an osdpb.Fullness

	pubAddr, cluAddr string
	closeOnce        sync.Once
	closeErr         error

	// releaseTransports closes the messengers' transports if the OSD
	// made them, once both have stopped.
	releaseTransports func()
	// cacheMem gives the store's read cache registered memory once the
	// public messenger listens on RDMA (dispatch.go).
	cacheMem cacheMemory
	// stopReclaim ends the read cache's answer to registered-memory
	// pressure (store.ReclaimReadCache); nil without registered memory.
	stopReclaim func()
}

// Start opens the store, starts both messengers and begins serving.
func Start(ctx context.Context, cfg Config) (*OSD, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	var (
		mc    *monclient.Client
		ident identity
		// osdp is the OSD for the mon's map pushes once Start has built
		// it: those that come before are dropped, and Start adopts the
		// newest map the client saw instead.
		osdp  atomic.Pointer[OSD]
		authz = newAuthTables()
		own   *auth.Keyring // the OSD's keyring, when it authenticates
	)
	if len(cfg.Mon) > 0 {
		var err error
		if mc, ident, own, err = joinCluster(ctx, &cfg, authz, func(m *placement.Map) {
			if o := osdp.Load(); o != nil {
				o.onMonMap(m)
			}
		}); err != nil {
			return nil, err
		}
		if cfg.Map, err = mc.Subscribe(ctx); err != nil {
			mc.Close()
			if errors.Is(err, msgr.ErrAuth) && strings.Contains(err.Error(), "has no auth record") {
				// The mons know no osd.N: removed (osd rm, which takes
				// its key), so this disk's data is no member's any more.
				return nil, fmt.Errorf("osd.%d: the mons at %s hold no key for osd.%d: it was removed (osd rm) or never created; a removed OSD's data directory %s is not used again: wipe it and start a new OSD (%w)",
					cfg.ID, strings.Join(cfg.Mon, ","), cfg.ID, cfg.DataDir, err)
			}
			if ident.FSID != "" && errors.Is(err, msgr.ErrAuth) {
				// A keyring of another cluster's CA, most likely (either
				// side then refuses the other's certificate): say which
				// cluster the data directory belongs to.
				return nil, fmt.Errorf("osd.%d: authentication with the mons at %s failed, and %s belongs to cluster %s (its identity.json): are these its mons? (%w)",
					cfg.ID, strings.Join(cfg.Mon, ","), cfg.DataDir, ident.FSID, err)
			}
			return nil, fmt.Errorf("osd.%d: the map from the mon: %w", cfg.ID, err)
		}
		if info, ok := cfg.Map.OSD(cfg.ID); ok && !placement.NeverBooted(info) {
			// A restart listens where it did before, unless told otherwise.
			cfg.PublicListen = cmp.Or(cfg.PublicListen, info.PublicAddr)
			cfg.ClusterListen = cmp.Or(cfg.ClusterListen, info.ClusterAddr)
		}
		if cfg.PublicListen == "" || cfg.ClusterListen == "" {
			mc.Close()
			return nil, fmt.Errorf("osd.%d: a new OSD needs addresses to listen on (public and cluster)", cfg.ID)
		}
	}
	cfg.Logger = cfg.Logger.With("osd", cfg.ID)
	o := &OSD{cfg: cfg, id: cfg.ID, log: cfg.Logger, pgs: map[uint32]*pgState{}, peers: map[uint32]*peerState{}, started: time.Now(),
		mon: mc, ident: ident, rebootCh: make(chan struct{}, 1), authz: authz,
		noSide: map[uint32]bool{}, sideSessions: takesSideSessions(cfg.ID)}
	o.setReadLease(0)
	o.recoverySlots = make(chan struct{}, cfg.RecoveryMaxActive)
	o.scrub = newScrubber(cfg.ScrubBytesPerSec)
	if cfg.RecoveryBytesPerSec > 0 {
		// A burst of a tenth of a second (at least 1 MiB): big objects go
		// in steps of it, and no second copies much more than the cap.
		o.recoveryRate = rate.NewLimiter(rate.Limit(cfg.RecoveryBytesPerSec), int(max(cfg.RecoveryBytesPerSec/10, 1<<20)))
	}
	keep := cfg.Store.LogKeep
	if keep <= 0 {
		keep = 2000
	}
	o.trimEvery = uint64(max(1, keep/8))
	o.mapv.Store(cfg.Map)
	o.ctx, o.cancel = context.WithCancel(context.Background())
	// Up to 256 idle, more than a busy OSD has waits in flight (48 at 16
	// puts in flight over three replicas), a few MiB of stacks at most.
	o.durable = newWaiters(o.ctx, &o.wg, 256)
	o.quit = make(chan struct{})
	o.dropNow = make(chan struct{})

	sopts := cfg.Store
	sopts.Dir = filepath.Join(cfg.DataDir, "store")
	if sopts.Logger == nil {
		sopts.Logger = o.log
	}
	if sopts.ReadCacheAlloc == nil {
		sopts.ReadCacheAlloc = &o.cacheMem
	}
	sopts.DroppedParts = replacedParts
	st, err := openStore(ctx, cfg.DataDir, sopts)
	if err != nil {
		if mc != nil {
			mc.Close()
		}
		return nil, err
	}
	o.st = st
	newest, err := o.loadHistory(ctx)
	if err != nil {
		o.abort()
		return nil, err
	}
	if mc != nil {
		// A store with no map of ours is new (a new OSD, or a replaced
		// disk under the old id), and stays so until the mon knows.
		fresh, err := st.FreshMark(ctx)
		if err == nil && !fresh && newest == nil {
			fresh, err = true, st.SetFreshMark(ctx, true)
		}
		if err != nil {
			o.abort()
			return nil, err
		}
		o.freshStore.Store(fresh)
	}
	if newest != nil && newest.Epoch() > cfg.Map.Epoch() {
		// A restart resumes from the newest map it adopted, as a Ceph OSD
		// does from its superblock, not from an older map file.
		o.mapv.Store(newest)
	}
	o.remember(o.Map())
	// Removals a stop cut short: their PGs refuse until resumeRemovals
	// has finished them.
	cut, err := st.RemovingPGs(ctx)
	var resumed []*pgState
	for _, sid := range cut {
		var p *pgState
		if p, err = o.pgOf(sid); err != nil {
			break
		}
		o.markRemoving(p)
		resumed = append(resumed, p)
	}
	if err != nil {
		o.abort()
		return nil, err
	}
	// Every OSD holds the multipart bucket's record itself: it is not a
	// user bucket and is never created or deleted through the meta PG.
	if _, err := st.HeadBucket(ctx, ops.MultipartBucket); err != nil {
		err = st.InstallObject(ctx, placement.MetaPG, &osdpb.LogEntry{Kind: osdpb.OpKind_OP_CREATE_BUCKET, Bucket: ops.MultipartBucket}, nil)
		if err != nil {
			o.abort()
			return nil, fmt.Errorf("osd: creating the multipart bucket: %w", err)
		}
	}

	name := msgr.EntityName(ops.OSDName(cfg.ID))
	info, _ := cfg.Map.OSD(cfg.ID)
	pl := cmp.Or(cfg.PublicListen, info.GetPublicAddr())
	cl := cmp.Or(cfg.ClusterListen, info.GetClusterAddr())
	// Both networks share the transports: one libfabric domain per NIC
	// serves both messengers, as with the transports tests pass in.
	var ts []wire.Transport
	if ts, o.releaseTransports, err = transports.OrDefault(cfg.Transports); err != nil {
		o.abort()
		return nil, err
	}
	authz.enforce = own != nil
	pubAuth, err := msgr.NewAuthOptions(own, authz.authorize(false), cfg.ServiceModes)
	if err != nil {
		o.abort()
		return nil, fmt.Errorf("osd: the public network's mode: %w", err)
	}
	cluAuth, err := msgr.NewAuthOptions(own, authz.authorize(true), cfg.ClusterModes)
	if err != nil {
		o.abort()
		return nil, fmt.Errorf("osd: the cluster network's mode: %w", err)
	}
	o.pub, err = msgr.New(msgr.Options{
		Name: name, Dispatcher: publicDispatcher{o}, DefaultPolicy: msgr.StatelessServer, Auth: pubAuth,
		MaxRecvBytes: cmp.Or(cfg.ClientMessageBytes, DefaultClientMessageBytes(RegisteredBudget(ts, pl, cl))),
		Logger:       o.log.With("net", "public"), MaxMessageSize: ops.MaxMessageSize,
		Transports: ts, Faults: cfg.Faults, DisableDataCRC: cfg.DisableDataCRC,
		DataChunkCRC: st.ChunkSize(),
	})
	if err == nil {
		o.clu, err = msgr.New(msgr.Options{
			Name: name, Dispatcher: clusterDispatcher{o}, DefaultPolicy: msgr.LosslessPeer, Auth: cluAuth,
			Logger: o.log.With("net", "cluster"), MaxMessageSize: ops.MaxMessageSize,
			Transports: ts, Faults: cfg.Faults, DisableDataCRC: true,
			DataChunkCRC: st.ChunkSize(),
			Reconnect:    msgr.Backoff{Min: 10 * time.Millisecond, Max: time.Second},
			OnDialError:  o.onDialError,
			// Peers' heartbeats come on side sessions of their own.
			AcceptLossySide: o.sideSessions,
			// No receive budget between OSDs, as Ceph caps only client
			// messages (osd_client_message_size_cap): a replica holds
			// RepOps while it pulls a gap over this same messenger, and a
			// spent budget would keep the pull's replies from being read.
			MaxRecvBytes: -1,
		})
	}
	if err != nil {
		o.abort()
		return nil, err
	}
	o.cacheMem.pub.Store(o.pub)
	authz.msgrs.Store(&[2]*msgr.Messenger{o.pub, o.clu})

	o.shards = make([]chan func(), cfg.Shards)
	for i := range o.shards {
		o.shards[i] = make(chan func(), cfg.ShardQueue)
		o.wg.Go(func() { o.runQueue(o.shards[i]) })
	}
	o.readers = make(chan func(), cfg.ShardQueue)
	for range cfg.Readers {
		o.wg.Go(func() { o.runQueue(o.readers) })
	}

	if o.pubAddr, err = o.pub.Listen(ctx, pl); err == nil {
		o.cluAddr, err = o.clu.Listen(ctx, cl)
	}
	if err != nil {
		o.abort()
		return nil, fmt.Errorf("osd.%d: %w", cfg.ID, err)
	}
	// The read cache's memory is the public listener's (cacheMemory):
	// it gives some back when that transport runs short.
	if stop, err := o.pub.OnRegisteredPressure(o.st.ReclaimReadCache); err == nil {
		o.stopReclaim = stop
	}
	if mc != nil {
		o.fillHistoryFromMon()
		if err := o.boot(ctx); err != nil {
			o.abort()
			return nil, err
		}
		o.monCtx, o.monStop = context.WithCancel(o.ctx)
		o.monDone = make(chan struct{})
		o.wg.Go(func() {
			defer close(o.monDone)
			o.monLoop()
		})
		if own != nil {
			o.watchKeyring(own)
		}
	}
	// Every PG we lead peers before it serves, a restart included: our
	// store may be behind what the others acknowledged while we were
	// away. Under mapMu, as adoptMap marks: a map a peer showed us may be
	// adopted meanwhile, and its marks must not go back to our epoch.
	o.mapMu.Lock()
	mp := o.Map()
	o.markPeering(nil, mp)
	o.mapMu.Unlock()
	o.advanceAll(mp)
	o.wg.Go(o.probeLoop)
	o.wg.Go(o.heartbeatLoop)
	o.wg.Go(o.spaceLoop)
	if len(resumed) > 0 {
		o.removingStray.Store(true) // before strayLoop starts
		o.wg.Go(func() { o.resumeRemovals(resumed) })
	}
	o.wg.Go(o.strayLoop)
	o.wg.Go(o.scrubLoop)
	o.wg.Go(func() { o.peerAll("start") })
	if mc != nil {
		// Only now do the mon's pushes reach the OSD (they stop again
		// first thing in Close): those dropped meanwhile end in the
		// client's newest map.
		osdp.Store(o)
		if m := mc.Map(); m.Epoch() > o.Map().Epoch() {
			o.onMonMap(m)
		}
	}
	o.log.Info("osd started", "public", o.pubAddr, "cluster", o.cluAddr, "epoch", o.Map().Epoch(), "data", cfg.DataDir, "version", buildinfo.Version())
	return o, nil
}

// watchKeyring has the OSD take up a keyring rotated into DATA/keyring
// (`osprey auth rotate osd.N -o DATA/keyring`) on its messengers and its
// mon client, without a restart; until it does (within
// auth.DefaultWatchEvery) the cluster refuses its new sessions. An OSD
// run on its own keyring from elsewhere (Config.Keyring, no DATA/keyring)
// has nothing to watch: it is restarted with the new one.
func (o *OSD) watchKeyring(own *auth.Keyring) {
	path := filepath.Join(o.cfg.DataDir, keyringFile)
	if _, err := os.Stat(path); err != nil {
		return
	}
	o.wg.Go(func() {
		auth.WatchKeyring(o.ctx, auth.WatchOptions{Path: path, Current: own, Logger: o.log,
			Apply: func(k *auth.Keyring) error {
				for _, m := range []*msgr.Messenger{o.pub, o.clu} {
					if err := m.SetKeyring(k); err != nil {
						return err
					}
				}
				return o.mon.SetKeyring(k)
			}})
	})
}

// openStore makes the data directory and opens the store in it.
func openStore(ctx context.Context, dir string, opts store.Options) (*store.Store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("osd: data directory: %w", err)
	}
	return store.Open(ctx, opts)
}

// abort undoes a failed Start.
func (o *OSD) abort() {
	o.cancel()
	if o.mon != nil {
		o.mon.Close()
	}
	for _, m := range []*msgr.Messenger{o.pub, o.clu} {
		if m != nil {
			m.Kill()
		}
	}
	if o.releaseTransports != nil {
		o.releaseTransports()
	}
	close(o.quit)
	o.wg.Wait()
	o.endReclaim()
	o.st.Close()
}

// endReclaim stops the read cache's answers to registered-memory
// pressure: a transport shared with other daemons outlives this OSD.
func (o *OSD) endReclaim() {
	if o.stopReclaim != nil {
		o.stopReclaim()
	}
}

// ID is the OSD's id.
func (o *OSD) ID() uint32 { return o.id }

// PublicAddr and ClusterAddr are the bound addresses.
func (o *OSD) PublicAddr() string  { return o.pubAddr }
func (o *OSD) ClusterAddr() string { return o.cluAddr }

// Messengers are the OSD's public (clients) and cluster (OSDs)
// messengers, for their counters.
func (o *OSD) Messengers() (public, cluster *msgr.Messenger) { return o.pub, o.clu }

// Map is the OSD's current cluster map.
func (o *OSD) Map() *placement.Map { return o.mapv.Load() }

// Ready says why the OSD does not take client ops now, nil when it does
// (a readiness probe: /readyz of --metrics-addr): it runs, not stopping,
// and its map has it up (with a mon, once its boot was taken; after the
// mon marked it down, until its boot again).
func (o *OSD) Ready() error {
	if err := o.Stopped(); err != nil {
		return fmt.Errorf("osd.%d stopped: %w", o.id, err)
	}
	if o.stopping.Load() {
		return fmt.Errorf("osd.%d is stopping", o.id)
	}
	mp := o.Map()
	if info, ok := mp.OSD(o.id); !ok || !info.Up {
		return fmt.Errorf("osd.%d is down in its map (epoch %d)", o.id, mp.Epoch())
	}
	return nil
}

// Store is the OSD's store, for tests and tools that inspect it.
func (o *OSD) Store() *store.Store { return o.st }

// Close stops serving. With a mon, it first asks the mon to mark it down
// (markMeDown, a second at most) while it still serves. Then the mon's
// map pushes, listeners and sessions stop, so nothing new arrives, the
// queues drain, writes still waiting for replicas fail, and the store
// closes.
func (o *OSD) Close(ctx context.Context) error { return o.CloseWith(ctx, CloseOptions{}) }

// CloseOptions change how CloseWith stops an OSD.
type CloseOptions struct {
	// StayUp stops without asking the mon to mark the OSD down, as after
	// a crash: for a whole cluster stopping together (`osprey up`), where
	// each mark would only have the OSDs not yet stopped peer again, and
	// warn of PGs going down, for nothing.
	StayUp bool
}

// CloseWith is Close with options; only the first Close or CloseWith
// stops the OSD.
func (o *OSD) CloseWith(ctx context.Context, opts CloseOptions) error {
	o.closeOnce.Do(func() {
		o.log.Info("osd stopping")
		o.stopping.Store(true)
		o.FlushDrops(ctx)
		if o.mon != nil {
			o.monStop()
			<-o.monDone
			if !opts.StayUp {
				// The map will say we are dead (OSDInfo.dead), so our
				// successors serve reads at once: we must serve none.
				o.noReads.Store(true)
				o.markMeDown(ctx)
			}
		}
		o.cancel()
		// The mon client first: a map it hands us starts goroutines and
		// uses the messengers and the store, and its Close returns once
		// none is being handled, so none comes after the Wait below.
		if o.mon != nil {
			o.mon.Close()
		}
		errs := []error{o.pub.Shutdown(ctx), o.clu.Shutdown(ctx)}
		o.releaseTransports()
		close(o.quit)
		o.wg.Wait()
		o.reps.FailIf(nil, func(p *pendingRep) {
			p.finish(o.shuttingDown())
		})
		o.calls.FailIf(nil)
		o.endReclaim()
		errs = append(errs, o.st.Close())
		o.closeErr = errors.Join(errs...)
		o.log.Info("osd stopped")
	})
	return o.closeErr
}

// shuttingDown is the answer to work that Close cut short: retriable, as
// from any OSD that goes.
func (o *OSD) shuttingDown() error {
	return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d is shutting down", o.id)
}

// runQueue runs a queue's work items until the OSD stops. Items still
// queued then are dropped: the messengers are gone, nobody waits for them.
func (o *OSD) runQueue(q chan func()) {
	for {
		select {
		case f := <-q:
			f()
		case <-o.quit:
			return
		}
	}
}

// enqueue puts f on q, waiting while q is full (that wait is the
// back-pressure on the sender); false once the OSD is closing.
func (o *OSD) enqueue(q chan func(), f func()) bool {
	select {
	case q <- f:
		return true
	case <-o.ctx.Done():
		return false
	}
}

// shardOf is the queue of a store PG: all its ops run there, in order.
func (o *OSD) shardOf(sid uint32) chan func() {
	return o.shards[mix32(sid)%uint32(len(o.shards))]
}

func mix32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x45d9f3b
	x ^= x >> 16
	return x
}

// storePG is the store's id of (pool, pg), a PG of a pool of a validated
// map, whose ids always fit (placement.MaxPoolID). Ids from the network go
// through peerPG first.
func storePG(pool, pg uint32) uint32 {
	sid, err := placement.PGID{Pool: pool, Seed: pg}.StoreID()
	if err != nil {
		// Only a caller that skipped peerPG gets here: a bug, not input.
		panic(fmt.Sprintf("osd: storePG(%d, %d) of an unchecked id: %v", pool, pg, err))
	}
	return sid
}

// peerPG checks a PG id that came over the network: a PG of a pool in
// our map (or the meta PG), whose store id it returns. Without it, pool
// 65536's PG 5 would be pool 0's PG 5.
func (o *OSD) peerPG(pool, pg uint32) (uint32, error) {
	sid, err := placement.PGID{Pool: pool, Seed: pg}.StoreID()
	if err != nil {
		return 0, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "pg %s: %v", pgName(pool, pg), err)
	}
	p, ok := o.Map().Pool(pool)
	if !ok {
		return 0, ops.Errorf(osdpb.Status_STALE_EPOCH, "pg %s: no pool %d in our map (epoch %d)", pgName(pool, pg), pool, o.Map().Epoch())
	}
	if pg != placement.MetaPG && pg >= p.PgCount {
		return 0, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "pg %s: pool %d has %d PGs", pgName(pool, pg), pool, p.PgCount)
	}
	return sid, nil
}

func splitStorePG(sid uint32) (pool, pg uint32) {
	id := placement.PGIDOf(sid)
	return id.Pool, id.Seed
}

// poolPGOf is the pool and PG of store PG sid under mp: the meta PG, which
// every pool's store id names alike, is the meta pool's (metaPool).
func poolPGOf(mp *placement.Map, sid uint32) (pool, pg uint32) {
	pool, pg = splitStorePG(sid)
	if pg == placement.MetaPG {
		pool = metaPool(mp)
	}
	return pool, pg
}

// PeerDown reports whether this OSD considers OSD id down (it missed its
// heartbeats for HeartbeatGrace).
func (o *OSD) PeerDown(id uint32) bool { return o.peerDown(id) }

// pgName names PG pg of pool as every message and log line does: Ceph's
// POOL.SEED (1.1f), or "meta" for the PG of bucket records.
func pgName(pool, pg uint32) string { return placement.PGID{Pool: pool, Seed: pg}.String() }
