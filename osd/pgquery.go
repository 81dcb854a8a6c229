package osd

import (
	"encoding/json"
	"fmt"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// PGQuery is what "pg query" shows of a PG, from its primary, as Ceph's
// `ceph pg PGID query`: its state, interval and log, and where each
// replica stands.
type PGQuery struct {
	PGID  string `json:"pgid"`
	State string `json:"state"` // as the primary's beacon reports it
	// Epoch is the map epoch the primary answered at; MachineEpoch the
	// newest its peering machine has taken (behind while it catches up).
	Epoch        uint64   `json:"epoch"`
	MachineEpoch uint64   `json:"machine_epoch"`
	Acting       []uint32 `json:"acting"`
	// Up is placement's set (UpSet); it differs from Acting while a
	// pg_temp entry keeps the old members serving (remapped).
	Up []uint32 `json:"up"`
	// IntervalStart is the first epoch of the current interval (the acting
	// set unchanged since); LastEpochStarted the first epoch of the
	// newest interval in which this copy went active with the whole log.
	IntervalStart    uint64 `json:"interval_start"`
	LastEpochStarted uint64 `json:"last_epoch_started"`
	// The primary's log: its newest and oldest versions (epoch'seq).
	LastUpdate   string `json:"last_update"`
	LogTail      string `json:"log_tail"`
	Objects      uint64 `json:"objects"`
	Bytes        uint64 `json:"bytes"`
	Degraded     uint64 `json:"degraded"`
	Misplaced    uint64 `json:"misplaced"`
	Inconsistent uint64 `json:"inconsistent"`
	// Peers are the other members of the acting set, then the up set's
	// members outside it.
	Peers []PGQueryPeer `json:"peers"`
	// BlockedBy: while the PG is down or incomplete, the OSDs whose
	// answer would let peering go on (Ceph's blocked_by).
	BlockedBy []uint32 `json:"blocked_by"`
	// Recovering is a pull of the primary's own copy from a peer that is
	// ahead of it (before it may serve); nil when none runs.
	Recovering *PGQueryPull `json:"recovering,omitempty"`
}

// PGQueryPeer is one replica as the primary knows it.
type PGQueryPeer struct {
	OSD uint32 `json:"osd"`
	// LastUpdate is where its log ends by its last answer ("" before
	// one); State "caught up", "recovering" (behind, caught up from the
	// log or by a backfill) or "unknown" (not heard from since this
	// primary started).
	LastUpdate string `json:"last_update,omitempty"`
	State      string `json:"state"`
}

// PGQueryPull is a pull of the primary's copy from a peer.
type PGQueryPull struct {
	From uint32 `json:"from"`
	Have string `json:"have"`
	Want string `json:"want"`
}

// inspectPG answers MSG_PG_INSPECT for PG (pool, pg), which we must lead.
// It runs on the PG's shard, which owns its peering machine.
func (o *OSD) inspectPG(pool, pg uint32) (string, error) {
	sid, err := o.peerPG(pool, pg)
	if err != nil {
		return "", err
	}
	mp := o.Map()
	id := placement.PGIDOf(sid)
	if primary, ok := mp.Primary(pool, pg); !ok || primary != o.id {
		return "", ops.Errorf(osdpb.Status_WRONG_PRIMARY, "osd.%d is not the primary of pg %s (epoch %d)", o.id, id, mp.Epoch())
	}
	p, ok := mp.Pool(pool)
	if !ok {
		return "", ops.Errorf(osdpb.Status_STALE_EPOCH, "pg %s: no pool %d in our map (epoch %d)", id, pool, mp.Epoch())
	}
	ps, err := o.pgOf(sid)
	if err != nil {
		return "", err
	}
	st := o.pgStat(mp, p, pg)
	q := PGQuery{PGID: id.String(), State: st.State, Epoch: mp.Epoch(), Acting: mp.ActingSet(pool, pg), Up: mp.UpSet(pool, pg),
		Objects: st.Objects, Bytes: st.Bytes, Degraded: st.Degraded, Misplaced: st.Misplaced, Inconsistent: st.Inconsistent,
		Peers: []PGQueryPeer{}, BlockedBy: []uint32{}}
	last, tail, err := o.st.PGInfo(o.ctx, sid)
	if err != nil {
		return "", err
	}
	q.LastUpdate, q.LogTail = versionText(last), versionText(tail)
	if m := ps.m; m != nil {
		q.MachineEpoch = uint64(m.Epoch())
		q.IntervalStart = uint64(m.IntervalStart())
		q.LastEpochStarted = uint64(m.LastEpochStarted())
		for _, b := range m.Blocked() {
			q.BlockedBy = append(q.BlockedBy, uint32(b))
		}
		if r, ok := m.Recovering(); ok {
			q.Recovering = &PGQueryPull{From: uint32(r.From), Have: r.Have.String(), Want: r.Want.String()}
		}
	}
	for _, peer := range mp.Members(pool, pg) {
		if peer == o.id {
			continue
		}
		at, known := ps.peerAt(peer)
		e := PGQueryPeer{OSD: peer, State: "unknown"}
		if known {
			e.LastUpdate = versionText(at)
			e.State = "recovering"
			if last.GetSeq() == 0 || versionLE(last, at) {
				e.State = "caught up"
			}
		} else if last.GetSeq() == 0 {
			e.State = "caught up" // nothing written: nothing to be behind on
		}
		q.Peers = append(q.Peers, e)
	}
	out, err := json.Marshal(q)
	return string(out), err
}

// versionText is Ceph's epoch'seq form of v.
func versionText(v *osdpb.Version) string { return fmt.Sprintf("%d'%d", v.GetEpoch(), v.GetSeq()) }
