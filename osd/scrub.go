package osd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Deep scrub. A bit that rots in an object nobody reads is found by no
// get, and a replica's copy is read only when it is needed most, after
// its primary failed. So, as Ceph's deep scrub does, every OSD reads
// back every object of every PG copy it holds once per DeepScrubInterval,
// checking each chunk against the CRC32C recorded when it was written. A
// damaged copy is repaired from another member of the acting set (the
// primary first) by the read repair's path (repair.go): fetched, compared
// with our head, checked against its CRC32C and installed on the PG's
// shard. What no member can repair is counted as a scrub error: the
// OSD's beacon reports it and the mon's health turns HEALTH_ERR until a
// later scrub of that PG finds it repaired or gone.
//
// Each copy scrubs itself against its own CRCs, which the primary's
// CRC32C of the body made and every member shares; the primary of a clean
// PG then compares its copy with its replicas' (scrubcmp.go), which finds
// copies that are each intact but differ. The PGs due go one at a time,
// oldest stamp first; reads go
// past the read cache and are paced by ScrubBytesPerSec. A PG's stamp is
// kept in the store, and a PG never scrubbed gets a random one within the
// last interval, so a new OSD's PGs come due spread over the interval
// rather than all at once.

// scrubWindow is the most one scrub read takes.
const scrubWindow = 4 << 20

// ScrubResult is what a deep scrub of one PG copy found.
type ScrubResult struct {
	Objects, Bytes uint64
	// Damaged objects failed their checksums (or an I/O error); Repaired
	// of them were replaced with another member's copy.
	Damaged, Repaired uint64
	// Compared: the primary compared the copies (scrubcmp.go).
	// Inconsistent objects have copies that differ; Fixed of them a
	// repair made agree (only a repair fixes any).
	Compared            bool
	Inconsistent, Fixed uint64
}

type scrubber struct {
	rate *rate.Limiter // nil: unpaced
	poke chan struct{} // an admin asked for scrubs (requested)

	mu      sync.Mutex
	stamps  map[uint32]time.Time // by store PG id, loaded from the store
	damaged map[uint32]uint64    // objects the PG's last scrub could not repair
	// inconsistent: objects the last compare of a PG we lead found
	// inconsistent, by store PG id; loaded from the store on first use.
	inconsistent map[uint32]uint64
	requested    map[uint32]bool // PG copies an admin asked to scrub now

	objects, bytes, errs, repaired atomic.Uint64
	running                        atomic.Uint32 // store PG id + 1 of the scrub under way
	// one serializes the deep scrubs of this OSD: the scheduled ones and
	// an admin's repair.
	one sync.Mutex
}

func newScrubber(bytesPerSec int64) *scrubber {
	s := &scrubber{stamps: map[uint32]time.Time{}, damaged: map[uint32]uint64{}, requested: map[uint32]bool{},
		inconsistent: map[uint32]uint64{}, poke: make(chan struct{}, 1)}
	if bytesPerSec > 0 {
		s.rate = rate.NewLimiter(rate.Limit(bytesPerSec), int(max(bytesPerSec/10, scrubWindow)))
	}
	return s
}

// unrepaired is the number of damaged objects the PGs' last scrubs left.
func (s *scrubber) unrepaired() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n uint64
	for _, d := range s.damaged {
		n += d
	}
	return n
}

// scrubLoop scrubs the PG copies that are due, checking several times per
// interval, and those an admin asks for at once.
func (o *OSD) scrubLoop() {
	d := min(max(o.cfg.DeepScrubInterval/8, 10*time.Millisecond), time.Minute)
	if o.cfg.DeepScrubInterval < 0 {
		d = time.Hour // only requested scrubs, which poke
	}
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-o.ctx.Done():
			return
		case <-t.C:
		case <-o.scrub.poke:
		}
		o.scrubDue()
	}
}

// requestScrub queues this OSD's copy of the PG req names, or with all
// every PG copy it holds as a member of its acting set, to be scrubbed
// now (MSG_PG_SCRUB), and returns how many it queued.
func (o *OSD) requestScrub(req *osdpb.PGScrub) (int, error) {
	mp := o.Map()
	var sids []uint32
	if req.All {
		held, err := o.st.HeldPGs(o.ctx)
		if err != nil {
			return 0, err
		}
		for _, sid := range held {
			if o.member(mp, sid) {
				sids = append(sids, sid)
			}
		}
	} else {
		sid, err := o.peerPG(req.Header.GetPool(), req.Header.GetPg())
		if err != nil {
			return 0, err
		}
		if !o.member(mp, sid) {
			return 0, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd.%d is not in the acting set of pg %s (epoch %d)", o.id, placement.PGIDOf(sid), mp.Epoch())
		}
		sids = []uint32{sid}
	}
	s := o.scrub
	s.mu.Lock()
	for _, sid := range sids {
		s.requested[sid] = true
	}
	s.mu.Unlock()
	select {
	case s.poke <- struct{}{}:
	default:
	}
	o.log.Info("deep scrub requested", "pgs", len(sids))
	return len(sids), nil
}

// scrubDue deep-scrubs, one after the other, every PG copy whose last
// scrub is an interval old.
func (o *OSD) scrubDue() {
	for o.ctx.Err() == nil {
		sid, ok := o.nextScrub()
		if !ok {
			return
		}
		pool, pg := poolPGOf(o.Map(), sid)
		if _, err := o.DeepScrub(o.ctx, pool, pg); err != nil && o.ctx.Err() == nil {
			// Tried again at the next interval: a copy that cannot be
			// read whole now (being removed, a corrupt head) is not read
			// in a tight loop.
			o.log.Warn("deep scrub failed", "pg", placement.PGIDOf(sid), "err", err)
			o.setScrubbed(sid, time.Now())
		}
	}
}

// nextScrub picks the due PG copy with the oldest stamp, among those we
// hold as a member of the acting set that are not peering, recovering or
// being removed.
func (o *OSD) nextScrub() (uint32, bool) {
	mp := o.Map()
	if info, ok := mp.OSD(o.id); !ok || !info.Up {
		return 0, false
	}
	sids, err := o.st.HeldPGs(o.ctx)
	if err != nil {
		o.log.Warn("listing the pgs the store holds", "err", err)
		return 0, false
	}
	now := time.Now()
	var best uint32
	var bestAt time.Time
	s := o.scrub
	// A requested PG copy the store holds nothing of has nothing to scrub.
	s.mu.Lock()
	for sid := range s.requested {
		if !slices.Contains(sids, sid) {
			delete(s.requested, sid)
		}
	}
	s.mu.Unlock()
	for _, sid := range sids {
		if !o.scrubbable(mp, sid) {
			continue
		}
		s.mu.Lock()
		asked := s.requested[sid]
		s.mu.Unlock()
		if asked {
			return sid, true
		}
		if o.cfg.DeepScrubInterval < 0 {
			continue
		}
		at, err := o.scrubStamp(sid, now)
		if err != nil {
			o.log.Warn("reading a pg's scrub stamp", "pg", placement.PGIDOf(sid), "err", err)
			continue
		}
		if now.Sub(at) >= o.cfg.DeepScrubInterval && (bestAt.IsZero() || at.Before(bestAt)) {
			best, bestAt = sid, at
		}
	}
	return best, !bestAt.IsZero()
}

func (o *OSD) scrubbable(mp *placement.Map, sid uint32) bool {
	if !o.member(mp, sid) || o.removing(sid) {
		return false
	}
	o.pgMu.Lock()
	p := o.pgs[sid]
	o.pgMu.Unlock()
	if p != nil && (p.peering.Load() || p.bf.Load() != nil) {
		return false
	}
	incomplete, err := o.st.PGBackfilling(o.ctx, sid)
	return err == nil && !incomplete
}

// member reports whether this OSD is in the acting set of store PG sid
// under mp.
func (o *OSD) member(mp *placement.Map, sid uint32) bool {
	pool, pg := poolPGOf(mp, sid)
	_, ok := mp.RoleOf(pool, pg, o.id)
	return ok
}

// scrubStamp is when PG copy sid was last scrubbed: from the store on
// first use; a copy never scrubbed gets a random time within the last
// interval (see the package comment above).
func (o *OSD) scrubStamp(sid uint32, now time.Time) (time.Time, error) {
	s := o.scrub
	s.mu.Lock()
	at, ok := s.stamps[sid]
	s.mu.Unlock()
	if ok {
		return at, nil
	}
	at, err := o.st.PGScrubbed(o.ctx, sid)
	if err != nil {
		return time.Time{}, err
	}
	if at.IsZero() {
		at = now.Add(-time.Duration(rand.Int64N(int64(o.cfg.DeepScrubInterval) + 1)))
		if err := o.st.SetPGScrubbed(o.ctx, sid, at); err != nil {
			return time.Time{}, err
		}
	}
	s.mu.Lock()
	s.stamps[sid] = at
	s.mu.Unlock()
	return at, nil
}

func (o *OSD) setScrubbed(sid uint32, at time.Time) {
	s := o.scrub
	s.mu.Lock()
	s.stamps[sid] = at
	delete(s.requested, sid)
	s.mu.Unlock()
	if err := o.st.SetPGScrubbed(o.ctx, sid, at); err != nil {
		o.log.Warn("recording a pg's scrub", "pg", placement.PGIDOf(sid), "err", err)
	}
}

// DeepScrub reads back every object of this OSD's copy of PG (pool, pg),
// checks it against its CRC32Cs, and repairs a damaged one from another
// member of the acting set. The OSD runs it on its own every
// DeepScrubInterval; tools and tests may run it at any time.
func (o *OSD) DeepScrub(ctx context.Context, pool, pg uint32) (ScrubResult, error) {
	return o.deepScrub(ctx, pool, pg, false)
}

// RepairPG deep-scrubs PG (pool, pg), which this OSD must lead, and
// installs the authoritative copy of each inconsistent object on the
// copies that differ (Ceph's "ceph pg repair").
func (o *OSD) RepairPG(ctx context.Context, pool, pg uint32) (ScrubResult, error) {
	sid, err := o.peerPG(pool, pg)
	if err != nil {
		return ScrubResult{}, err
	}
	mp := o.Map()
	if primary, ok := mp.Primary(pool, pg); !ok || primary != o.id {
		return ScrubResult{}, ops.Errorf(osdpb.Status_WRONG_PRIMARY, "osd.%d is not the primary of pg %s (epoch %d)", o.id, placement.PGIDOf(sid), mp.Epoch())
	}
	res, err := o.deepScrub(ctx, pool, pg, true)
	if err == nil && !res.Compared {
		err = ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s: its copies cannot be compared now (it has one copy, is not active, or a replica is being backfilled)", placement.PGIDOf(sid))
	}
	return res, err
}

func (o *OSD) deepScrub(ctx context.Context, pool, pg uint32, repair bool) (ScrubResult, error) {
	sid, err := o.peerPG(pool, pg)
	if err != nil {
		return ScrubResult{}, err
	}
	s := o.scrub
	s.one.Lock()
	defer s.one.Unlock()
	s.running.Store(sid + 1)
	defer s.running.Store(0)
	started := time.Now()
	var res ScrubResult
	var buf []byte
	damaged := map[objName]bool{} // what no member could repair
	for e, err := range o.st.PGObjects(ctx, sid, "", "") {
		if err != nil {
			return res, fmt.Errorf("deep scrub of pg %s: %w", placement.PGIDOf(sid), err)
		}
		size := e.Meta.GetSize()
		if len(e.Meta.GetParts()) > 0 {
			size = 0 // a manifest: its parts are objects of their own PGs
		}
		n, err := o.scrubObject(ctx, s, e.Bucket, e.Key, size, &buf)
		res.Objects++
		res.Bytes += n
		s.objects.Add(1)
		s.bytes.Add(n)
		if err == nil {
			continue
		}
		if !repairable(err) {
			return res, fmt.Errorf("deep scrub of pg %s: %w", placement.PGIDOf(sid), err)
		}
		res.Damaged++
		s.errs.Add(1)
		if rerr := o.repairShared(pool, pg, e.Bucket, e.Key, err); rerr == nil {
			res.Repaired++
			s.repaired.Add(1)
		} else {
			damaged[objName{e.Bucket, e.Key}] = true
		}
	}
	if err := o.compareScrub(ctx, sid, pool, pg, damaged, repair, &res); err != nil {
		return res, fmt.Errorf("deep scrub of pg %s: comparing the copies: %w", placement.PGIDOf(sid), err)
	}
	s.mu.Lock()
	if left := res.Damaged - res.Repaired; left > 0 {
		s.damaged[sid] = left
	} else {
		delete(s.damaged, sid)
	}
	s.mu.Unlock()
	o.setScrubbed(sid, started)
	lvl := "deep scrub ok"
	switch {
	case res.Damaged > 0:
		lvl = "deep scrub found damaged objects"
	case res.Inconsistent > 0:
		lvl = "deep scrub found inconsistent objects"
	}
	o.log.Info(lvl, "pg", placement.PGIDOf(sid), "objects", res.Objects, "bytes", res.Bytes,
		"damaged", res.Damaged, "repaired", res.Repaired, "compared", res.Compared,
		"inconsistent", res.Inconsistent, "fixed", res.Fixed, "took", time.Since(started).Round(time.Millisecond))
	return res, nil
}

// scrubObject reads bucket/key back in windows, paced, and returns how
// many bytes it read. An object gone meanwhile is no error.
func (o *OSD) scrubObject(ctx context.Context, s *scrubber, bucket, key string, size uint64, buf *[]byte) (uint64, error) {
	var read uint64
	for off := uint64(0); off < size; off += scrubWindow {
		n := min(size-off, scrubWindow)
		if s.rate != nil {
			if err := s.rate.WaitN(ctx, int(n)); err != nil {
				return read, err
			}
		}
		if cap(*buf) < int(n) {
			*buf = make([]byte, 0, scrubWindow)
		}
		_, data, err := o.st.ReadRange(ctx, bucket, key, int64(off), int64(n), (*buf)[:0])
		if errors.Is(err, store.ErrNoSuchKey) {
			return read, nil
		}
		if err != nil {
			return read, err
		}
		read += uint64(len(data))
		if uint64(len(data)) < n {
			return read, nil // overwritten by a smaller object meanwhile
		}
	}
	return read, nil
}

// compareScrub compares our copy of store PG sid with its replicas'
// when we lead it and it is active and no replica is being backfilled (a
// backfill's copy lacks objects by design; a replica recovering from the
// log, or behind by the writes in flight, catches up before a difference
// counts: see confirm), and records what it found with the PG's scrub.
func (o *OSD) compareScrub(ctx context.Context, sid, pool, pg uint32, damaged map[objName]bool, repair bool, res *ScrubResult) error {
	mp := o.Map()
	acting := mp.ActingSet(pool, pg)
	p, ok := mp.Pool(pool)
	if pg == placement.MetaPG || !ok || len(acting) < 2 || acting[0] != o.id {
		return nil
	}
	if st := o.pgStat(mp, p, pg); !hasState(st.State, "active") || hasState(st.State, "backfilling") || hasState(st.State, "backfill_toofull") {
		o.log.Info("deep scrub: copies not compared", "pg", placement.PGIDOf(sid), "state", st.State)
		return nil
	}
	found, fixed, err := o.compareReplicas(ctx, sid, pool, pg, acting, damaged, repair)
	if err != nil {
		return err
	}
	res.Compared = true
	res.Inconsistent = uint64(len(found.Objects) + fixed)
	res.Fixed = uint64(fixed)
	o.setInconsistent(sid, found)
	return nil
}

// hasState reports whether the "+"-joined state has word.
func hasState(state, word string) bool {
	return slices.Contains(strings.Split(state, "+"), word)
}

// setInconsistent records the last compare of store PG sid.
func (o *OSD) setInconsistent(sid uint32, r *osdpb.PGInconsistent) {
	if err := o.st.SetPGInconsistent(o.ctx, sid, r); err != nil {
		o.log.Warn("recording a pg's inconsistent objects", "pg", placement.PGIDOf(sid), "err", err)
	}
	s := o.scrub
	s.mu.Lock()
	s.inconsistent[sid] = uint64(len(r.GetObjects()))
	s.mu.Unlock()
}

// inconsistentIn is how many objects the last compare of store PG sid
// found inconsistent.
func (o *OSD) inconsistentIn(sid uint32) uint64 {
	s := o.scrub
	s.mu.Lock()
	n, ok := s.inconsistent[sid]
	s.mu.Unlock()
	if ok {
		return n
	}
	r, err := o.st.PGInconsistent(o.ctx, sid)
	if err != nil {
		o.log.Warn("reading a pg's inconsistent objects", "pg", placement.PGIDOf(sid), "err", err)
		return 0
	}
	n = uint64(len(r.GetObjects()))
	s.mu.Lock()
	s.inconsistent[sid] = n
	s.mu.Unlock()
	return n
}

// inconsistentObjects is how many objects the last compares of the PGs
// we lead found inconsistent (osprey_osd_scrub_inconsistent_objects).
func (o *OSD) inconsistentObjects() uint64 {
	mp := o.Map()
	var n uint64
	for p := range mp.Pools() {
		for pg, role := range mp.PGsOf(p.Id, o.id) {
			if role.IsPrimary() && pg != placement.MetaPG {
				n += o.inconsistentIn(storePG(p.Id, pg))
			}
		}
	}
	return n
}
