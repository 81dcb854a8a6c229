package store

// Replaced versions kept for their readers. A client reads an object larger
// than one get's window (8 MiB) in several gets. S3 promises that a GET
// which began returns the object it began on, whole, though a PUT or DELETE
// replaces it meanwhile (RGW defers the removal of the old tail objects to
// its garbage collector, hours later). Here an overwrite or delete unlinks
// the old data file at its commit, and read epochs protect one ReadShared
// only, so a reader's next window found the new object and failed.
//
// So a get that stops short of the object's end holds the version it read
// (its data file) for Options.KeepReplacedFor: an overwrite or delete that
// replaces that version while it is held keeps the replaced head and its
// file (the file's 'W' record is durable, as for every dead file, so a
// crash still removes it) instead of killing it, until the hold lapses.
// Every later window renews the hold. Versions nobody reads are not kept,
// however often the object is overwritten meanwhile. A get that names the
// version it began on (ReadOptions.Want) reads that version from here when
// the object no longer is it. Only what a reader
// holds is kept, and at most Options.KeepReplacedBytes of it: past that a
// replaced file is killed at once, and its reader fails as before, asked
// to read again.

import (
	"slices"
	"sync"
	"time"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// keeper is the Store's state for held objects and kept versions.
type keeper struct {
	mu sync.Mutex
	// holds: until when a reader may come back for a version, by its
	// data file's id (never reused).
	holds map[uint64]time.Time
	// pruneAt: the size of holds at which lapsed holds are dropped.
	pruneAt int
	kept    []keptVersion
	bytes   int64 // of the kept files
	// retiring: versions an overwrite or delete is replacing, by data id,
	// from before its commit publishes the new head until the commit is
	// durable and retire decides: a reader of the old version finds it
	// here meanwhile.
	retiring map[uint64]keptVersion
	timer    *time.Timer
	closed   bool
}

type keptVersion struct {
	name  string // objectName
	h     *head
	until time.Time
}

// objectName names a kept version's object: bucket and key as the store
// orders them.
func objectName(bucket, key string) string { return bucket + "\x00" + key }

// hold marks h, the version of bucket/key a reader's view found, as being
// read in pieces until now+KeepReplacedFor. If an overwrite or delete
// killed its file between that view and this hold, the file is taken back
// off the dead list (the reader's epoch keeps it there) and kept.
func (s *Store) hold(bucket, key string, h *head) {
	k := &s.keep
	now := time.Now()
	until := now.Add(s.opts.KeepReplacedFor)
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	if k.holds == nil {
		k.holds = make(map[uint64]time.Time)
	}
	k.holds[h.dataID] = until
	if len(k.holds) >= k.pruneAt {
		for n, t := range k.holds {
			if !t.After(now) {
				delete(k.holds, n)
			}
		}
		k.pruneAt = max(1024, 2*len(k.holds))
	}
	_, retiring := k.retiring[h.dataID]
	kept := retiring || slices.ContainsFunc(k.kept, func(v keptVersion) bool { return v.h.dataID == h.dataID })
	if !kept && s.files.undoKill(h.dataID) {
		s.keepLocked(objectName(bucket, key), h, until, true)
	}
	k.mu.Unlock()
}

// replacing registers old, the head of bucket/key that a commit is about
// to replace, as retiring until the commit is durable (retire).
func (s *Store) replacing(bucket, key string, old *head) {
	if old == nil || !old.inFile {
		return
	}
	k := &s.keep
	k.mu.Lock()
	if k.retiring == nil {
		k.retiring = make(map[uint64]keptVersion)
	}
	k.retiring[old.dataID] = keptVersion{name: objectName(bucket, key), h: old}
	k.mu.Unlock()
}

// notReplacing undoes replacing for a commit that failed.
func (s *Store) notReplacing(old *head) {
	if old == nil || !old.inFile {
		return
	}
	k := &s.keep
	k.mu.Lock()
	delete(k.retiring, old.dataID)
	k.mu.Unlock()
}

// retire disposes of old, the head an overwrite or delete of bucket/key
// just replaced (its commit is durable): its data file is kept while a
// reader holds it, else handed to the reaper.
func (s *Store) retire(bucket, key string, old *head) {
	if old == nil || !old.inFile {
		return
	}
	k := &s.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.retiring, old.dataID)
	until, held := k.holds[old.dataID]
	if !held || k.closed || !until.After(time.Now()) || !s.keepLocked(objectName(bucket, key), old, until, false) {
		// Killed under k.mu: a hold taken after this decision finds the
		// file on the dead list (undoKill), never between the two.
		s.killDataFiles(old.dataID)
	}
}

// keepLocked keeps h until until, within Options.KeepReplacedBytes; force
// keeps it past that (a file taken back off the dead list, which holds no
// more than it would have). REQUIRES: k.mu.
func (s *Store) keepLocked(name string, h *head, until time.Time, force bool) bool {
	k := &s.keep
	size := int64(h.meta.GetSize())
	if !force && k.bytes+size > s.opts.KeepReplacedBytes {
		s.counters.keepRefused.Add(1)
		return false
	}
	k.kept = append(k.kept, keptVersion{name: name, h: h, until: until})
	k.bytes += size
	if k.timer == nil {
		k.timer = time.AfterFunc(time.Until(until), s.expireKept)
	} else if len(k.kept) == 1 {
		k.timer.Reset(time.Until(until))
	}
	return true
}

// keptHead is the kept version of bucket/key that want describes (its
// size, modification time and CRC32C), nil if none is kept.
func (s *Store) keptHead(bucket, key string, want *osdpb.ObjectMeta) *head {
	k := &s.keep
	name := objectName(bucket, key)
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, v := range k.kept {
		if v.name == name && sameVersion(v.h.meta, want) {
			return v.h
		}
	}
	for _, v := range k.retiring {
		if v.name == name && sameVersion(v.h.meta, want) {
			return v.h
		}
	}
	return nil
}

// sameVersion reports whether m is the version of an object that want
// describes, as a reader in windows tells them apart.
func sameVersion(m, want *osdpb.ObjectMeta) bool {
	return m.GetSize() == want.GetSize() && m.GetMtimeUnixNano() == want.GetMtimeUnixNano() && m.GetCrc32C() == want.GetCrc32C()
}

// expireKept kills the kept files whose holds have lapsed, and sets the
// timer for the next one.
func (s *Store) expireKept() {
	k := &s.keep
	now := time.Now()
	var ids []uint64
	k.mu.Lock()
	next := time.Time{}
	live := k.kept[:0]
	for _, v := range k.kept {
		if t := k.holds[v.h.dataID]; t.After(v.until) {
			v.until = t // its reader came back meanwhile
		}
		if !v.until.After(now) {
			ids = append(ids, v.h.dataID)
			k.bytes -= int64(v.h.meta.GetSize())
			continue
		}
		if next.IsZero() || v.until.Before(next) {
			next = v.until
		}
		live = append(live, v)
	}
	clear(k.kept[len(live):])
	k.kept = live
	if !next.IsZero() && !k.closed {
		k.timer.Reset(time.Until(next))
	}
	// Under k.mu, as retire kills: a hold that found the version kept
	// renewed it before this, or finds it dead after (undoKill).
	s.killDataFiles(ids...)
	k.mu.Unlock()
}

// releaseKept stops keeping anything and returns the kept files (Close
// removes them with the dead ones).
func (s *Store) releaseKept() []uint64 {
	k := &s.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	if k.timer != nil {
		k.timer.Stop()
	}
	var ids []uint64
	for _, v := range k.kept {
		ids = append(ids, v.h.dataID)
	}
	k.kept, k.bytes, k.holds = nil, 0, nil
	return ids
}

// KeepReplacedFor is how long a replaced version is kept for a reader
// that holds it (Options.KeepReplacedFor; 0 for none).
func (s *Store) KeepReplacedFor() time.Duration { return max(s.opts.KeepReplacedFor, 0) }

// keptStats are the kept versions and their bytes (Stats).
func (s *Store) keptStats() (n, bytes int64) {
	k := &s.keep
	k.mu.Lock()
	defer k.mu.Unlock()
	return int64(len(k.kept)), k.bytes
}
