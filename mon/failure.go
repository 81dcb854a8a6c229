package mon

import (
	"fmt"
	"slices"
	"time"

	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// failureTracker decides, from OSDs' failure reports, when an OSD is down,
// as Ceph's OSDMonitor does: at once when one up reporter says the
// target's process is gone (connection refused), else when enough
// distinct reporters have not heard from it for the grace. It is the
// leader's, in memory: a new leader starts without reports, and the
// reporters send theirs again.
//
// It is a pure state machine: the caller passes the map and the time.
type failureTracker struct {
	grace        time.Duration
	minReporters int
	// reports by target, then reporter.
	reports map[uint32]map[uint32]failureReport
}

type failureReport struct {
	failedFor time.Duration // as the reporter said
	at        time.Time     // when it said so
}

func newFailureTracker(grace time.Duration, minReporters int) *failureTracker {
	return &failureTracker{grace: grace, minReporters: minReporters, reports: map[uint32]map[uint32]failureReport{}}
}

// report takes one MonFailure and says whether its target is now to be
// marked down, and why. Reports about an OSD that is not up, from one that
// is not up, or about an earlier incarnation of the target (epoch before
// its up_from) are ignored.
func (t *failureTracker) report(mp *placement.Map, f *osdpb.MonFailure, now time.Time) (down bool, why string) {
	target, ok := mp.OSD(f.Target)
	if !ok || !target.Up {
		delete(t.reports, f.Target)
		return false, ""
	}
	if reporter, ok := mp.OSD(f.Reporter); !ok || !reporter.Up || f.Reporter == f.Target {
		return false, ""
	}
	if f.Epoch < target.UpFrom {
		return false, ""
	}
	if f.Alive {
		if rs := t.reports[f.Target]; rs != nil {
			delete(rs, f.Reporter)
			if len(rs) == 0 {
				delete(t.reports, f.Target)
			}
		}
		return false, ""
	}
	if f.Immediate {
		delete(t.reports, f.Target)
		return true, fmt.Sprintf("osd.%d refused osd.%d's connection (the process is gone)", f.Target, f.Reporter)
	}
	rs := t.reports[f.Target]
	if rs == nil {
		rs = map[uint32]failureReport{}
		t.reports[f.Target] = rs
	}
	rs[f.Reporter] = failureReport{failedFor: max(0, time.Duration(f.FailedForNanos)), at: now}
	return t.check(mp, f.Target, now)
}

// due returns the targets whose reports now suffice (reports age: one
// that said 1s of a 2s grace qualifies a second later), with why, in id
// order. It also drops stale reports.
func (t *failureTracker) due(mp *placement.Map, now time.Time) (ids []uint32, whys []string) {
	targets := make([]uint32, 0, len(t.reports))
	for id := range t.reports {
		targets = append(targets, id)
	}
	slices.Sort(targets)
	for _, id := range targets {
		if o, ok := mp.OSD(id); !ok || !o.Up {
			delete(t.reports, id)
			continue
		}
		if down, why := t.check(mp, id, now); down {
			ids, whys = append(ids, id), append(whys, why)
		}
	}
	return ids, whys
}

// forget drops the reports about target (it was marked down or booted).
func (t *failureTracker) forget(target uint32) { delete(t.reports, target) }

// check counts target's qualifying reporters. Reports older than twice the
// grace are dropped, as are reporters no longer up. Reporters on one host
// count once (Ceph's mon_osd_reporter_subtree_level = host), unless every
// up OSD shares one host: then no two hosts could ever report, so each OSD
// counts (as Ceph does with the level set to osd).
func (t *failureTracker) check(mp *placement.Map, target uint32, now time.Time) (bool, string) {
	rs := t.reports[target]
	byHost := !singleHost(mp)
	seen := map[string]bool{}
	var who []uint32
	for reporter, r := range rs {
		o, ok := mp.OSD(reporter)
		if !ok || !o.Up || now.Sub(r.at) > 2*t.grace {
			delete(rs, reporter)
			continue
		}
		if r.failedFor+now.Sub(r.at) < t.grace {
			continue
		}
		key := fmt.Sprintf("osd.%d", reporter)
		if byHost && o.Host != "" {
			key = "host " + o.Host
		}
		if !seen[key] {
			seen[key] = true
			who = append(who, reporter)
		}
	}
	if len(rs) == 0 {
		delete(t.reports, target)
	}
	if len(seen) < max(1, t.minReporters) {
		return false, ""
	}
	slices.Sort(who)
	delete(t.reports, target)
	return true, fmt.Sprintf("osd.%d failed for %v or more by %d reporters %v", target, t.grace, len(seen), who)
}

// singleHost reports whether every up OSD of mp names the same host.
func singleHost(mp *placement.Map) bool {
	host, n := "", 0
	for o := range mp.OSDs() {
		if !o.Up {
			continue
		}
		if n > 0 && o.Host != host {
			return false
		}
		host, n = o.Host, n+1
	}
	return true
}
