package osd

import (
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
	"golang.org/x/sys/cpu"
)

// Client ops are timed from their dispatch to their reply, by op type,
// into fixed power-of-two buckets of atomic counters: always on, with no
// lock on the op's own path beyond one shard of the in-flight table, and
// read at scrape time (internal/metrics) rather than pushed anywhere.

// OpBucketBounds are the upper bounds of the op latency buckets: 2^16 ns
// (65.5 µs) to 2^34 ns (17.2 s), doubling; a last bucket takes the rest.
var OpBucketBounds = func() []time.Duration {
	b := make([]time.Duration, opBuckets-1)
	for i := range b {
		b[i] = time.Duration(1) << (opFirstBound + i)
	}
	return b
}()

const (
	opFirstBound = 16 // log2 of the first bound, in ns
	opBuckets    = 20 // 19 bounds and +Inf
	maxClientOp  = osdpb.MsgType_MSG_DELETE_OBJECT_IF
	opKinds      = int(maxClientOp)/2 + 1 // request types are odd: 1, 3, ... 43
)

// opBucket is the bucket of an op that took d.
func opBucket(d time.Duration) int {
	if d <= 1 {
		return 0
	}
	return min(max(bits.Len64(uint64(d-1))-opFirstBound, 0), opBuckets-1)
}

type opHist struct {
	count, sumNanos atomic.Uint64
	buckets         [opBuckets]atomic.Uint64
}

// opKey is one request in flight: its session and the tid its reply
// carries.
type opKey struct {
	c   *msgr.Conn
	tid uint64
}

type opStart struct {
	t  osdpb.MsgType
	at time.Time
}

const opShards = 16

// opTimer is the table of client ops in flight and their histograms.
type opTimer struct {
	hist   [opKinds]opHist
	shards [opShards]struct {
		mu sync.Mutex
		m  map[opKey]opStart
		_  cpu.CacheLinePad // apart from the next shard's: no false sharing
	}
}

func isClientOp(t osdpb.MsgType) bool { return t%2 == 1 && t <= maxClientOp }

// start notes that request m (of client op type t) is being served.
func (ot *opTimer) start(m *msgr.Message, t osdpb.MsgType) {
	if !isClientOp(t) {
		return
	}
	k := opKey{m.Conn(), m.Tid()}
	s := &ot.shards[k.tid%opShards]
	s.mu.Lock()
	if s.m == nil {
		s.m = map[opKey]opStart{}
	}
	s.m[k] = opStart{t, time.Now()}
	s.mu.Unlock()
}

// done notes a reply of type reply going to to; if it answers a request
// start saw, that op is timed.
func (ot *opTimer) done(to dest, reply osdpb.MsgType) {
	if reply%2 != 0 || reply > maxClientOp+1 {
		return
	}
	k := opKey{to.c, to.tid}
	s := &ot.shards[k.tid%opShards]
	s.mu.Lock()
	st, ok := s.m[k]
	if ok && st.t+1 == reply {
		delete(s.m, k)
	}
	s.mu.Unlock()
	if !ok || st.t+1 != reply {
		return
	}
	d := time.Since(st.at)
	h := &ot.hist[st.t/2]
	h.count.Add(1)
	h.sumNanos.Add(uint64(d))
	h.buckets[opBucket(d)].Add(1)
}

// drop forgets request m, which ends without a reply: the OSD is
// shutting down and never queued it. Untimed, as no client saw it end.
func (ot *opTimer) drop(m *msgr.Message) {
	k := opKey{m.Conn(), m.Tid()}
	s := &ot.shards[k.tid%opShards]
	s.mu.Lock()
	delete(s.m, k)
	s.mu.Unlock()
}

// dropConn forgets every request of c, whose session ended: no reply can
// reach it, so a request whose handler never answers (or answers after
// this) must not stay in flight for the OSD's life.
func (ot *opTimer) dropConn(c *msgr.Conn) {
	for i := range ot.shards {
		s := &ot.shards[i]
		s.mu.Lock()
		for k := range s.m {
			if k.c == c {
				delete(s.m, k)
			}
		}
		s.mu.Unlock()
	}
}

func (ot *opTimer) inFlight() int {
	n := 0
	for i := range ot.shards {
		s := &ot.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// OpStats are the latencies of one client op type since the OSD started.
type OpStats struct {
	Op    string // "put_object", "get_object", ...
	Count uint64
	Sum   time.Duration
	// Buckets[i] counts the ops that took at most OpBucketBounds[i]
	// (cumulative, as Prometheus has them); the last entry is Count.
	Buckets []uint64
}

// Stats is a snapshot of what the OSD is doing, for monitoring.
type Stats struct {
	Ops         []OpStats // client ops with at least one served
	OpsInFlight int
	// PGs counts the PGs this OSD is primary of by state
	// ("active+clean", ...), as its last beacon to the mon said; the
	// degraded and misplaced objects are theirs.
	PGs                               map[string]int
	DegradedObjects, MisplacedObjects uint64
	// BeaconAge is how long ago the mon last took a beacon of ours; -1
	// without a mon (a static map), or before the first.
	BeaconAge time.Duration
	// LaggyPGs counts the PGs we lead in our map (the meta PG included)
	// whose reads wait for a read lease (laggy) or for a predecessor's to
	// run out (wait): docs/osd.md, Read leases.
	LaggyPGs int
	// SlowOps counts the client ops in flight for longer than
	// Config.OpComplaintTime, the oldest of them for OldestSlowOp;
	// RepTimeouts, the replicas that did not ack a write of ours within
	// Config.RepTimeout, since start (slowops.go).
	SlowOps      int
	OldestSlowOp time.Duration
	RepTimeouts  uint64
	// RecoveryBytes counts the bytes recovered or backfilled since start.
	RecoveryBytes uint64
	// ReadRepairs counts objects this primary found damaged in its store
	// on a get and replaced with a replica's intact copy;
	// ReadRepairFailures, those no replica could repair (repair.go).
	ReadRepairs, ReadRepairFailures uint64
	// Deep scrubs (scrub.go): objects and bytes read back, damaged
	// objects found and repaired, and those the PGs' last scrubs left
	// unrepaired (the beacon's scrub errors).
	ScrubbedObjects, ScrubbedBytes, ScrubDamaged, ScrubRepaired, ScrubErrors uint64
	// ScrubInconsistent: objects whose copies differ, as the last
	// compares of the PGs we lead found (scrubcmp.go).
	ScrubInconsistent uint64
	// PartDropsHeld counts the deletes of replaced multipart objects'
	// parts this primary defers now, as readers of those objects read
	// on (partholds.go).
	PartDropsHeld int64
	Store         store.Stats
	// Space is the data disk's last measure.
	Space store.Space
}

// Stats reads the OSD's counters. It is meant for scrapes: it reads the
// store's counters and Pebble's metrics.
func (o *OSD) Stats() Stats {
	st := Stats{OpsInFlight: o.opTimes.inFlight(), PGs: map[string]int{}, RecoveryBytes: o.recoveredBytes.Load(), Store: o.st.Stats(),
		ReadRepairs: o.readRepairs.Load(), ReadRepairFailures: o.readRepairFailures.Load(),
		ScrubbedObjects: o.scrub.objects.Load(), ScrubbedBytes: o.scrub.bytes.Load(), ScrubDamaged: o.scrub.errs.Load(),
		ScrubRepaired: o.scrub.repaired.Load(), ScrubErrors: o.scrub.unrepaired(), ScrubInconsistent: o.inconsistentObjects(),
		PartDropsHeld: o.partHolds.waiting.Load()}
	for i := range o.opTimes.hist {
		h := &o.opTimes.hist[i]
		n := h.count.Load()
		if n == 0 {
			continue
		}
		op := OpStats{Op: opName(osdpb.MsgType(2*i + 1)), Count: n, Sum: time.Duration(h.sumNanos.Load()), Buckets: make([]uint64, opBuckets)}
		var cum uint64
		for b := range op.Buckets {
			cum += h.buckets[b].Load()
			op.Buckets[b] = cum
		}
		// Read while ops finish: the count is the buckets' sum, so the
		// +Inf bucket and the count agree.
		op.Count = cum
		st.Ops = append(st.Ops, op)
	}
	if sp := o.space.Load(); sp != nil {
		st.Space = *sp
	}
	st.LaggyPGs = o.laggyPGs()
	st.SlowOps, st.OldestSlowOp, _ = o.opTimes.slow(time.Now(), o.cfg.OpComplaintTime)
	st.RepTimeouts = o.repTimeouts.total.Load()
	st.BeaconAge = -1
	if at := o.beaconTaken.Load(); at != 0 && o.mon != nil {
		st.BeaconAge = time.Since(time.Unix(0, at))
	}
	b := o.lastBeacon.Load()
	if b == nil || o.mon == nil {
		b = o.beacon()
	}
	for _, pg := range b.Pgs {
		st.PGs[pg.State]++
		st.DegradedObjects += pg.Degraded
		st.MisplacedObjects += pg.Misplaced
	}
	return st
}

// opName is "put_object" for MSG_PUT_OBJECT.
func opName(t osdpb.MsgType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "MSG_"))
}
