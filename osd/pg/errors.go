package pg

import (
	"errors"
	"fmt"
)

// Why a PG does not serve (CanServe) or refuses a peer (RefusedError). All
// work with errors.Is.
var (
	// ErrPeering: the PG is gathering infos or pulling the authoritative
	// log. Retry shortly.
	ErrPeering = errors.New("pg: peering")
	// ErrDown: every member of an earlier interval that may hold
	// acknowledged writes is unreachable. Retry once one is back.
	ErrDown = errors.New("pg: down")
	// ErrIncomplete: a peer went active in an epoch older than the first map
	// this machine was given, so it cannot tell whom to ask about the
	// intervals between. The daemon must feed older maps (a new machine,
	// from that epoch).
	ErrIncomplete = errors.New("pg: incomplete: maps missing")
	// ErrBelowMinSize: fewer than MinSize members of the acting set hold
	// a whole copy (members down, or being backfilled).
	ErrBelowMinSize = errors.New("pg: fewer than min_size members")
	// ErrNotPrimary: this OSD is not the primary of the current interval
	// (CanServe), or the sender is not (RefusedError).
	ErrNotPrimary = errors.New("pg: not the primary")
	// ErrNotReplica: a RepOp reached an OSD that is not a replica of the
	// current interval (a stray, or the primary itself).
	ErrNotReplica = errors.New("pg: not a replica")
	// ErrStaleEpoch: the sender's epoch is older than the current interval;
	// it must fetch the newer map (RefusedError.Known).
	ErrStaleEpoch = errors.New("pg: stale epoch")
	// ErrFutureEpoch: the sender's epoch is newer than this OSD's map; the
	// receiving daemon must fetch it and ask the machine again.
	ErrFutureEpoch = errors.New("pg: epoch newer than our map")
)

// Errors from Step: the daemon broke the driving contract.
var (
	// ErrMapGap: an AdvanceMap skipped an epoch.
	ErrMapGap = errors.New("pg: map epoch skipped")
	// ErrInvalidEvent: an event the machine cannot take (a map with a bad
	// size or a repeated OSD).
	ErrInvalidEvent = errors.New("pg: invalid event")
)

// RefusedError is why AcceptRepOp or AnswerQuery turned a peer away.
type RefusedError struct {
	PG    ID
	From  OSDID
	Epoch Epoch // the epoch the sender stamped
	Known Epoch // this OSD's newest map epoch
	// Reason is ErrStaleEpoch, ErrFutureEpoch, ErrNotPrimary or
	// ErrNotReplica.
	Reason error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("pg %s: refused osd.%d at epoch %d (ours %d): %v", e.PG, e.From, e.Epoch, e.Known, e.Reason)
}

// Unwrap returns Reason, so errors.Is(err, ErrStaleEpoch) works.
func (e *RefusedError) Unwrap() error { return e.Reason }
