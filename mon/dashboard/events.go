package dashboard

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ospreystore/osprey/mon"
)

// Event is something that changed between two samples.
type Event struct {
	// Seq numbers events from 1 in the order they happened, so a client
	// can ask for the ones after the last it saw.
	Seq  uint64    `json:"seq"`
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Level is "info", "warn" or "err": how the page colours it.
	Level string `json:"level"`
	Text  string `json:"text"`
}

// Event kinds.
const (
	KindHealth       = "health"
	KindOSDDown      = "osd_down"
	KindOSDUp        = "osd_up"
	KindOSDOut       = "osd_out"
	KindOSDIn        = "osd_in"
	KindOSDNew       = "osd_new"
	KindOSDRemoved   = "osd_removed"
	KindPeering      = "peering"
	KindRecovering   = "recovering"
	KindRecoveryDone = "recovery_done"
)

// changes lists what happened between prev and cur, as events without Seq
// and At. With no prev (the first sample) it says the health it starts
// from. The health is an event when its level changes, with the reasons
// then: the reasons' figures change with every sample while PGs peer, and
// an event each time would bury the OSD events. It is a pure function of
// the two reports and recovering, which says whether PGs have been
// missing copies since the cluster was last all active+clean; it returns
// that for cur.
func changes(prev, cur *mon.Report, recovering bool) ([]Event, bool) {
	var out []Event
	add := func(kind, level, format string, args ...any) {
		out = append(out, Event{Kind: kind, Level: level, Text: fmt.Sprintf(format, args...)})
	}
	h := cur.Status.Health
	if prev == nil || prev.Status.Health.Status != h.Status {
		if len(h.Checks) == 0 {
			add(KindHealth, levelOf(h.Status), "%s", h.Status)
		} else {
			add(KindHealth, levelOf(h.Status), "%s: %s", h.Status, strings.Join(h.Checks, "; "))
		}
	}
	if unclean(cur) > 0 {
		recovering = recovering || pgsWith(cur, recoveryWords...) > 0
	}
	if prev == nil {
		return out, recovering
	}
	recovering = recovering || pgsWith(prev, recoveryWords...) > 0
	before := map[uint32]mon.OSDReport{}
	for _, o := range prev.OSDs {
		before[o.ID] = o
	}
	seen := map[uint32]bool{}
	for _, o := range cur.OSDs {
		seen[o.ID] = true
		p, ok := before[o.ID]
		if !ok {
			add(KindOSDNew, "info", "osd.%d created", o.ID)
			p = mon.OSDReport{}
			p.ID = o.ID
		}
		switch {
		case p.Up && !o.Up:
			add(KindOSDDown, "warn", "osd.%d down", o.ID)
		case !p.Up && o.Up:
			add(KindOSDUp, "info", "osd.%d up at %s", o.ID, o.PublicAddr)
		}
		switch {
		case p.In && !o.In:
			add(KindOSDOut, "warn", "osd.%d out", o.ID)
		case !p.In && o.In && ok:
			add(KindOSDIn, "info", "osd.%d in", o.ID)
		}
	}
	for _, o := range prev.OSDs {
		if !seen[o.ID] {
			add(KindOSDRemoved, "info", "osd.%d removed", o.ID)
		}
	}
	if n, was := pgsWith(cur, "peering"), pgsWith(prev, "peering"); n > 0 && was == 0 {
		add(KindPeering, "info", "%d pgs peering", n)
	}
	if n, was := pgsWith(cur, "recovering", "backfilling"), pgsWith(prev, "recovering", "backfilling"); n > 0 && was == 0 {
		add(KindRecovering, "info", "recovery started: %d pgs recovering or backfilling", n)
	}
	// Done only after something to recover (PGs that were merely unknown
	// while a cluster started are no recovery), however many samples
	// ago: PGs usually pass through unknown and peering on their way
	// back to clean.
	if recovering && unclean(cur) == 0 && cur.Status.PGTotal > 0 {
		add(KindRecoveryDone, "info", "recovery done: all %d pgs active+clean", cur.Status.PGTotal)
		recovering = false
	}
	return out, recovering
}

func levelOf(health string) string {
	switch health {
	case mon.HealthOK:
		return "info"
	case mon.HealthWarn:
		return "warn"
	}
	return "err"
}

// pgsWith counts the PGs whose state has one of the words.
func pgsWith(r *mon.Report, words ...string) int {
	n := 0
	for state, c := range r.Status.PGs {
		for t := range strings.SplitSeq(state, "+") {
			if slices.Contains(words, t) {
				n += c
				break
			}
		}
	}
	return n
}

// recoveryWords are the PG state words that mean copies are missing or
// being made.
var recoveryWords = []string{"degraded", "undersized", "recovering", "backfilling", "recovery_toofull", "backfill_toofull", "peered"}

// unclean counts the PGs that are not active+clean. A remapped one with
// nothing left to move (an out OSD kept acting where nothing can replace
// it) is clean: its copies are all there, and it may stay so.
func unclean(r *mon.Report) int {
	n := r.Status.PGTotal - r.Status.PGs["active+clean"]
	if r.Status.MisplacedObjects == 0 {
		n -= r.Status.PGs["active+clean+remapped"]
	}
	return n
}
