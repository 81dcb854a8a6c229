package pg

// Event is an input to [PG.Step]: one of AdvanceMap, Info, Unreachable,
// Recovered, PeerRecovered, Applied, Activated, BackfillStarted, LogTrimmed
// and RetryPushes.
type Event interface{ event() }

// AdvanceMap gives the machine map epoch Epoch. The daemon feeds every
// epoch, in order, from the local LastEpochStarted (or, when that is zero,
// from the pool's creation epoch) on: the machine builds the PG's past
// intervals from them, and an interval it never saw is one it cannot ask
// about. An epoch not newer than the current one is ignored; one that
// skips an epoch is refused with ErrMapGap.
//
// A new acting set (or primary, or pool size) starts a new interval: the
// machine stops serving at once and, if it is the new primary, peers
// again. A map that leaves the interval as it is re-sends what failed and
// may now succeed: queries to the unreachable OSDs a down PG waits for,
// pushes that failed.
type AdvanceMap struct {
	Epoch Epoch
	// Acting is the PG's acting set in the map, primary first, OSDs the map
	// marks down already removed.
	Acting []OSDID
	// Up is the PG's up set when a pg_temp entry makes Acting differ from
	// it (nil: the same). Its members outside Acting are being filled:
	// the primary queries and pushes to them and they take the PG's
	// writes, but they are not members of the interval (no witnesses,
	// not counted toward MinSize) until the map makes them acting.
	Up []OSDID
	// Size and MinSize are the pool's: below Size the PG is undersized,
	// below MinSize it does not serve.
	Size, MinSize int
	// GivenUp reports whether what OSD id held of a past interval that
	// began at epoch first is gone: the map no longer has it (an operator
	// removed it), it is down and was declared lost (`osd lost`) after
	// first, or its store was made new after first (a replaced disk under
	// the old id). Peering stops waiting to hear from it about the
	// interval, and its answer, if it gives one, witnesses nothing of it.
	// An interval whose members are all silent or given up goes without a
	// witness: what only they held is gone (Ceph's lost_at; a removed OSD
	// never blocks a Ceph PG either). An OSD that is up with its old store
	// is never given up: it is asked and waited for. Nil: none is.
	GivenUp func(id OSDID, first Epoch) bool
}

// Info is a peer's answer to a Query the machine asked for at Epoch. The
// daemon may also step an Info nobody asked for (a peer that came back
// announcing itself): it counts the same.
type Info struct {
	From  OSDID
	Epoch Epoch
	Info  PeerInfo
}

// Unreachable says a request to From made at Epoch failed: refused,
// connection reset, or timed out. The request is a Query, a Recover, a
// PushTarget, or, once the PG is active, a RepOp: a replica that missed one
// is pushed to at the next map epoch (sooner if its gap-filling pull is
// reported with PeerRecovered).
type Unreachable struct {
	From  OSDID
	Epoch Epoch
}

// Recovered says the outstanding Recover from From is done: the local log
// now ends at Last. One that answers no outstanding Recover is ignored.
type Recovered struct {
	From OSDID
	Last Version
}

// PeerRecovered says replica OSD now has its log up to Last: a push
// finished, or the replica pulled from this primary to fill a gap before a
// RepOp.
type PeerRecovered struct {
	OSD  OSDID
	Last Version
}

// Applied says the local log now ends at Version, and the local copy is
// complete (no backfill under way: the daemon does not step Applied while
// one runs): a write the primary applied, a RepOp a replica applied, a
// pull or push a replica finished.
// On a replica it may go back, when a push dropped entries the PG never
// acknowledged.
type Applied struct {
	Version Version
}

// Activated says, at a replica, that the primary of the current interval,
// active, pushed to us its log end Version (a sync RepOp it sent, stamped
// Epoch, from PushTarget). Once the local log ends exactly there, the
// local copy holds the log the interval went active with, and raises its
// LastEpochStarted as the primary did: a replica that was recovered or
// backfilled into the interval then witnesses it, and the intervals before
// it need not be asked about again, even with no write since (Ceph's
// activation sets last_epoch_started on the replicas the same way).
type Activated struct {
	Epoch   Epoch
	Version Version
}

// BackfillStarted says a backfill of the local copy began: until the next
// Applied or Recovered it may lack writes it acknowledged (a replica acks
// writes to objects its walk has not reached), so it witnesses no
// interval (PeerInfo.Incomplete).
type BackfillStarted struct{}

// RetryPushes asks an active primary to push again to the members whose
// last push failed (Unreachable). A new map retries them too, but a
// cluster whose map stays the same (a new one at rest, a member that
// refused a push while it was still taking up the map) has none to wait
// for: the daemon steps this on a timer, as Ceph retries recovery.
type RetryPushes struct{}

// LogTrimmed says the local log's oldest entry is now Tail (a trim): a
// replica whose log ends before it cannot be caught up from the log and is
// backfilled, so the primary counts a member it pushes to from there as
// backfilling (PG.Backfilling).
type LogTrimmed struct{ Tail Version }

func (BackfillStarted) event() {}
func (RetryPushes) event()     {}
func (LogTrimmed) event()      {}
func (AdvanceMap) event()      {}
func (Info) event()            {}
func (Unreachable) event()     {}
func (Recovered) event()       {}
func (PeerRecovered) event()   {}
func (Applied) event()         {}
func (Activated) event()       {}
