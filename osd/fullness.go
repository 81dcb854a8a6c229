package osd

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// A full data disk, as Ceph handles it. The map holds the nearfull,
// backfillfull and full ratios; each OSD measures its own filesystem
// (statfs) and says how full it is in its beacons, which the mon records in
// the map, and in its heartbeat replies, so a primary knows within a
// heartbeat. Then:
//
//   - a write that adds data (a put, a part, a completed upload, a new
//     bucket) to a PG whose primary or any replica is full fails with
//     STORAGE_FULL; reads and deletes go on;
//   - a replica over its own failsafe ratio (0.97, Ceph's
//     osd_failsafe_full_ratio) refuses such RepOps itself, for the writes
//     that raced its heartbeat;
//   - nothing backfills into an OSD over backfillfull: the PG shows
//     backfill_toofull and the copy is retried, with backoff, until space
//     comes back; a log catch-up (the writes a replica missed) stops only
//     at the store's floor, and shows recovery_toofull while its OSD is
//     full;
//   - under all of this the store keeps a reserve and refuses puts that
//     would leave Pebble no room (store.Space), so deletes and a restart
//     always work, and an OSD that starts on a full disk serves reads and
//     deletes (read-only) until space is freed.

// spaceInterval is how often the OSD measures its disk when nothing else
// asks (every write that adds data measures it too).
const spaceInterval = time.Second

func (o *OSD) spaceLoop() { o.every(spaceInterval, func() { o.checkSpace() }) }

// checkSpace measures the data disk, works out how full we are against the
// map's ratios and our failsafe, logs when that changes, and makes the
// store's reserve again once a full disk has room for it.
func (o *OSD) checkSpace() osdpb.Fullness {
	lvl, _ := o.measureSpace(false)
	return lvl
}

// measureSpace is checkSpace that also returns the usage it measured, for
// a write to hand to the store's Check (store.CheckOptions.Space), so
// that the two checks of a put share one statfs. recent: a write's, which
// may reuse a recent measure (store.RecentSpace) instead.
func (o *OSD) measureSpace(recent bool) (osdpb.Fullness, store.Space) {
	var sp store.Space
	if recent {
		sp = o.st.RecentSpace()
	} else {
		sp = o.st.Space()
	}
	if sp.Reserve == 0 && o.st.ReserveReleased() > 0 {
		if made, err := o.st.MaintainReserve(); err != nil {
			o.log.Warn("make the store's reserve again", "err", err)
		} else if made {
			sp = o.st.Space()
		}
	}
	lvl := o.fullnessOf(sp)
	o.space.Store(&sp)
	if old := osdpb.Fullness(o.fullness.Swap(int32(lvl))); old != lvl {
		level := slog.LevelInfo
		if lvl > old {
			level = slog.LevelWarn
		}
		o.log.Log(o.ctx, level, "data disk "+ops.FullnessWord(lvl), "was", ops.FullnessWord(old),
			"used", fmt.Sprintf("%.1f%%", 100*sp.Ratio()), "avail_bytes", sp.Avail, "total_bytes", sp.Total)
	}
	return lvl, sp
}

// fullnessOf is how full a disk with usage sp makes us: the map's level,
// or FAILSAFE over Config.FailsafeFullRatio, once the store released its
// reserve, or when less than the store's floor and a put of floorPut bytes
// is free (it refuses puts then: on a small disk, or with a large
// memtable, that comes before the full ratios, and the puts of this OSD's
// PGs would fail as unacknowledged replica writes rather than StorageFull).
func (o *OSD) fullnessOf(sp store.Space) osdpb.Fullness {
	if sp.Total == 0 {
		return osdpb.Fullness_FULLNESS_NONE // a filesystem that cannot say
	}
	r := sp.Ratio()
	floor := o.st.Floor()
	if r >= o.cfg.FailsafeFullRatio || (sp.Reserve == 0 && o.st.ReserveReleased() > 0) || floor > 0 && sp.Avail < floor+floorPut {
		return osdpb.Fullness_FULLNESS_FAILSAFE
	}
	return o.Map().Fullness(r) // nil before a first boot's map: the defaults
}

// floorPut is the put fullnessOf leaves room for above the store's floor:
// a put of the S3 gateway's and the SDK's usual size.
const floorPut = 4 << 20

// peerFullness is how full OSD id is: the worse of what the map and its
// last heartbeat reply say.
func (o *OSD) peerFullness(mp *placement.Map, id uint32) osdpb.Fullness {
	lvl := osdpb.Fullness_FULLNESS_NONE
	if info, ok := mp.OSD(id); ok {
		lvl = info.Fullness
	}
	o.peerMu.Lock()
	if ps := o.peers[id]; ps != nil {
		lvl = max(lvl, ps.fullness)
	}
	o.peerMu.Unlock()
	return lvl
}

// notePeerFullness records what OSD id's heartbeat reply said.
func (o *OSD) notePeerFullness(id uint32, f osdpb.Fullness) {
	o.peerMu.Lock()
	if ps := o.peers[id]; ps != nil {
		ps.fullness = f
	}
	o.peerMu.Unlock()
}

// adds reports whether e adds data: puts (parts and completed uploads are
// puts) and new buckets. Deletes and syncs go on when disks are full.
func adds(e *osdpb.LogEntry) bool {
	return e.GetKind() == osdpb.OpKind_OP_PUT || e.GetKind() == osdpb.OpKind_OP_CREATE_BUCKET
}

// fullCheck refuses, at a PG's primary, a write that adds data when we or
// a replica in acting (acting[0] is us) are full. It returns our disk's
// usage as it measured it, for the store's Check.
func (o *OSD) fullCheck(mp *placement.Map, pool, pg uint32, acting []uint32) (store.Space, error) {
	lvl, sp := o.measureSpace(true)
	if lvl >= osdpb.Fullness_FULLNESS_FULL {
		return sp, o.fullError(lvl)
	}
	for _, id := range acting[1:] {
		if lvl := o.peerFullness(mp, id); lvl >= osdpb.Fullness_FULLNESS_FULL {
			return sp, ops.Errorf(osdpb.Status_STORAGE_FULL, "pg %s: osd.%d is %s; delete objects or add OSDs", pgName(pool, pg), id, ops.FullnessWord(lvl))
		}
	}
	return sp, nil
}

// fullError is our own refusal of a write at level lvl.
func (o *OSD) fullError(lvl osdpb.Fullness) error {
	sp := o.space.Load()
	_, _, full := o.Map().FullRatios()
	return ops.Errorf(osdpb.Status_STORAGE_FULL, "osd.%d is %s: %.1f%% of its data disk used (full_ratio %g, failsafe %g); delete objects or add OSDs",
		o.id, ops.FullnessWord(lvl), 100*sp.Ratio(), full, o.cfg.FailsafeFullRatio)
}

// backfillRoom refuses to backfill a replica (copy a whole PG) into a disk
// over backfillfull. A log catch-up is not refused by ratio: it brings in the
// writes a replica missed, some refused at its failsafe, and until it has
// them the PG's deletes wait too; only the store's own floor stops it.
func (o *OSD) backfillRoom() error {
	if lvl := o.checkSpace(); lvl >= osdpb.Fullness_FULLNESS_BACKFILLFULL {
		return o.fullError(lvl)
	}
	return nil
}

// Recovery retries: a replica whose recovery failed (its disk is full, its
// primary did not answer) waits before the next one, from a second up to
// half a minute (Ceph's osd_recovery_retry_interval), doubling.
const (
	recoveryRetryMin = time.Second
	recoveryRetryMax = 30 * time.Second
)

// recoveryFailed notes a failed recovery of p and when the next may start.
// On p's shard.
func (o *OSD) recoveryFailed(p *pgState, err error) {
	p.recoveryFailures++
	d := min(recoveryRetryMin<<min(p.recoveryFailures-1, 5), recoveryRetryMax)
	p.retryAt = time.Now().Add(d)
	// The first failure and then every 8th: a full disk fails every retry.
	if p.recoveryFailures == 1 || p.recoveryFailures%8 == 0 {
		o.log.Warn("recovery failed; retrying with backoff", "pg", pgName(p.pool, p.pg), "failures", p.recoveryFailures, "retry_in", d, "err", err)
	}
}

// recoveryWait is the refusal of a RepOp that would start a recovery of p
// before its backoff ends; nil when it may start. On p's shard.
func (o *OSD) recoveryWait(p *pgState) error {
	if wait := time.Until(p.retryAt); wait > 0 {
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s: recovery failed %d times; next try in %v",
			pgName(p.pool, p.pg), p.recoveryFailures, wait.Round(time.Millisecond))
	}
	return nil
}
