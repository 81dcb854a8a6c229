package osd

// SetBackfillFetched installs a hook that runs after a backfill's walk
// fetched an object and before it installs it; nil removes it. Tests only.
func SetBackfillFetched(f func(bucket, key string)) {
	if f == nil {
		backfillFetched.Store(nil)
		return
	}
	backfillFetched.Store(&f)
}

// SetRecoveryStarting installs a hook that runs when OSD osd starts to
// recover its copy of store PG sid (a catch-up from a peer), before it
// copies anything; nil removes it. Tests only.
func SetRecoveryStarting(f func(osd, sid uint32)) {
	if f == nil {
		recoveryStarting.Store(nil)
		return
	}
	recoveryStarting.Store(&f)
}

// SetPeeringForTest marks every PG o holds as peering (reads are answered
// SERVICE_UNAVAILABLE) or not, until its next map change. Tests only.
func (o *OSD) SetPeeringForTest(on bool) {
	o.pgMu.Lock()
	defer o.pgMu.Unlock()
	for _, p := range o.pgs {
		p.peering.Store(on)
	}
}
