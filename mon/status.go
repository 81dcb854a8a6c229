package mon

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Health levels, Ceph's.
const (
	HealthOK   = "HEALTH_OK"
	HealthWarn = "HEALTH_WARN"
	HealthErr  = "HEALTH_ERR"
)

// Status is what the "status" command returns (as JSON), like `ceph
// status`: the cluster's health, its mons, OSD and PG counts and what
// recovery is doing.
type Status struct {
	FSID   string      `json:"fsid"`
	Health Health      `json:"health"`
	Mons   []MonStatus `json:"mons"`
	Epoch  uint64      `json:"epoch"`
	OSDs   OSDCounts   `json:"osds"`
	// Flags are the osdmap flags set (noout, noin).
	Flags []string   `json:"flags"`
	Pools []PoolInfo `json:"pools"`
	// PGs counts the PGs of every pool by state ("active+clean",
	// "undersized+degraded+peered", "unknown", ...); PGTotal is their sum.
	PGs              map[string]int `json:"pgs"`
	PGTotal          int            `json:"pg_total"`
	Objects          uint64         `json:"objects"`
	StoredBytes      uint64         `json:"stored_bytes"` // the objects' bytes, one copy each
	DegradedObjects  uint64         `json:"degraded_objects"`
	MisplacedObjects uint64         `json:"misplaced_objects"`
	// Objects whose copies differ, as the PGs' last deep scrubs compared
	// them (docs/osd.md, "Comparing the copies").
	InconsistentObjects uint64  `json:"inconsistent_objects,omitempty"`
	RecoveryBytesPerSec float64 `json:"recovery_bytes_per_sec"`
	OpsPerSec           float64 `json:"ops_per_sec"`
	// Client object bytes the up OSDs took in (puts) and sent (gets).
	WriteBytesPerSec float64 `json:"client_write_bytes_per_sec"`
	ReadBytesPerSec  float64 `json:"client_read_bytes_per_sec"`
	UsedBytes        uint64  `json:"used_bytes"`
	AvailBytes       uint64  `json:"avail_bytes"`
	// Versions counts the builds the daemons up run, by kind ("mon",
	// "osd"), as `ceph versions`: "unknown" for one of a build from
	// before daemons told theirs.
	Versions map[string]map[string]int `json:"versions"`
}

// UnknownVersion counts, in Status.Versions, the daemons of builds that
// do not tell theirs.
const UnknownVersion = "unknown"

// featureNames name the features of placement.Features, for OSD_OLD_BUILD.
var featureNames = []struct {
	bit  uint64
	name string
	does string
}{{placement.FeaturePGTemp, "pg_temp", "PGs being filled move off their old OSDs at once instead of being served by them until backfill ends"}}

// Health is the overall level and one human line per problem.
type Health struct {
	Status string   `json:"status"` // HEALTH_OK, HEALTH_WARN or HEALTH_ERR
	Checks []string `json:"checks"`
	// Detail ("health detail" only) is the checks by code, as `ceph
	// health detail`: each code once, in the order Checks first has it,
	// with its lines of Checks and what they are about.
	Detail []HealthCheck `json:"detail,omitempty"`
}

// HealthCheck is one kind of problem: Ceph's health check code (OSD_DOWN,
// PG_DEGRADED, ...), its severity, its lines of Checks (joined by "; "),
// and a line per OSD, PG or pool it is about.
type HealthCheck struct {
	Code     string   `json:"code"`
	Severity string   `json:"severity"` // HEALTH_WARN or HEALTH_ERR
	Summary  string   `json:"summary"`
	Detail   []string `json:"detail"`
}

// healthChecks collects a status's checks, errors before warnings.
type healthChecks struct{ errs, warns []HealthCheck }

func (h *healthChecks) err(code, summary string, detail []string) {
	h.errs = append(h.errs, newCheck(HealthErr, code, summary, detail))
}

func (h *healthChecks) warn(code, summary string, detail []string) {
	h.warns = append(h.warns, newCheck(HealthWarn, code, summary, detail))
}

func newCheck(severity, code, summary string, detail []string) HealthCheck {
	if detail == nil {
		detail = []string{} // JSON [], not null
	}
	return HealthCheck{Code: code, Severity: severity, Summary: summary, Detail: detail}
}

// pgLine is a PG's line in a health check's detail, as Ceph's.
func pgLine(v pgView) string {
	if v.stale {
		return fmt.Sprintf("pg %s is %s, acting %s, last reported by osd.%d at epoch %d", v.PGID, v.State, ActingList(v.Acting), v.lastFrom, v.ReportedEpoch)
	}
	return fmt.Sprintf("pg %s is %s, acting %s", v.PGID, v.State, ActingList(v.Acting))
}

// ActingList is an acting set as Ceph prints one: [2,0,1].
func ActingList(ids []uint32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// MonStatus is one registered mon.
type MonStatus struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
	// Up: registered now (its etcd session alive); a mon that ran once
	// and is not is down, until "mon rm" forgets it.
	Up     bool `json:"up"`
	Leader bool `json:"leader"`
	// Version is the build it runs (buildinfo.Version), while up; a mon
	// of a build from before it says none.
	Version string `json:"version,omitempty"`
}

// OSDCounts counts the map's OSDs.
type OSDCounts struct {
	Total int `json:"total"`
	Up    int `json:"up"`
	In    int `json:"in"`
}

// PoolInfo is one pool of the map.
type PoolInfo struct {
	ID      uint32 `json:"id"`
	Name    string `json:"name"`
	Size    uint32 `json:"size"`
	MinSize int    `json:"min_size"`
	PGCount uint32 `json:"pg_count"`
}

// poolInfos lists mp's pools ("osd pool ls"), in id order.
func poolInfos(mp *placement.Map) []PoolInfo {
	out := []PoolInfo{}
	for pool := range mp.Pools() {
		out = append(out, PoolInfo{ID: pool.Id, Name: pool.Name, Size: pool.Size, MinSize: placement.MinSize(pool), PGCount: pool.PgCount})
	}
	return out
}

// OSDTreeEntry is one OSD of "osd tree".
type OSDTreeEntry struct {
	ID          uint32  `json:"id"`
	Host        string  `json:"host"`
	Up          bool    `json:"up"`
	In          bool    `json:"in"`
	Weight      float64 `json:"weight"`
	PublicAddr  string  `json:"public_addr"`
	ClusterAddr string  `json:"cluster_addr"`
	UpFrom      uint64  `json:"up_from"`
	AutoOut     bool    `json:"auto_out,omitempty"`
	// NeverBooted: "osd create" gave it its id, but no daemon has booted
	// as it yet (Ceph's "new" OSD): it is down and out, holds no data,
	// has no addresses (PublicAddr and ClusterAddr are empty), and
	// "osd rm" removes it.
	NeverBooted bool `json:"never_booted,omitempty"`
	// LostAt is the epoch an operator declared it lost (`osd lost`), 0
	// for never; Lost says the loss stands: it has not booted since.
	LostAt uint64 `json:"lost_at,omitempty"`
	Lost   bool   `json:"lost,omitempty"`
	// Born is the epoch its store was made (its first boot on it), 0 when
	// the mon has not recorded one: what it held before is gone.
	Born uint64 `json:"born,omitempty"`
	// PGs counts the PGs (of every pool) whose acting set holds the OSD;
	// PrimaryPGs those it is primary of.
	PGs        int `json:"pgs"`
	PrimaryPGs int `json:"primary_pgs"`
	// Fullness is how full its data disk is against the map's ratios, as
	// its beacons said: "ok", "nearfull", "backfillfull", "full" or
	// "failsafe".
	Fullness string `json:"fullness"`
}

// beaconRecord is an OSD's last beacon as the leader stores it in etcd
// (stats/<id>, JSON), so that every mon can answer "status".
type beaconRecord struct {
	ID                  uint32     `json:"id"`
	AtUnixNano          int64      `json:"at_unix_nano"`
	Epoch               uint64     `json:"epoch"`
	PGs                 []pgRecord `json:"pgs"`
	UsedBytes           uint64     `json:"used_bytes"`
	AvailBytes          uint64     `json:"avail_bytes"`
	RecoveryBytes       uint64     `json:"recovery_bytes"`
	Ops                 uint64     `json:"ops"`
	RecoveryBytesPerSec float64    `json:"recovery_bytes_per_sec"`
	OpsPerSec           float64    `json:"ops_per_sec"`
	ReadBytes           uint64     `json:"client_read_bytes"`
	WriteBytes          uint64     `json:"client_write_bytes"`
	ReadBytesPerSec     float64    `json:"client_read_bytes_per_sec"`
	WriteBytesPerSec    float64    `json:"client_write_bytes_per_sec"`
	ScrubErrors         uint64     `json:"scrub_errors,omitempty"`
	// PGsHeld is how many data PG copies the OSD's store holds (strays
	// included); nil from a build that does not say.
	PGsHeld *uint32 `json:"pgs_held,omitempty"`
	// RelayedBy is the standby mon this beacon came through (the OSD
	// could not reach the leader); empty when it came to the leader.
	RelayedBy string `json:"relayed_by,omitempty"`
	// Slow ops (the beacon's): client ops in flight at the OSD for longer
	// than its complaint time, the oldest one's age and type, and the
	// writes it led that replicas' acks did not reach in time.
	SlowOps          uint32             `json:"slow_ops,omitempty"`
	OldestSlowOp     time.Duration      `json:"oldest_slow_op_nanos,omitempty"`
	OldestSlowOpType string             `json:"oldest_slow_op,omitempty"`
	OpComplaintTime  time.Duration      `json:"op_complaint_nanos,omitempty"`
	RepTimeouts      []repTimeoutRecord `json:"rep_timeouts,omitempty"`
	// HeldDown: the OSD, down, stays so by its own choice until then
	// (marked down too often); set from a down OSD's beacon (noteHeld).
	HeldDown *heldDownRecord `json:"held_down,omitempty"`
	// The rates are measured from this earlier beacon's counters, at
	// least rateWindow back.
	BaseAtUnixNano    int64  `json:"base_at_unix_nano"`
	BaseRecoveryBytes uint64 `json:"base_recovery_bytes"`
	BaseOps           uint64 `json:"base_ops"`
	BaseReadBytes     uint64 `json:"base_client_read_bytes"`
	BaseWriteBytes    uint64 `json:"base_client_write_bytes"`
	// The store's WAL syncs and the time they took, since the OSD
	// started, and the mean sync over the rate window: "osd perf"'s
	// commit latency. Zero from a build that does not say.
	WALSyncs         uint64        `json:"wal_syncs,omitempty"`
	WALSyncNanos     uint64        `json:"wal_sync_nanos,omitempty"`
	BaseWALSyncs     uint64        `json:"base_wal_syncs,omitempty"`
	BaseWALSyncNanos uint64        `json:"base_wal_sync_nanos,omitempty"`
	CommitLatency    time.Duration `json:"commit_latency_nanos,omitempty"`
}

type repTimeoutRecord struct {
	OSD     uint32        `json:"osd"`
	Writes  uint32        `json:"writes"`
	Timeout time.Duration `json:"timeout_nanos"`
}

type heldDownRecord struct {
	UntilUnixNano int64         `json:"until_unix_nano"`
	Markdowns     uint32        `json:"markdowns"`
	Period        time.Duration `json:"period_nanos"`
}

func heldDownOf(h *osdpb.HeldDown) *heldDownRecord {
	if h == nil {
		return nil
	}
	return &heldDownRecord{UntilUnixNano: h.UntilUnixNanos, Markdowns: h.Markdowns, Period: time.Duration(h.PeriodNanos)}
}

// writeThrough is what of r the status reads for health checks and PG
// states, as bytes to compare: a change in it is written to etcd at once
// (leadership.storeStats), where counters, space and rates wait.
func (r *beaconRecord) writeThrough() []byte {
	type pgSig struct {
		Pool, PG            uint32
		State               string
		Degraded, Misplaced bool
		Inconsistent        uint64
		Filling, Acting     []uint32
	}
	v := struct {
		Epoch            uint64
		PGs              []pgSig
		ScrubErrors      uint64
		PGsHeld          *uint32
		RelayedBy        string
		SlowOps          uint32
		OldestSlowOpType string
		RepTimeouts      []repTimeoutRecord
		HeldDown         *heldDownRecord
	}{Epoch: r.Epoch, ScrubErrors: r.ScrubErrors, PGsHeld: r.PGsHeld, RelayedBy: r.RelayedBy, SlowOps: r.SlowOps,
		OldestSlowOpType: r.OldestSlowOpType, RepTimeouts: r.RepTimeouts, HeldDown: r.HeldDown}
	for _, p := range r.PGs {
		v.PGs = append(v.PGs, pgSig{Pool: p.Pool, PG: p.PG, State: p.State, Degraded: p.Degraded > 0, Misplaced: p.Misplaced > 0,
			Inconsistent: p.Inconsistent, Filling: p.Filling, Acting: p.Acting})
	}
	js, _ := json.Marshal(v) // of plain fields: never fails
	return js
}

// relayedBy is the standby r came through ("" for none, or no record).
func (r *beaconRecord) relayedBy() string {
	if r == nil {
		return ""
	}
	return r.RelayedBy
}

// rateWindow is the shortest span a rate is measured over: beacons come
// early now and then (a map change, a re-boot), and a burst divided by a
// few milliseconds is no rate anyone can use.
const rateWindow = time.Second

type pgRecord struct {
	Pool      uint32 `json:"pool"`
	PG        uint32 `json:"pg"`
	State     string `json:"state"`
	Objects   uint64 `json:"objects"`
	Degraded  uint64 `json:"degraded"`
	Misplaced uint64 `json:"misplaced"`
	Epoch     uint64 `json:"epoch"`
	// Inconsistent objects the PG's last deep scrub compare found.
	Inconsistent uint64 `json:"inconsistent,omitempty"`
	Bytes        uint64 `json:"bytes,omitempty"`
	// Filling are the acting members being backfilled: no whole copy yet.
	Filling []uint32 `json:"filling,omitempty"`
	// Acting is the PG's acting set when the report was taken in (at the
	// mon's epoch then), for the status of a PG that goes stale: Ceph's
	// "last acting".
	Acting []uint32 `json:"acting,omitempty"`
}

// newBeaconRecord makes the record of beacon b received at now; prev, if
// not nil, is the OSD's previous record, for the rates.
func newBeaconRecord(b *osdpb.MonBeacon, now time.Time, prev *beaconRecord) *beaconRecord {
	r := &beaconRecord{
		ID: b.Id, AtUnixNano: now.UnixNano(), Epoch: b.Epoch,
		UsedBytes: b.UsedBytes, AvailBytes: b.AvailBytes, RecoveryBytes: b.RecoveryBytes, Ops: b.Ops,
		ReadBytes: b.ClientReadBytes, WriteBytes: b.ClientWriteBytes, ScrubErrors: b.ScrubErrors, PGsHeld: b.PgsHeld,
		SlowOps: b.SlowOps, OldestSlowOp: time.Duration(b.OldestSlowOpNanos), OldestSlowOpType: b.OldestSlowOp,
		OpComplaintTime: time.Duration(b.OpComplaintNanos), HeldDown: heldDownOf(b.HeldDown),
		WALSyncs: b.WalSyncs, WALSyncNanos: b.WalSyncNanos,
	}
	for _, t := range b.RepTimeouts {
		r.RepTimeouts = append(r.RepTimeouts, repTimeoutRecord{OSD: t.Osd, Writes: t.Writes, Timeout: time.Duration(t.TimeoutNanos)})
	}
	for _, s := range b.Pgs {
		if s == nil {
			continue
		}
		r.PGs = append(r.PGs, pgRecord{Pool: s.Pool, PG: s.Pg, State: s.State, Objects: s.Objects, Degraded: s.Degraded, Misplaced: s.Misplaced, Epoch: s.Epoch,
			Inconsistent: s.Inconsistent, Bytes: s.Bytes, Filling: s.Filling})
	}
	r.BaseAtUnixNano, r.BaseRecoveryBytes, r.BaseOps = r.AtUnixNano, r.RecoveryBytes, r.Ops
	r.BaseReadBytes, r.BaseWriteBytes = r.ReadBytes, r.WriteBytes
	r.BaseWALSyncs, r.BaseWALSyncNanos = r.WALSyncs, r.WALSyncNanos
	if prev == nil {
		return r
	}
	base := *prev
	if prev.BaseAtUnixNano != 0 {
		base.AtUnixNano, base.RecoveryBytes, base.Ops = prev.BaseAtUnixNano, prev.BaseRecoveryBytes, prev.BaseOps
		base.ReadBytes, base.WriteBytes = prev.BaseReadBytes, prev.BaseWriteBytes
		base.WALSyncs, base.WALSyncNanos = prev.BaseWALSyncs, prev.BaseWALSyncNanos
	}
	// Counters restart with the OSD: a drop is a restart, not a negative
	// rate; the rates start again from this beacon.
	if r.RecoveryBytes < base.RecoveryBytes || r.Ops < base.Ops || r.ReadBytes < base.ReadBytes || r.WriteBytes < base.WriteBytes ||
		r.WALSyncs < base.WALSyncs || r.WALSyncNanos < base.WALSyncNanos {
		return r
	}
	elapsed := time.Duration(r.AtUnixNano - base.AtUnixNano)
	if elapsed < rateWindow {
		r.RecoveryBytesPerSec, r.OpsPerSec = prev.RecoveryBytesPerSec, prev.OpsPerSec
		r.ReadBytesPerSec, r.WriteBytesPerSec = prev.ReadBytesPerSec, prev.WriteBytesPerSec
		r.CommitLatency = prev.CommitLatency
		r.BaseAtUnixNano, r.BaseRecoveryBytes, r.BaseOps = base.AtUnixNano, base.RecoveryBytes, base.Ops
		r.BaseReadBytes, r.BaseWriteBytes = base.ReadBytes, base.WriteBytes
		r.BaseWALSyncs, r.BaseWALSyncNanos = base.WALSyncs, base.WALSyncNanos
		return r
	}
	dt := elapsed.Seconds()
	r.RecoveryBytesPerSec = float64(r.RecoveryBytes-base.RecoveryBytes) / dt
	r.OpsPerSec = float64(r.Ops-base.Ops) / dt
	r.ReadBytesPerSec = float64(r.ReadBytes-base.ReadBytes) / dt
	r.WriteBytesPerSec = float64(r.WriteBytes-base.WriteBytes) / dt
	if n := r.WALSyncs - base.WALSyncs; n > 0 {
		// The mean over the window; none synced: no latency to say.
		r.CommitLatency = time.Duration((r.WALSyncNanos - base.WALSyncNanos) / n)
	}
	return r
}

// statusInput is everything computeStatus looks at.
type statusInput struct {
	mp      *placement.Map
	beacons map[uint32]*beaconRecord // by OSD id
	mons    []MonStatus
	now     time.Time
	// fresh is how recent a beacon must be for its rates to count.
	fresh time.Duration
	// past are maps at older epochs the PG reports were made at (not
	// necessarily all): a report of an epoch whose map gave the PG the
	// same acting set and pool sizes still says its state (pgViews).
	past map[uint64]*placement.Map
	// detail: fill Health.Detail ("health detail").
	detail bool
	// etcdMembers is the etcd cluster's size, etcdDown a line for each
	// member that did not answer (etcdHealth).
	etcdMembers int
	etcdDown    []string
}

// pgKey names one PG of one pool.
type pgKey struct{ pool, pg uint32 }

// computeStatus derives the cluster status from the map and the up OSDs'
// beacons; each PG's state is pgViews'.
func computeStatus(in statusInput) *Status {
	mp := in.mp
	st := &Status{FSID: mp.FSID(), Epoch: mp.Epoch(), Mons: in.mons, PGs: map[string]int{}}
	if st.Mons == nil {
		st.Mons = []MonStatus{}
	}
	var downIn []string // Ceph's OSD_DOWN counts OSDs down and still in: one marked out is handled
	for o := range mp.OSDs() {
		st.OSDs.Total++
		if o.Up {
			st.OSDs.Up++
		}
		if o.In {
			st.OSDs.In++
			if !o.Up {
				line := fmt.Sprintf("osd.%d is down", o.Id)
				if o.Host != "" {
					line = fmt.Sprintf("osd.%d (host %s) is down", o.Id, o.Host)
				}
				if lossStands(o) {
					line += " (lost)"
				}
				if h := in.beacons[o.Id].heldDown(in.now); h != nil {
					// Its own doing, and only its log said so: the
					// operator's next step is its cluster network.
					line += fmt.Sprintf(" (held down by itself until %s: marked down %d times within %v while running; check its cluster network, or restart it to boot at once)",
						time.Unix(0, h.UntilUnixNano).UTC().Format(time.TimeOnly), h.Markdowns, h.Period)
				}
				downIn = append(downIn, line)
			}
		}
	}
	var relayed []string // fresh beacons that came through a standby
	var slow slowOps
	for _, b := range upBeacons(mp, in.beacons) {
		st.UsedBytes += b.UsedBytes
		st.AvailBytes += b.AvailBytes
		if in.now.Sub(time.Unix(0, b.AtUnixNano)) <= in.fresh {
			if b.RelayedBy != "" {
				relayed = append(relayed, fmt.Sprintf("osd.%d reaches the leader only through %s", b.ID, b.RelayedBy))
			}
			slow.add(mp, b)
			st.RecoveryBytesPerSec += b.RecoveryBytesPerSec
			st.OpsPerSec += b.OpsPerSec
			st.ReadBytesPerSec += b.ReadBytesPerSec
			st.WriteBytesPerSec += b.WriteBytesPerSec
		}
	}

	var (
		checks     healthChecks
		down       int // no OSD up, never reported
		stale      int // no OSD up: as last reported
		belowMin   int // fewer than min_size up
		filling    int // min_size up, fewer whole: the rest being backfilled
		undersized int // fewer than size up (belowMin included)
		unknown    int // no current report from the primary
		damagedPGs int // reported inconsistent by their primary
		broken     = map[string]int{}
		tokens     = map[string]int{}
		// With in.detail, the lines of the PGs each check is about, by
		// what counts them: "down", "broken:STATE", "token:WORD", ...
		pgLines = map[string][]string{}
	)
	about := func(kind string, v pgView) {
		if in.detail {
			pgLines[kind] = append(pgLines[kind], pgLine(v))
		}
	}
	noOSDs := st.OSDs.Total == 0
	st.Pools = poolInfos(mp)
	for v := range pgViews(in) {
		st.PGTotal++
		if v.counted {
			st.Objects += v.Objects
			st.StoredBytes += v.Bytes
			st.DegradedObjects += v.Degraded
			st.MisplacedObjects += v.Misplaced
			st.InconsistentObjects += v.Inconsistent
			if v.Inconsistent > 0 {
				damagedPGs++
				about("damaged", v)
			}
			if v.Degraded > 0 && in.detail {
				pgLines["degraded objects"] = append(pgLines["degraded objects"], fmt.Sprintf("pg %s has %d objects degraded, acting %s", v.PGID, v.Degraded, ActingList(v.Acting)))
			}
		}
		switch {
		case v.unknown || v.fresh && v.reported == "unknown":
			// No report, or its primary's: it has no state for the PG
			// yet. One check either way, not two for one word.
			unknown++
			about("unknown", v)
		case v.down:
			down++
			about("down", v)
		case v.stale:
			stale++
			about("stale", v)
		case v.belowMin:
			belowMin++
			about("belowMin", v)
		}
		if v.undersized {
			undersized++
			about("undersized", v)
		}
		if v.fresh && !v.belowMin && hasToken(v.reported, "peered") {
			filling++
			about("filling", v)
		}
		if v.belowMin {
			// undersized+degraded+peered, the mon's own: inactive above,
			// and degraded as Ceph's PG_DEGRADED counts it.
			tokens["degraded"]++
			about("token:degraded", v)
		}
		if v.broken {
			broken[v.reported]++
			about("broken:"+v.reported, v)
		} else if v.fresh && v.reported != "active+clean" && v.reported != "unknown" && !v.belowMin {
			for _, t := range strings.Split(v.reported, "+") {
				// inconsistent is an error of its own (PG_DAMAGED below).
				// peered (inactive) is counted above, as an error.
				// remapped with nothing misplaced (an out OSD kept acting for
				// want of a replacement, or an entry about to go) is no
				// problem: Ceph warns only of the misplaced objects.
				if t == "remapped" && v.Misplaced == 0 {
					continue
				}
				if t != "active" && t != "clean" && t != "undersized" && t != "inconsistent" && t != "peered" && t != "" {
					tokens[t]++
					about("token:"+t, v)
				}
			}
		}
		st.PGs[v.State]++
	}

	if down > 0 {
		checks.err("PG_AVAILABILITY", fmt.Sprintf("%d pgs down (no OSD up to serve them)", down), pgLines["down"])
	}
	if stale > 0 {
		checks.err("PG_AVAILABILITY", fmt.Sprintf("%d pgs stale (no OSD up to serve them; state and objects as last reported)", stale), pgLines["stale"])
	}
	if belowMin > 0 {
		checks.err("PG_AVAILABILITY", fmt.Sprintf("%d pgs inactive: fewer than min_size OSDs up (undersized+degraded+peered)", belowMin), pgLines["belowMin"])
	}
	if filling > 0 {
		checks.err("PG_AVAILABILITY", fmt.Sprintf("%d pgs inactive: fewer than min_size members hold a whole copy, the others being backfilled (peered)", filling), pgLines["filling"])
	}
	for _, s := range sortedKeys(broken) {
		checks.err("PG_AVAILABILITY", fmt.Sprintf("%d pgs %s", broken[s], s), pgLines["broken:"+s])
	}
	if noOSDs {
		checks.warn("OSD_NONE", "no osds", nil)
	} else if acting, pool := metaPG(mp); pool != nil {
		// The bucket records live on every OSD up and in (no PG of a
		// pool counts them): fewer than min_size and bucket creates and
		// deletes fail; fewer than the pool's size, fewer copies.
		line := fmt.Sprintf("pg meta (the bucket records) has %d OSDs up and in, acting %s", len(acting), ActingList(acting))
		switch minSize := placement.MinSize(pool); {
		case len(acting) < minSize:
			checks.err("PG_AVAILABILITY", fmt.Sprintf("pg meta (the bucket records) inactive: %d of min_size %d OSDs up and in; bucket creates and deletes fail", len(acting), minSize), []string{line})
		case len(acting) < int(pool.Size):
			checks.warn("PG_DEGRADED", fmt.Sprintf("pg meta (the bucket records) undersized: %d OSDs up and in, fewer than size %d", len(acting), pool.Size), []string{line})
		}
	}
	var single []string
	for _, p := range st.Pools {
		if p.Size == 1 {
			single = append(single, p.Name)
		}
	}
	if len(single) > 0 {
		// Ceph's POOL_NO_REDUNDANCY: one lost disk loses data.
		var lines []string
		for _, name := range single {
			lines = append(lines, fmt.Sprintf("pool '%s' has no replicas configured", name))
		}
		checks.warn("POOL_NO_REDUNDANCY", fmt.Sprintf("%d pool(s) have no replicas configured (size 1): %s", len(single), strings.Join(single, ", ")), lines)
	}
	st.Versions = map[string]map[string]int{"mon": {}, "osd": {}}
	var oldBuild []string
	lacking := map[string]bool{}
	var have uint64 // features some up OSD has
	for o := range mp.OSDs() {
		if o.Up {
			st.Versions["osd"][cmp.Or(o.Version, UnknownVersion)]++
			have |= o.Features
		}
	}
	for o := range mp.OSDs() {
		for _, f := range featureNames {
			if o.Up && have&f.bit != 0 && o.Features&f.bit == 0 {
				oldBuild = append(oldBuild, fmt.Sprintf("osd.%d runs a build without %s (%s)", o.Id, f.name, cmp.Or(o.Version, "a build from before versions were told")))
				lacking[f.name+" is off: "+f.does] = true
			}
		}
	}
	if n := len(oldBuild); n > 0 {
		// Mid-upgrade: the mon uses a feature only once every up OSD has
		// it (placement.Map.AllUpHave), so the OSDs not yet upgraded turn
		// it off for all.
		checks.warn("OSD_OLD_BUILD", fmt.Sprintf("%d osds run an older build than the others; while they are up, %s: upgrade them", n,
			strings.Join(slices.Sorted(maps.Keys(lacking)), "; ")), oldBuild)
	}
	var monsDown []string
	for _, m := range st.Mons {
		if m.Up {
			st.Versions["mon"][cmp.Or(m.Version, UnknownVersion)]++
		} else {
			monsDown = append(monsDown, fmt.Sprintf("mon.%s (%s) is down", m.Name, m.Addr))
		}
	}
	if n := len(monsDown); n > 0 {
		// Ceph's MON_DOWN: one more loss may cost the etcd quorum, and
		// with it every map change.
		checks.warn("MON_DOWN", fmt.Sprintf("%d/%d mons down", n, len(st.Mons)), monsDown)
	}
	if n := len(in.etcdDown); n > 0 {
		// The mons answer from the members left, so nothing else shows
		// it: one more loss and no map changes (Ceph's MON_DOWN says
		// this of its own quorum).
		checks.warn("ETCD_MEMBER_DOWN", fmt.Sprintf("%d/%d etcd members down: one more loss stops every map change", n, in.etcdMembers), in.etcdDown)
	}
	if len(st.Mons) > 0 && !slices.ContainsFunc(st.Mons, func(m MonStatus) bool { return m.Leader }) {
		// Ceph answers nothing without a quorum; a mon here answers from
		// etcd meanwhile, so it says that what it shows may be old: no
		// mon marks a dead OSD down (or out) until one leads again.
		checks.warn("MON_NO_LEADER", "no mon leads (an election is under way): OSD failures are not acted on, and OSD and PG states may be stale", nil)
	}
	if n := len(relayed); n > 0 {
		// The leader cannot reach these OSDs (their beacons came through
		// a standby, relayBeacon): nothing fails yet, but a boot of
		// theirs must reach the leader itself.
		checks.warn("MON_LEADER_UNREACHABLE", fmt.Sprintf("%d osds reach the leader mon only through standby mons", n), relayed)
	}
	slow.checks(&checks)
	st.Flags = append([]string{}, mp.SetFlags()...)
	if f := st.Flags; len(f) > 0 {
		// Ceph's OSDMAP_FLAGS: a flag left set after maintenance (noout)
		// quietly keeps a dead disk's PGs degraded.
		checks.warn("OSDMAP_FLAGS", strings.Join(f, ",")+" flag(s) set", nil)
	}
	if n := len(downIn); n > 0 {
		checks.warn("OSD_DOWN", fmt.Sprintf("%d osds down", n), downIn)
	}
	if undersized > 0 {
		checks.warn("PG_DEGRADED", fmt.Sprintf("%d pgs undersized", undersized), pgLines["undersized"])
	}
	if unknown > 0 && !noOSDs {
		checks.warn("PG_AVAILABILITY", fmt.Sprintf("%d pgs unknown (no state from their primary at epoch %d yet)", unknown, mp.Epoch()), pgLines["unknown"])
	}
	for _, t := range sortedKeys(tokens) {
		checks.warn(tokenCheck(t), fmt.Sprintf("%d pgs %s", tokens[t], t), pgLines["token:"+t])
	}
	if st.DegradedObjects > 0 {
		checks.warn("PG_DEGRADED", fmt.Sprintf("%d objects degraded", st.DegradedObjects), pgLines["degraded objects"])
	}
	if st.MisplacedObjects > 0 {
		// Ceph's OBJECT_MISPLACED: copies still to move to a PG's new
		// members while its old ones serve (pg_temp); none is missing.
		checks.warn("OBJECT_MISPLACED", fmt.Sprintf("%d objects misplaced", st.MisplacedObjects), nil)
	}
	fullnessChecks(&checks, mp, in.beacons)
	scrubErrorsCheck(&checks, mp, in.beacons)
	if damagedPGs > 0 {
		// Ceph's PG_DAMAGED: copies differ; "osprey pg list-inconsistent"
		// names the objects, "osprey pg repair" makes them agree.
		checks.err("PG_DAMAGED", fmt.Sprintf("Possible data damage: %d pgs inconsistent", damagedPGs), pgLines["damaged"])
	}
	all := append(checks.errs, checks.warns...)
	switch {
	case len(checks.errs) > 0:
		st.Health.Status = HealthErr
	case len(checks.warns) > 0:
		st.Health.Status = HealthWarn
	default:
		st.Health.Status = HealthOK
	}
	st.Health.Checks = make([]string, len(all))
	for i, c := range all {
		st.Health.Checks[i] = c.Summary
	}
	if in.detail {
		st.Health.Detail = byCode(all)
	}
	return st
}

// byCode merges checks of one code into one, as Ceph keys its checks by
// code: the worst severity, the summaries joined by "; ", each detail line
// once, in the order they came.
func byCode(checks []HealthCheck) []HealthCheck {
	var out []HealthCheck
	for _, c := range checks {
		i := slices.IndexFunc(out, func(o HealthCheck) bool { return o.Code == c.Code })
		if i < 0 {
			c.Detail = slices.Clone(c.Detail)
			out = append(out, c)
			continue
		}
		m := &out[i]
		if c.Severity == HealthErr {
			m.Severity = HealthErr
		}
		m.Summary += "; " + c.Summary
		for _, d := range c.Detail {
			if !slices.Contains(m.Detail, d) {
				m.Detail = append(m.Detail, d)
			}
		}
	}
	return out
}

// tokenCheck is the code of the check that counts PGs in state word t:
// Ceph's PG_DEGRADED for degraded copies, PG_AVAILABILITY for PGs that
// do not serve yet, OBJECT_MISPLACED for misplaced ones, else PG_ and the
// word (PG_RECOVERING, PG_BACKFILLING, ...).
func tokenCheck(t string) string {
	switch t {
	case "degraded":
		return "PG_DEGRADED"
	case "peering", "activating", "stale", "down", "incomplete", "laggy", "wait":
		return "PG_AVAILABILITY"
	case "remapped", "misplaced":
		return "OBJECT_MISPLACED"
	}
	return "PG_" + strings.ToUpper(strings.ReplaceAll(t, "-", "_"))
}

// fullnessChecks adds Ceph's OSD_FULL (an error: writes to the OSD's PGs
// fail), OSD_BACKFILLFULL and OSD_NEARFULL (warnings), each naming the up
// OSDs and how full their disks are.
func fullnessChecks(h *healthChecks, mp *placement.Map, beacons map[uint32]*beaconRecord) {
	byLevel := map[osdpb.Fullness][]string{}
	failsafe := false
	for o := range mp.OSDs() {
		if !o.Up || o.Fullness == osdpb.Fullness_FULLNESS_NONE {
			continue
		}
		name := fmt.Sprintf("osd.%d", o.Id)
		used := ""
		if b := currentBeacon(o, beacons[o.Id]); b != nil && b.UsedBytes+b.AvailBytes > 0 {
			used = fmt.Sprintf("%.1f%% used", 100*float64(b.UsedBytes)/float64(b.UsedBytes+b.AvailBytes))
		}
		if o.Fullness == osdpb.Fullness_FULLNESS_FAILSAFE {
			// Its failsafe ratio, or (a small disk) the room its store
			// keeps for itself, reached before the map's full ratio: say
			// which, or the ratio named would contradict the percentage.
			failsafe = true
			used = strings.TrimPrefix(used+"; at its failsafe: over its failsafe ratio, or its store's reserved room reached", "; ")
		}
		if used != "" {
			name += " (" + used + ")"
		}
		lvl := min(o.Fullness, osdpb.Fullness_FULLNESS_FULL) // failsafe is full, and worse
		byLevel[lvl] = append(byLevel[lvl], name)
	}
	near, back, full := mp.FullRatios()
	check := func(lvl osdpb.Fullness, ratio float64, add func(code, summary string, detail []string), code, tail string) {
		names := byLevel[lvl]
		if len(names) == 0 {
			return
		}
		word := ops.FullnessWord(lvl)
		lines := make([]string, len(names))
		for i, n := range names {
			lines[i] = n + " is " + word
		}
		over := fmt.Sprintf("over %s_ratio %g", word, ratio)
		if lvl == osdpb.Fullness_FULLNESS_FULL && failsafe {
			over += ", or at their failsafe"
		}
		add(code, fmt.Sprintf("%d %s osd(s) (%s): %s%s", len(names), word, over, strings.Join(names, ", "), tail), lines)
	}
	check(osdpb.Fullness_FULLNESS_FULL, full, h.err, "OSD_FULL", "; writes to their PGs fail")
	check(osdpb.Fullness_FULLNESS_BACKFILLFULL, back, h.warn, "OSD_BACKFILLFULL", "")
	check(osdpb.Fullness_FULLNESS_NEARFULL, near, h.warn, "OSD_NEARFULL", "")
}

// scrubErrorsCheck adds Ceph's OSD_SCRUB_ERRORS, an error: objects the
// up OSDs' deep scrubs found damaged that no replica could repair.
func scrubErrorsCheck(h *healthChecks, mp *placement.Map, beacons map[uint32]*beaconRecord) {
	var total uint64
	var names, lines []string
	for o := range mp.OSDs() {
		if b := currentBeacon(o, beacons[o.Id]); b != nil && b.ScrubErrors > 0 {
			total += b.ScrubErrors
			names = append(names, fmt.Sprintf("osd.%d (%d)", o.Id, b.ScrubErrors))
			lines = append(lines, fmt.Sprintf("osd.%d found %d damaged objects no replica could repair", o.Id, b.ScrubErrors))
		}
	}
	if total > 0 {
		h.err("OSD_SCRUB_ERRORS", fmt.Sprintf("%d scrub errors: damaged objects no replica could repair on %s", total, strings.Join(names, ", ")), lines)
	}
}

// hasToken reports whether the "+"-joined state has one of the words.
func hasToken(state string, words ...string) bool {
	for _, t := range strings.Split(state, "+") {
		if slices.Contains(words, t) {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// osdTree lists the OSDs of mp with their PG counts.
func osdTree(mp *placement.Map) []OSDTreeEntry {
	var out []OSDTreeEntry
	idx := map[uint32]int{}
	for o := range mp.OSDs() {
		idx[o.Id] = len(out)
		e := OSDTreeEntry{
			ID: o.Id, Host: o.Host, Up: o.Up, In: o.In, Weight: o.Weight,
			PublicAddr: o.PublicAddr, ClusterAddr: o.ClusterAddr, UpFrom: o.UpFrom, AutoOut: o.AutoOut,
			Fullness: ops.FullnessWord(o.Fullness),
		}
		if neverBooted(o) {
			e.PublicAddr, e.ClusterAddr, e.NeverBooted = "", "", true
		}
		e.LostAt, e.Lost, e.Born = o.LostAt, !o.Up && lossStands(o), o.Born
		out = append(out, e)
	}
	for pool := range mp.Pools() {
		for pg := range pool.PgCount {
			for i, id := range mp.ActingSet(pool.Id, pg) {
				e := &out[idx[id]]
				e.PGs++
				if i == 0 {
					e.PrimaryPGs++
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b OSDTreeEntry) int { return cmp.Compare(a.ID, b.ID) })
	if out == nil {
		out = []OSDTreeEntry{}
	}
	return out
}

// heldDown is r's hold if it still runs at now (nil for none, or no record).
func (r *beaconRecord) heldDown(now time.Time) *heldDownRecord {
	if r == nil || r.HeldDown == nil || now.UnixNano() >= r.HeldDown.UntilUnixNano {
		return nil
	}
	return r.HeldDown
}

// slowOps gathers the up OSDs' fresh reports of slow ops for SLOW_OPS.
type slowOps struct {
	ops      int
	oldest   time.Duration
	daemons  []uint32 // OSDs with ops in flight too long
	lines    []string
	writes   int
	replicas []uint32 // replicas whose acks came too late, by id
	repLines []string
}

func (s *slowOps) add(mp *placement.Map, b *beaconRecord) {
	if b.SlowOps > 0 {
		s.ops += int(b.SlowOps)
		s.oldest = max(s.oldest, b.OldestSlowOp)
		s.daemons = append(s.daemons, b.ID)
		s.lines = append(s.lines, fmt.Sprintf("osd.%d: %d ops in flight for more than %v, the oldest (%s) for %v",
			b.ID, b.SlowOps, b.OpComplaintTime, b.OldestSlowOpType, b.OldestSlowOp.Round(time.Second)))
	}
	for _, t := range b.RepTimeouts {
		if info, ok := mp.OSD(t.OSD); !ok || !info.Up {
			// Marked down since: OSD_DOWN says it, and its PGs have moved
			// on without it.
			continue
		}
		s.writes += int(t.Writes)
		if i, found := slices.BinarySearch(s.replicas, t.OSD); !found {
			s.replicas = slices.Insert(s.replicas, i, t.OSD)
		}
		s.repLines = append(s.repLines, fmt.Sprintf("osd.%d: %d writes in the last minute failed after waiting %v for osd.%d's ack (osd.%d slow, its disk stalled, or the cluster network between them losing packets)",
			b.ID, t.Writes, t.Timeout, t.OSD, t.OSD))
	}
}

// checks adds SLOW_OPS, worded as Ceph's, when there is any.
func (s *slowOps) checks(h *healthChecks) {
	if s.ops > 0 {
		h.warn("SLOW_OPS", fmt.Sprintf("%d slow ops, oldest one blocked for %d sec, daemons [%s] have slow ops.",
			s.ops, int(s.oldest.Seconds()), ops.OSDList(s.daemons)), s.lines)
	}
	if s.writes > 0 {
		h.warn("SLOW_OPS", fmt.Sprintf("%d writes failed in the last minute waiting for replica acks from [%s]",
			s.writes, ops.OSDList(s.replicas)), s.repLines)
	}
}
