package pg

import "strings"

// State is a PG's state as Ceph reports it: a set of flags printed
// "active+clean". Only a primary's state is the PG's; a replica or stray
// reports only its role.
type State uint16

// The flags, in the order Ceph prints them.
const (
	// StateActive: peered with MinSize members; serving.
	StateActive State = 1 << iota
	// StateClean: active, Size members, all at the primary's version.
	StateClean
	// StateRecovering: pushes to replicas are under way.
	StateRecovering
	// StateBackfilling: a push is filling a member that held no whole
	// copy (Backfilling); shown instead of StateRecovering.
	StateBackfilling
	// StateDown: an earlier interval that may hold acknowledged writes has
	// no reachable member; not serving.
	StateDown
	// StateUndersized: fewer than Size members.
	StateUndersized
	// StateDegraded: some copy is missing or behind.
	StateDegraded
	// StateRemapped: the acting set is not the up set (a pg_temp entry):
	// the old members serve while the new ones are filled.
	StateRemapped
	// StateIncomplete: the machine lacks maps it needs; not serving.
	StateIncomplete
	// StatePeering: gathering infos or pulling the authoritative log.
	StatePeering
	// StatePeered: peered, but with fewer than MinSize members that
	// hold a whole copy (too few up, or some being backfilled); not
	// serving writes.
	StatePeered
	// StateReplica and StateStray are not Ceph flags: the state of a
	// machine that is a replica of the current interval, or not in it.
	StateReplica
	StateStray
)

var stateNames = [...]string{
	"active", "clean", "recovering", "backfilling", "down", "undersized", "degraded", "remapped",
	"incomplete", "peering", "peered", "replica", "stray",
}

// String prints s as Ceph does ("active+undersized+degraded"); "unknown"
// before the first map.
func (s State) String() string {
	if s == 0 {
		return "unknown"
	}
	var b strings.Builder
	for i, name := range stateNames {
		if s&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte('+')
			}
			b.WriteString(name)
		}
	}
	return b.String()
}

// Role is an OSD's part in a PG in the current map.
type Role uint8

const (
	RoleUnknown Role = iota // no map yet
	RolePrimary
	RoleReplica
	RoleStray // not in the acting set
)

func (r Role) String() string {
	return [...]string{"unknown", "primary", "replica", "stray"}[r]
}

// State returns the machine's state now.
func (p *PG) State() State {
	switch p.Role() {
	case RoleUnknown:
		return 0
	case RoleReplica:
		return StateReplica
	case RoleStray:
		return StateStray
	}
	switch p.phase {
	case phaseDown:
		return StateDown
	case phaseIncomplete:
		return StateIncomplete
	case phaseActive:
	default:
		return StatePeering
	}
	var s State
	if p.complete() >= p.cur.minSize {
		s |= StateActive
	} else {
		s |= StatePeered
	}
	if len(p.cur.acting) < p.cur.size {
		s |= StateUndersized | StateDegraded
	}
	behind := false // a member to push to: not clean
	for id, pr := range p.peers {
		// A member being filled outside the acting set lacks copies
		// that are misplaced, not missing: the acting set has them.
		degraded := StateDegraded
		if !p.cur.has(id) {
			degraded = 0
		}
		behind = behind || pr.push != pushNone
		switch {
		case pr.push == pushInFlight && pr.backfill:
			s |= StateBackfilling | degraded
		case pr.push == pushInFlight:
			s |= StateRecovering | degraded
		case pr.push == pushFailed:
			s |= degraded
		}
	}
	if s&StateBackfilling != 0 {
		s &^= StateRecovering // as Ceph, and the daemon's report, say one
	}
	if s == StateActive && !behind {
		s |= StateClean
	}
	if p.cur.up != nil {
		s |= StateRemapped
	}
	return s
}
