package osd

import (
	"sync"
	"sync/atomic"
	"time"
)

// Holds on a replaced multipart object's parts, for its readers. A client
// reads a multipart object part by part, straight from the parts' PGs,
// long after it read the manifest. An overwrite or delete of the object
// deletes the old parts after the store's KeepReplacedFor
// (dropReplaced), so a reader slower than that found its next part gone,
// where S3 finishes a GET that began on the old object (RGW collects
// replaced tails hours later). A plain object's reader renews its hold
// with every window it reads (store/keep.go); a multipart object's windows
// go to other OSDs, which know nothing of the head.
//
// So the reader names its manifest's first part to the head's primary, a
// get of no bytes (GetObject.hold_parts), every third of the hold while it
// reads; the primary, which deletes the parts, defers that delete while
// the replaced manifest's parts are held. Only the versions read are
// held, and only while their readers read on. A new primary (failover)
// waits KeepReplacedFor before its deletes (redropRecent), within which
// the readers have named their parts to it.
type partHolds struct {
	mu sync.Mutex
	// until: when the hold lapses, by bucket and part key (part keys
	// hold their upload's id, never reused).
	until map[string]time.Time
	// pruneAt: the size of until at which lapsed holds are dropped.
	pruneAt int
	// waiting counts the deletes deferred for readers now.
	waiting atomic.Int64
}

func partHoldName(bucket, part string) string { return bucket + "\x00" + part }

// hold holds the parts of bucket's manifest whose first part is part
// until d from now.
func (h *partHolds) hold(bucket, part string, d time.Duration) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.until == nil {
		h.until = make(map[string]time.Time)
	}
	h.until[partHoldName(bucket, part)] = now.Add(d)
	if len(h.until) >= h.pruneAt {
		for n, t := range h.until {
			if !t.After(now) {
				delete(h.until, n)
			}
		}
		h.pruneAt = max(1024, 2*len(h.until))
	}
}

// heldUntil is when the last hold on any of parts (of a manifest of
// bucket) lapses; zero if none is held.
func (h *partHolds) heldUntil(bucket string, parts []string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var last time.Time
	for _, p := range parts {
		if t := h.until[partHoldName(bucket, p)]; t.After(last) {
			last = t
		}
	}
	return last
}

// waitPartHolds waits while a reader holds parts, a replaced manifest's
// of bucket (partHolds); false when the OSD stops meanwhile. A graceful stop ends
// the wait, as it ends waitKeepReplaced's: a reader still reading then is
// told to read again, as without holds.
func (o *OSD) waitPartHolds(bucket string, parts []string) bool {
	counted := false
	defer func() {
		if counted {
			o.partHolds.waiting.Add(-1)
		}
	}()
	for {
		d := time.Until(o.partHolds.heldUntil(bucket, parts))
		if d <= 0 {
			return true
		}
		if !counted {
			counted = true
			o.partHolds.waiting.Add(1)
		}
		if !o.waitDrop(d) {
			return false
		}
		select {
		case <-o.dropNow:
			return true
		default:
		}
	}
}

// waitDrop waits d before a delete of replaced parts, less if a graceful
// stop begins (FlushDrops); false when the OSD stops meanwhile.
func (o *OSD) waitDrop(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-o.dropNow:
	case <-o.ctx.Done():
		return false
	}
	return true
}
