package osd

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// Slow ops, as Ceph reports them: what an operator needs to find an OSD
// that holds the cluster back while the map still has it up (a disk that
// stalls, a replica whose cluster network drops most packets). Two
// signals, both in the beacon, so that the mon's status warns SLOW_OPS:
//   - client ops in flight here for longer than Config.OpComplaintTime
//     (opTimer.slow): a stalled disk or a stuck PG of ours;
//   - writes we led that failed because a replica did not ack within
//     Config.RepTimeout (repTimeouts): such a write ends before the
//     complaint time, so in-flight ages alone would never show the
//     replica that made it fail; this names it.

// slowWindow is how far back the beacon counts rep timeouts.
const slowWindow = time.Minute

// slow counts the client ops in flight for longer than complaint at now,
// and finds the oldest of them: its age and type. An admin's scrub or
// repair of a PG is answered once the whole PG is read back, so its length
// is the PG's size, not a sign of trouble: it is not counted.
func (ot *opTimer) slow(now time.Time, complaint time.Duration) (n int, oldest time.Duration, oldestType osdpb.MsgType) {
	for i := range ot.shards {
		s := &ot.shards[i]
		s.mu.Lock()
		for _, st := range s.m {
			if st.t == osdpb.MsgType_MSG_PG_SCRUB || st.t == osdpb.MsgType_MSG_PG_REPAIR {
				continue
			}
			if age := now.Sub(st.at); age > complaint {
				n++
				if age > oldest {
					oldest, oldestType = age, st.t
				}
			}
		}
		s.mu.Unlock()
	}
	return n, oldest, oldestType
}

// repTimeouts counts, per replica, the writes that waited out the rep
// timeout for its ack, in one-second buckets over slowWindow: bounded
// however many writes fail.
type repTimeouts struct {
	total atomic.Uint64 // since start, for the metrics
	mu    sync.Mutex
	peers map[uint32]*[slowSeconds]secondCount
}

const slowSeconds = int(slowWindow / time.Second)

type secondCount struct {
	sec int64 // Unix second the count is of
	n   uint32
}

// add counts one write that timed out at now waiting for each of ids.
func (r *repTimeouts) add(now time.Time, ids []uint32) {
	sec := now.Unix()
	r.total.Add(uint64(len(ids)))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.peers == nil {
		r.peers = map[uint32]*[slowSeconds]secondCount{}
	}
	for _, id := range ids {
		b := r.peers[id]
		if b == nil {
			b = new([slowSeconds]secondCount)
			r.peers[id] = b
		}
		c := &b[sec%int64(slowSeconds)]
		if c.sec != sec {
			*c = secondCount{sec: sec}
		}
		c.n++
	}
}

// recent lists the replicas with writes timed out within slowWindow of now,
// by id, forgetting those without.
func (r *repTimeouts) recent(now time.Time, timeout time.Duration) []*osdpb.RepTimeouts {
	sec := now.Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*osdpb.RepTimeouts
	for id, b := range r.peers {
		var n uint32
		for _, c := range b {
			if sec-c.sec < int64(slowSeconds) {
				n += c.n
			}
		}
		if n == 0 {
			delete(r.peers, id)
			continue
		}
		out = append(out, &osdpb.RepTimeouts{Osd: id, Writes: n, TimeoutNanos: int64(timeout)})
	}
	slices.SortFunc(out, func(a, b *osdpb.RepTimeouts) int { return int(a.Osd) - int(b.Osd) })
	return out
}

// noteSlow fills b's slow-op fields and logs them while there are any, a
// line every 10 s at most (Ceph logs its slow requests likewise).
func (o *OSD) noteSlow(b *osdpb.MonBeacon) {
	now := time.Now()
	n, oldest, t := o.opTimes.slow(now, o.cfg.OpComplaintTime)
	b.OpComplaintNanos = int64(o.cfg.OpComplaintTime)
	if n > 0 {
		b.SlowOps, b.OldestSlowOpNanos, b.OldestSlowOp = uint32(n), int64(oldest), opName(t)
		o.ratelog.Log(o.log, slog.LevelWarn, "slow ops", "slow ops: client ops in flight for longer than the op complaint time",
			"ops", n, "oldest", oldest.Round(time.Second), "oldest_op", opName(t), "complaint_time", o.cfg.OpComplaintTime)
	}
	b.RepTimeouts = o.repTimeouts.recent(now, o.cfg.RepTimeout)
	if until := o.heldDown.Load(); until != 0 {
		b.HeldDown = &osdpb.HeldDown{UntilUnixNanos: until, Markdowns: uint32(o.heldMarkdowns.Load()), PeriodNanos: int64(o.cfg.MaxMarkdownPeriod)}
	}
}
