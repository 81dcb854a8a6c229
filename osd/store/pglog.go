package store

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// PGInfo returns a PG's last applied version and its log tail. The log
// holds every entry with a version in (tail, last]: tail is exclusive, like
// Ceph's log_tail, and is zero until the log is first trimmed or reset, so
// LogAfter(after) can serve any after >= tail. An unknown PG has zero
// versions.
func (s *Store) PGInfo(ctx context.Context, pg uint32) (last, tail *osdpb.Version, err error) {
	if err := s.enter(ctx); err != nil {
		return nil, nil, err
	}
	defer s.leave()
	var g pgInfo
	err = s.withView(func(v *view) (err error) {
		g, err = s.pgInfoOf(v, pg)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return g.last.proto(), g.tail.proto(), nil
}

// LogAfter returns up to max (<= 0: all) log entries of PG pg with versions
// greater than after, in version order. tooOld reports that entries after
// `after` were trimmed (after < tail): the peer must be backfilled, and no
// entries are returned.
func (s *Store) LogAfter(ctx context.Context, pg uint32, after *osdpb.Version, max int) (entries []*osdpb.LogEntry, tooOld bool, err error) {
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	defer s.leave()
	from := versionOf(after)
	err = s.withView(func(v *view) error {
		g, err := s.pgInfoOf(v, pg)
		if err != nil {
			return err
		}
		if from.less(g.tail) {
			tooOld = true
			return nil
		}
		prefix := logPrefix(pg)
		for ok := v.scan(keyAfter(logKey(pg, after)), prefixEnd(prefix)); ok; ok = v.it.Next() {
			if max > 0 && len(entries) == max {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			e, err := s.logEntryAt(v, pg)
			if err != nil {
				return err
			}
			entries = append(entries, e)
		}
		return v.it.Error()
	})
	if err != nil {
		return nil, false, fmt.Errorf("store: log of pg %d after %v: %w", pg, from, err)
	}
	return entries, tooOld, nil
}

// LogNewest returns PG pg's newest log entries in log order: walking back
// from the newest, it takes each while more says so, and ends at the
// first it does not (left out). A caller that wants only the recent end of
// a log reads that, not the whole log as LogAfter would.
func (s *Store) LogNewest(ctx context.Context, pg uint32, more func(*osdpb.LogEntry) bool) ([]*osdpb.LogEntry, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	var entries []*osdpb.LogEntry
	err := s.withView(func(v *view) error {
		prefix := logPrefix(pg)
		v.it.SetBounds(prefix, prefixEnd(prefix))
		for ok := v.it.Last(); ok; ok = v.it.Prev() {
			if err := ctx.Err(); err != nil {
				return err
			}
			e, err := s.logEntryAt(v, pg)
			if err != nil {
				return err
			}
			if !more(e) {
				return nil
			}
			entries = append(entries, e)
		}
		return v.it.Error()
	})
	if err != nil {
		return nil, fmt.Errorf("store: newest log of pg %d: %w", pg, err)
	}
	slices.Reverse(entries)
	return entries, nil
}

// Diverged reports whether a peer whose log ends at after has entries our
// log lacks: after lies past our tail but is not one of our entries. Such
// entries were written by an old primary that died before any member that
// serves now had them; they were never acknowledged and the peer must roll
// them back. floor is then our newest version below after (our tail if
// none): the peer's entries after floor are the divergent ones, and
// LogAfter(floor) is what it lacks. A version is assigned once, by one
// primary in one epoch, so entries with the same version are the same.
func (s *Store) Diverged(ctx context.Context, pg uint32, after *osdpb.Version) (floor *osdpb.Version, diverged bool, err error) {
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	defer s.leave()
	at := versionOf(after)
	err = s.withView(func(v *view) error {
		g, err := s.pgInfoOf(v, pg)
		if err != nil {
			return err
		}
		if at == (version{}) || !g.tail.less(at) {
			return nil // nothing, or at or before the tail: LogAfter answers
		}
		if _, ok, err := v.get(logKey(pg, after)); err != nil || ok {
			return err
		}
		diverged, floor = true, g.tail.proto()
		prefix := logPrefix(pg)
		v.it.SetBounds(prefix, logKey(pg, after))
		if v.it.Last() {
			if floor, err = logKeyVersion(v.it.Key()); err != nil {
				return err
			}
		}
		return v.it.Error()
	})
	if err != nil {
		return nil, false, fmt.Errorf("store: log of pg %d at %v: %w", pg, at, err)
	}
	return floor, diverged, nil
}

// logEntryAt decodes the log entry under the view's iterator.
func (s *Store) logEntryAt(v *view, pg uint32) (*osdpb.LogEntry, error) {
	val, err := v.it.ValueAndErr()
	if err != nil {
		return nil, err
	}
	e, err := decodeLogEntry(val)
	if err != nil {
		s.counters.corruptions.Add(1)
		return nil, corrupt("", "", "pg %d log entry %x: %v", pg, v.it.Key(), err)
	}
	return e, nil
}

// FindRequest returns the log entry that answered request req in PG pg, if
// it is still in the log: a resent op is answered from it instead of being
// applied twice.
func (s *Store) FindRequest(ctx context.Context, pg uint32, req *osdpb.ReqID) (*osdpb.LogEntry, bool, error) {
	if err := s.enter(ctx); err != nil {
		return nil, false, err
	}
	defer s.leave()
	if req == nil {
		return nil, false, fmt.Errorf("store: find request: %w: nil request id", ErrInvalidArgument)
	}
	var e *osdpb.LogEntry
	// Point reads (every write looks its request up first, and nearly all
	// miss): the index entry and its log entry are written, and trimmed,
	// in one batch, and a trim between the two reads is treated as gone,
	// which is what a view taken after the trim would say.
	err := func() error {
		v := s.latest()
		val, ok, err := v.get(reqKey(pg, req))
		if err != nil || !ok {
			return err
		}
		ver, err := decodeReqVersion(val)
		if err != nil {
			s.counters.corruptions.Add(1)
			return corrupt("", "", "pg %d request index %d/%d: %v", pg, req.GetClient(), req.GetTid(), err)
		}
		val, ok, err = v.get(logKey(pg, ver.proto()))
		if err != nil || !ok {
			// The index outlived its entry only if a trim raced; treat as gone.
			return err
		}
		e, err = decodeLogEntry(val)
		if err != nil {
			s.counters.corruptions.Add(1)
			return corrupt("", "", "pg %d log entry %v: %v", pg, ver, err)
		}
		return nil
	}()
	if err != nil {
		return nil, false, fmt.Errorf("store: find request %d/%d in pg %d: %w", req.GetClient(), req.GetTid(), pg, err)
	}
	return e, e != nil, nil
}

// TrimLog drops all but the newest Options.LogKeep entries of PG pg, with
// their request index, and moves the tail to the newest dropped version.
// The batch is not synced: losing a trim in a crash only keeps more log.
func (s *Store) TrimLog(ctx context.Context, pg uint32) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	st := s.lockPG(pg)
	defer st.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	trimmed := 0
	var g pgInfo
	err := s.withView(func(v *view) (err error) {
		g, err = s.pgInfoOf(v, pg)
		if err != nil {
			return err
		}
		prefix := logPrefix(pg)
		lo, hi := prefix, prefixEnd(prefix)
		// Walk back LogKeep entries from the newest; everything older goes.
		v.it.SetBounds(lo, hi)
		ok := v.it.Last()
		for kept := 0; ok && kept < s.opts.LogKeep; kept++ {
			ok = v.it.Prev()
		}
		if err := v.it.Error(); err != nil {
			return err
		}
		if !ok {
			return nil // LogKeep or fewer entries
		}
		newest, err := logKeyVersion(v.it.Key())
		if err != nil {
			return err
		}
		if trimmed, err = s.dropEntries(ctx, v, b, pg, lo, keyAfter(bytes.Clone(v.it.Key()))); err != nil {
			return err
		}
		g.tail = versionOf(newest)
		return b.Set(pgKey(pg), appendPGInfo(nil, g), nil)
	})
	committed := false
	if err == nil && trimmed > 0 {
		err = b.Commit(pebble.NoSync)
		committed = err == nil
	}
	if committed || err != nil {
		st.setPGRecord(g, committed)
	}
	if err != nil {
		return fmt.Errorf("store: trim log of pg %d: %w", pg, err)
	}
	return nil
}

// SetPGLast sets PG pg's last version after a backfill that could not
// copy its source's log (CopyLog) and resets its log to start there (tail = last): LogAfter from any older version then says
// tooOld. The request index of the dropped log goes with it, and the
// backfill mark (SetPGBackfilling).
func (s *Store) SetPGLast(ctx context.Context, pg uint32, last *osdpb.Version) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	st := s.lockPG(pg)
	defer st.mu.Unlock()
	ver := versionOf(last)
	b := s.db.NewBatch()
	defer b.Close()
	lp, rp := logPrefix(pg), reqPrefix(pg)
	err := b.DeleteRange(lp, prefixEnd(lp), nil)
	if err == nil {
		err = b.DeleteRange(rp, prefixEnd(rp), nil)
	}
	if err == nil {
		err = b.Set(pgKey(pg), appendPGInfo(nil, pgInfo{last: ver, tail: ver}), nil)
	}
	if err == nil {
		err = b.Delete(backfillKey(pg), nil) // the backfill, if any, is complete
	}
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	st.setPGRecord(pgInfo{last: ver, tail: ver}, err == nil)
	if err != nil {
		return fmt.Errorf("store: set pg %d last to %v: %w", pg, ver, err)
	}
	return nil
}

// LogCopy is a run of a PG's log entries that recovery copied from a peer
// (CopyLog).
type LogCopy struct {
	// After is the version the entries follow. The PG's own entries after
	// it go first, with their request ids: a log catch-up that rolls back
	// divergent entries passes the floor the source named.
	After *osdpb.Version
	// Entries, in increasing version order, all after After.
	Entries []*osdpb.LogEntry
	// Reset drops the whole log first and starts it at After (tail =
	// After): a backfill's copy of its source's log.
	Reset bool
	// Backfilled ends the PG's backfill (SetPGBackfilling) in the same
	// commit.
	Backfilled bool
}

// CopyLog records, in one synced batch, log entries that recovery copied
// from a peer whose objects the caller installed already (InstallObject,
// RemoveObject): each entry and its request index, as Apply records them,
// so that a resend of one of their ops is answered from the log here too
// (this OSD may lead the PG later). The PG's last version becomes the
// newest entry's, or c.After when there are none. Without Reset the log
// must reach c.After (c.After at or below the PG's last version); the
// tail moves back to c.After if it was past it, since the log then holds
// every entry after c.After. Entries out of order, without a version or
// not after c.After are refused with ErrInvalidArgument and change
// nothing. Their kinds are not checked: the entries are history (their
// objects may have changed since), not ops to apply.
func (s *Store) CopyLog(ctx context.Context, pg uint32, c LogCopy) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	from := versionOf(c.After)
	last := from
	logged := make([][]byte, len(c.Entries))
	for i, e := range c.Entries {
		if e == nil || e.Version == nil || !last.less(versionOf(e.Version)) {
			return fmt.Errorf("store: copy log of pg %d: %w: entry %d is not after %v", pg, ErrInvalidArgument, i, last)
		}
		last = versionOf(e.Version)
		var err error
		if logged[i], err = appendProto(nil, e); err != nil {
			return fmt.Errorf("store: copy log of pg %d: %w", pg, err)
		}
	}
	st := s.lockPG(pg)
	defer st.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	var g pgInfo
	err := s.withView(func(v *view) (err error) {
		if g, err = s.pgInfoOf(v, pg); err != nil {
			return err
		}
		lp, rp := logPrefix(pg), reqPrefix(pg)
		if c.Reset {
			g.tail = from
			if err := b.DeleteRange(rp, prefixEnd(rp), nil); err != nil {
				return err
			}
			if err := b.DeleteRange(lp, prefixEnd(lp), nil); err != nil {
				return err
			}
		} else {
			if g.last.less(from) {
				return fmt.Errorf("%w: the log ends at %v, before %v", ErrInvalidArgument, g.last, from)
			}
			if from.less(g.tail) {
				g.tail = from
			}
			if _, err := s.dropEntries(ctx, v, b, pg, keyAfter(logKey(pg, c.After)), prefixEnd(lp)); err != nil {
				return err
			}
		}
		// After the deletes: a copied entry may carry the request id of
		// one dropped (a divergent entry whose op was resent to the new
		// primary), and the later write in a batch wins.
		for i, e := range c.Entries {
			if err := b.Set(logKey(pg, e.Version), logged[i], nil); err != nil {
				return err
			}
			if e.Req != nil {
				if err := b.Set(reqKey(pg, e.Req), appendReqVersion(nil, versionOf(e.Version)), nil); err != nil {
					return err
				}
			}
		}
		g.last = last
		if c.Backfilled {
			if err := b.Delete(backfillKey(pg), nil); err != nil {
				return err
			}
		}
		return b.Set(pgKey(pg), appendPGInfo(nil, g), nil)
	})
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	st.setPGRecord(g, err == nil)
	if err != nil {
		return fmt.Errorf("store: copy log of pg %d after %v: %w", pg, from, err)
	}
	return nil
}

// dropEntries deletes, in b, PG pg's log entries with keys in [lo, hi)
// and their request index, and returns how many there were.
func (s *Store) dropEntries(ctx context.Context, v *view, b *pebble.Batch, pg uint32, lo, hi []byte) (n int, err error) {
	for ok := v.scan(lo, hi); ok; ok = v.it.Next() {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		e, err := s.logEntryAt(v, pg)
		if err != nil {
			return n, err
		}
		if e.Req != nil {
			if err := b.Delete(reqKey(pg, e.Req), nil); err != nil {
				return n, err
			}
		}
		n++
	}
	if err := v.it.Error(); err != nil || n == 0 {
		return n, err
	}
	return n, b.DeleteRange(lo, hi, nil)
}

// PGObjects reads a page of objects per view and yields it with the store
// released, since backfill sends each object over the network between
// steps. Pages grow from 1 to pgObjectsPage: a caller that takes only the
// next object (a backfill step) pays for one head lookup, a full scan for
// few views.
const pgObjectsPage = 64

// PGObjects yields the objects of PG pg in (bucket, key) order, starting
// after (afterBucket, afterKey) (both empty: from the start), as log
// entries of kind OP_PUT with Bucket, Key, Meta and the Version that wrote
// the object. An error is yielded once, last. Each page is one consistent
// view; objects changed between pages are seen as of the later page.
func (s *Store) PGObjects(ctx context.Context, pg uint32, afterBucket, afterKey string) iter.Seq2[*osdpb.LogEntry, error] {
	prefix := pgIndexPrefix(pg)
	hi := prefixEnd(prefix)
	lo := prefix
	if afterBucket != "" || afterKey != "" {
		lo = keyAfter(pgIndexKey(pg, afterBucket, afterKey))
	}
	return paged(lo, 1, pgObjectsPage, func(lo []byte, size int) ([]*osdpb.LogEntry, []byte, error) {
		return s.pgObjectsPage(ctx, pg, lo, hi, size)
	})
}

func (s *Store) pgObjectsPage(ctx context.Context, pg uint32, lo, hi []byte, size int) (page []*osdpb.LogEntry, next []byte, err error) {
	if err := s.enter(ctx); err != nil {
		return nil, nil, err
	}
	defer s.leave()
	err = s.withView(func(v *view) error {
		// Collect the index keys first: looking heads up moves the iterator.
		var keys [][2]string
		ok := v.scan(lo, hi)
		for ; ok && len(keys) < size; ok = v.it.Next() {
			bucket, key, valid := splitPGIndexKey(v.it.Key())
			if !valid {
				s.counters.corruptions.Add(1)
				return corrupt("", "", "pg %d index key %x: no separator", pg, v.it.Key())
			}
			keys = append(keys, [2]string{bucket, key})
		}
		if err := v.it.Error(); err != nil {
			return err
		}
		if ok {
			next = bytes.Clone(v.it.Key())
		}
		for _, bk := range keys {
			h, found, err := s.headOf(v, bk[0], bk[1])
			if err != nil {
				return err
			}
			if !found || h.pg != pg {
				continue // index and head are written together; skip a stray entry
			}
			page = append(page, &osdpb.LogEntry{
				Version: h.version.proto(),
				Kind:    osdpb.OpKind_OP_PUT,
				Bucket:  bk[0],
				Key:     bk[1],
				Meta:    h.meta,
			})
		}
		return nil
	})
	if err != nil {
		return page, nil, fmt.Errorf("store: objects of pg %d: %w", pg, err)
	}
	return page, next, nil
}
