package osd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Cross-replica compare. Each copy's own scrub (scrub.go) finds bits
// that rotted under their CRCs; it cannot find copies that are each
// intact but differ: a lost write, a bug that stored the wrong bytes
// with CRCs of their own, a replica left at an older version. So, as
// Ceph's deep scrub does, the primary of a clean PG gathers a scrub map
// (name, version, size, CRC32C, whether the copy read back intact) of
// each chunk of ScrubChunkObjects objects from every replica
// (MSG_PG_SCRUB_MAP) and compares them with its own.
//
// Writes go on during the compare. Ceph blocks writes to the chunk's
// range; here a chunk is compared twice instead. Every map says where
// its copy's PG log ended before (first) and once (last) it was read; an
// object found differing is looked at again, metadata only, once every
// copy's log had reached the newest of the first look's lasts before its
// second map was read, so that every write any first look saw has reached
// every copy. It is inconsistent only if no copy of it
// changed between the two looks: a difference a write in flight made
// goes away or changes with it, one that survives a settled PG does not.
//
// The authoritative copy is the newest version among those that read
// back intact, the primary's on a tie; a repair (MSG_PG_REPAIR) installs
// it on the copies that differ (MSG_PG_PUSH), outside the PG log, as a
// recovery does. A copy missing an object gets it, unless the
// primary's PG log holds a delete of the object newer than every
// present copy: then the present copies are ones a delete missed (its
// RepOp lost, say), the authoritative state is "deleted", and the repair
// removes them (a push of the delete) rather than bring the object back.
// A copy newer than the logged delete is a put after it, and wins as any
// newer copy does. A delete already trimmed from the log cannot be told
// from a lost write, and the present copy wins.

// ScrubChunkObjects is how many objects one scrub map holds.
const ScrubChunkObjects = 256

const (
	// scrubMapTimeout bounds one replica's answer to a scrub map: it
	// reads back up to ScrubChunkObjects objects, paced.
	scrubMapTimeout = 5 * time.Minute
	// scrubSettle bounds the wait for every copy's log to reach the
	// writes the first look saw; past it, the differing objects of the
	// chunk are left to the next scrub rather than reported.
	scrubSettle = 10 * time.Second
)

// Error kinds of an inconsistent object, Ceph's words.
const (
	errMissing        = "missing"
	errStaleVersion   = "stale_version"
	errSizeMismatch   = "size_mismatch"
	errDigestMismatch = "data_digest_mismatch"
	errReadError      = "read_error"
)

// objName is one object of a PG.
type objName struct{ bucket, key string }

func nameOf(so *osdpb.ScrubObject) objName { return objName{so.Bucket, so.Key} }

func (a objName) compare(b objName) int {
	return cmp.Or(cmp.Compare(a.bucket, b.bucket), cmp.Compare(a.key, b.key))
}

// scrubMap reads this OSD's scrub map of store PG sid as q asks. Unless
// q is shallow each object is read back against its CRCs; a shallow map
// marks damaged the objects in damaged (what our own scrub just found).
func (o *OSD) scrubMap(ctx context.Context, sid uint32, q *osdpb.PGScrubMap, damaged map[objName]bool) (*osdpb.PGScrubMapReply, error) {
	if len(q.Names) > ScrubChunkObjects {
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "scrub map of %d names: at most %d", len(q.Names), ScrubChunkObjects)
	}
	first, _, err := o.st.PGInfo(ctx, sid)
	if err != nil {
		return nil, err
	}
	rep := &osdpb.PGScrubMapReply{First: first}
	var buf []byte
	add := func(bucket, key string, meta *osdpb.ObjectMeta, v *osdpb.Version) error {
		so := &osdpb.ScrubObject{Bucket: bucket, Key: key, Version: v, Size: meta.GetSize(), Crc32C: meta.GetCrc32C(),
			Damaged: damaged[objName{bucket, key}]}
		if !q.Shallow {
			size := meta.GetSize()
			if len(meta.GetParts()) > 0 {
				size = 0 // a manifest: its parts are objects of their own PGs
			}
			n, err := o.scrubObject(ctx, o.scrub, bucket, key, size, &buf)
			o.scrub.objects.Add(1)
			o.scrub.bytes.Add(n)
			if err != nil && !repairable(err) {
				return err
			}
			so.Damaged = err != nil
		}
		rep.Objects = append(rep.Objects, so)
		return nil
	}
	if len(q.Names) > 0 {
		for _, n := range q.Names {
			meta, v, err := o.st.HeadVersion(ctx, n.Bucket, n.Key)
			if errors.Is(err, store.ErrNoSuchKey) || errors.Is(err, store.ErrNoSuchBucket) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if err := add(n.Bucket, n.Key, meta, v); err != nil {
				return nil, err
			}
		}
	} else {
		upto := objName{q.UptoBucket, q.UptoKey}
		for e, err := range o.st.PGObjects(ctx, sid, q.AfterBucket, q.AfterKey) {
			if err != nil {
				return nil, err
			}
			if !q.ToEnd && (objName{e.Bucket, e.Key}).compare(upto) > 0 {
				break
			}
			if len(rep.Objects) == ScrubChunkObjects {
				rep.More = true
				break
			}
			if err := add(e.Bucket, e.Key, e.Meta, e.Version); err != nil {
				return nil, err
			}
		}
	}
	if hook := scrubMapRead.Load(); hook != nil {
		hook(o.id, sid, len(q.Names) > 0)
	}
	last, _, err := o.st.PGInfo(ctx, sid)
	if err != nil {
		return nil, err
	}
	rep.Last = last
	return rep, nil
}

// scrubMapRead, when set (tests, through export_test.go), runs as OSD osd
// has read the objects of a scrub map of store PG sid, before it reads
// where its log ends; names: a second look's map.
var scrubMapRead testHook[func(osd, sid uint32, names bool)]

// serveScrubMap answers a primary's MSG_PG_SCRUB_MAP. It runs on a
// goroutine of its own: a map reads up to ScrubChunkObjects objects back,
// paced, and would hold a reader for that long. A primary scrubs one PG
// at a time, so there are at most as many as there are OSDs.
func (o *OSD) serveScrubMap(m *msgr.Message) {
	var q osdpb.PGScrubMap
	if err := m.DecodeFront(&q); err != nil {
		o.badRequest(m, err) // releases m
		return
	}
	defer m.Release()
	rep, err := o.answerScrubMap(m.Conn(), &q)
	if rep == nil {
		rep = &osdpb.PGScrubMapReply{}
	}
	rep.Header = o.header(nil, err)
	o.send(replyTo(m), osdpb.MsgType_MSG_PG_SCRUB_MAP_REPLY, rep, nil)
}

func (o *OSD) answerScrubMap(c *msgr.Conn, q *osdpb.PGScrubMap) (*osdpb.PGScrubMapReply, error) {
	sid, from, err := o.fromPeerOSD(c, q.Pool, q.Pg, "scrub map")
	if err != nil {
		return nil, err
	}
	if err := o.fromPrimary(q.Pool, q.Pg, from); err != nil {
		return nil, err
	}
	if incomplete, err := o.st.PGBackfilling(o.ctx, sid); err != nil || incomplete {
		if err == nil {
			err = ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "osd.%d's copy of pg %s is being backfilled", o.id, placement.PGIDOf(sid))
		}
		return nil, err
	}
	rd, err := o.readCopy(sid)
	if err != nil {
		return nil, err
	}
	rep, err := o.scrubMap(o.ctx, sid, q, nil)
	if err == nil {
		err = rd.done()
	}
	return rep, err
}

// fromPrimary checks that OSD from is the primary of PG (pool, pg) in
// our map and we are in its acting set: only it may ask for scrub maps
// or push objects.
func (o *OSD) fromPrimary(pool, pg, from uint32) error {
	mp := o.Map()
	if primary, ok := mp.Primary(pool, pg); !ok || primary != from {
		return ops.Errorf(osdpb.Status_WRONG_PRIMARY, "osd.%d is not the primary of pg %s (epoch %d)", from, pgName(pool, pg), mp.Epoch())
	}
	if _, ok := mp.RoleOf(pool, pg, o.id); !ok {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "osd.%d is not in the acting set of pg %s (epoch %d)", o.id, pgName(pool, pg), mp.Epoch())
	}
	return nil
}

// replicaMap gathers OSD id's scrub map of the range q names, asking
// again while a reply says there is more, and where its log ended before
// (first) and after (last) it was read.
func (o *OSD) replicaMap(ctx context.Context, id uint32, q *osdpb.PGScrubMap) (objs []*osdpb.ScrubObject, first, last *osdpb.Version, err error) {
	q = proto.Clone(q).(*osdpb.PGScrubMap)
	for {
		var rep osdpb.PGScrubMapReply
		cctx, cancel := context.WithTimeout(ctx, scrubMapTimeout)
		err := o.call(cctx, id, osdpb.MsgType_MSG_PG_SCRUB_MAP, q, &rep, nil)
		cancel()
		if err == nil {
			err = ops.FromReply(rep.Header)
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("scrub map from osd.%d: %w", id, err)
		}
		if first == nil {
			first = rep.First
		}
		objs = append(objs, rep.Objects...)
		if !rep.More || len(rep.Objects) == 0 || len(q.Names) > 0 {
			return objs, first, rep.Last, nil
		}
		l := rep.Objects[len(rep.Objects)-1]
		q.AfterBucket, q.AfterKey = l.Bucket, l.Key
	}
}

// shardMaps are the scrub maps of one chunk: by OSD, by object.
type shardMaps map[uint32]map[objName]*osdpb.ScrubObject

func (sm shardMaps) add(id uint32, objs []*osdpb.ScrubObject) {
	m := make(map[objName]*osdpb.ScrubObject, len(objs))
	for _, so := range objs {
		m[nameOf(so)] = so
	}
	sm[id] = m
}

// compareMaps returns the objects whose copies in maps differ, in key
// order. acting is the PG's acting set, its primary first: the primary's
// copy wins a tie for authoritative. dels are the newest logged deletes
// of objects some copy lacks (see compareObject).
func compareMaps(acting []uint32, sm shardMaps, dels map[objName]*osdpb.Version) []*osdpb.InconsistentObject {
	names := map[objName]bool{}
	for _, m := range sm {
		for n := range m {
			names[n] = true
		}
	}
	sorted := slices.SortedFunc(maps.Keys(names), objName.compare)
	var out []*osdpb.InconsistentObject
	for _, n := range sorted {
		if io := compareObject(acting, sm, n, dels[n]); io != nil {
			out = append(out, io)
		}
	}
	return out
}

// authoritativeCopy picks the copy of object n that the others are
// compared with and a repair spreads: of the readable copies at the newest
// version, the bytes (size and CRC32C) most of them hold, and on a tie the
// earliest in acting order, the primary first. Two replicas that agree
// outvote a primary whose copy, checksums and all, says otherwise (a bad
// write, not rot its checksums would show): Ceph's scrub also looks past
// the primary for a copy that agrees with what was written.
func authoritativeCopy(acting []uint32, sm shardMaps, n objName) (*osdpb.ScrubObject, uint32) {
	var newest *osdpb.ScrubObject
	for _, id := range acting {
		if so := sm[id][n]; so != nil && !so.Damaged && (newest == nil || versionLess(newest.Version, so.Version)) {
			newest = so
		}
	}
	if newest == nil {
		return nil, 0
	}
	type bytesOf struct {
		size uint64
		crc  uint32
	}
	votes := map[bytesOf]int{}
	for _, id := range acting {
		if so := sm[id][n]; so != nil && !so.Damaged && !versionLess(so.Version, newest.Version) {
			votes[bytesOf{so.Size, so.Crc32C}]++
		}
	}
	var auth *osdpb.ScrubObject
	authOSD, best := uint32(0), 0
	for _, id := range acting { // acting order: the primary keeps a tie
		so := sm[id][n]
		if so == nil || so.Damaged || versionLess(so.Version, newest.Version) {
			continue
		}
		if v := votes[bytesOf{so.Size, so.Crc32C}]; v > best {
			auth, authOSD, best = so, id, v
		}
	}
	return auth, authOSD
}

// compareObject compares the copies of object n: nil if they agree. del
// is the version of n's newest delete in the primary's log, nil if none:
// when it is newer than every present copy, those copies are ones the
// delete missed (deletedObject).
func compareObject(acting []uint32, sm shardMaps, n objName, del *osdpb.Version) *osdpb.InconsistentObject {
	if del != nil && deletedAfterAll(acting, sm, n, del) {
		return deletedObject(acting, sm, n, del)
	}
	auth, authOSD := authoritativeCopy(acting, sm, n)
	io := &osdpb.InconsistentObject{Bucket: n.bucket, Key: n.key}
	kinds := map[string]bool{}
	for _, id := range acting {
		so := sm[id][n]
		sh := &osdpb.ScrubShard{Osd: id, Authoritative: auth != nil && id == authOSD}
		switch {
		case so == nil:
			sh.Missing = true
			sh.Errors = append(sh.Errors, errMissing)
		default:
			sh.Version, sh.Size, sh.Crc32C, sh.Damaged = so.Version, so.Size, so.Crc32C, so.Damaged
			if so.Damaged {
				sh.Errors = append(sh.Errors, errReadError)
			}
			if auth == nil || sh.Authoritative {
				break
			}
			// 0.0 is a copy a recovery installed without its version:
			// unknown, so only its bytes are compared.
			if !zeroVersion(so.Version) && !zeroVersion(auth.Version) && versionLess(so.Version, auth.Version) {
				sh.Errors = append(sh.Errors, errStaleVersion)
			}
			if so.Size != auth.Size {
				sh.Errors = append(sh.Errors, errSizeMismatch)
			} else if so.Crc32C != auth.Crc32C {
				sh.Errors = append(sh.Errors, errDigestMismatch)
			}
		}
		for _, k := range sh.Errors {
			kinds[k] = true
		}
		io.Shards = append(io.Shards, sh)
	}
	if len(kinds) == 0 {
		return nil
	}
	io.Errors = slices.Sorted(maps.Keys(kinds))
	return io
}

// deletedAfterAll reports whether some copy lacks n and delete del is
// newer than every present copy of it. A copy of unknown version (0.0,
// installed by a recovery) may be a put after the delete: then no.
func deletedAfterAll(acting []uint32, sm shardMaps, n objName, del *osdpb.Version) bool {
	absent := false
	for _, id := range acting {
		so := sm[id][n]
		switch {
		case so == nil:
			absent = true
		case zeroVersion(so.Version) || !versionLess(so.Version, del):
			return false
		}
	}
	return absent
}

// deletedObject is object n whose authoritative state is deleted at
// version del: the first copy that lacks it (in acting order, so the
// primary's if it does) is authoritative, a missing shard whose version
// is the delete's; every present copy is stale_version.
func deletedObject(acting []uint32, sm shardMaps, n objName, del *osdpb.Version) *osdpb.InconsistentObject {
	io := &osdpb.InconsistentObject{Bucket: n.bucket, Key: n.key, Errors: []string{errStaleVersion}}
	authSet := false
	for _, id := range acting {
		so := sm[id][n]
		sh := &osdpb.ScrubShard{Osd: id}
		if so == nil {
			sh.Missing = true
			if !authSet {
				sh.Authoritative, sh.Version, authSet = true, del, true
			}
		} else {
			sh.Version, sh.Size, sh.Crc32C, sh.Damaged = so.Version, so.Size, so.Crc32C, so.Damaged
			sh.Errors = []string{errStaleVersion}
			if so.Damaged {
				sh.Errors = []string{errReadError, errStaleVersion}
				io.Errors = []string{errReadError, errStaleVersion}
			}
		}
		io.Shards = append(io.Shards, sh)
	}
	return io
}

// absentSomewhere returns the objects of found that some copy lacks.
func absentSomewhere(found []*osdpb.InconsistentObject) map[objName]bool {
	out := map[objName]bool{}
	for _, io := range found {
		if slices.ContainsFunc(io.Shards, func(sh *osdpb.ScrubShard) bool { return sh.Missing }) {
			out[objName{io.Bucket, io.Key}] = true
		}
	}
	return out
}

// loggedDeletesPage is how many log entries loggedDeletes reads at once.
const loggedDeletesPage = 1024

// loggedDeletes returns the version of the newest OP_DELETE of each of
// names in our log of store PG sid. A delete already trimmed is not
// found: the log is all that remembers one.
func (o *OSD) loggedDeletes(ctx context.Context, sid uint32, names map[objName]bool) (map[objName]*osdpb.Version, error) {
	_, after, err := o.st.PGInfo(ctx, sid)
	if err != nil {
		return nil, err
	}
	dels := map[objName]*osdpb.Version{}
	for {
		entries, tooOld, err := o.st.LogAfter(ctx, sid, after, loggedDeletesPage)
		if err != nil {
			return nil, err
		}
		if tooOld {
			// Trimmed between PGInfo and here: read from the new tail.
			if _, after, err = o.st.PGInfo(ctx, sid); err != nil {
				return nil, err
			}
			continue
		}
		for _, e := range entries {
			if n := (objName{e.Bucket, e.Key}); e.Kind == osdpb.OpKind_OP_DELETE && names[n] {
				dels[n] = e.Version // entries come in version order
			}
		}
		if len(entries) < loggedDeletesPage {
			return dels, nil
		}
		after = entries[len(entries)-1].Version
	}
}

func zeroVersion(v *osdpb.Version) bool { return v.GetEpoch() == 0 && v.GetSeq() == 0 }

func versionLess(a, b *osdpb.Version) bool { return !versionLE(b, a) }

// sameCopies reports whether every copy of io is as the second look
// found it (present or not, version, size, CRC32C, damaged). A replica
// that repaired a damaged copy (its own scrub, a read repair) holds the
// same version, size and CRC32C as before: only damaged shows the change,
// and only because lookAgain read that copy back again (rereads).
func sameCopies(io *osdpb.InconsistentObject, again shardMaps) bool {
	n := objName{io.Bucket, io.Key}
	for _, sh := range io.Shards {
		so := again[sh.Osd][n]
		if sh.Missing != (so == nil) {
			return false
		}
		if so != nil && (!proto.Equal(so.Version, sh.Version) || so.Size != sh.Size || so.Crc32C != sh.Crc32C || so.Damaged != sh.Damaged) {
			return false
		}
	}
	return true
}

// rereads are the replicas whose copy of some object of found failed its
// checksums at the first look: the second look reads their copies back
// again. A shallow map says nothing of damage on a replica (it has no
// record of its own scrub's findings to give, unlike the primary's
// damaged), so without the read a copy repaired in between would keep
// the first look's read_error, and a copy still damaged would look whole.
func rereads(primary uint32, found []*osdpb.InconsistentObject) map[uint32]bool {
	ids := map[uint32]bool{}
	for _, io := range found {
		for _, sh := range io.Shards {
			if sh.Damaged && sh.Osd != primary {
				ids[sh.Osd] = true
			}
		}
	}
	return ids
}

// compareReplicas compares every chunk of the primary's copy of store PG
// sid with its replicas' (see the comment at the top), and repairs the
// inconsistent objects with repair. damaged are the objects our own
// scrub found damaged and could not repair. It returns what it found
// (the repaired objects left out) and how many it repaired.
func (o *OSD) compareReplicas(ctx context.Context, sid, pool, pg uint32, acting []uint32, damaged map[objName]bool, repair bool) (*osdpb.PGInconsistent, int, error) {
	res := &osdpb.PGInconsistent{Epoch: o.Map().Epoch(), ScrubbedUnixNano: time.Now().UnixNano()}
	repaired := 0
	after := objName{}
	for {
		own, err := o.scrubMap(ctx, sid, &osdpb.PGScrubMap{AfterBucket: after.bucket, AfterKey: after.key, ToEnd: true, Shallow: true}, damaged)
		if err != nil {
			return nil, 0, err
		}
		q := &osdpb.PGScrubMap{Epoch: o.Map().Epoch(), Pool: pool, Pg: pg, AfterBucket: after.bucket, AfterKey: after.key, ToEnd: !own.More}
		if own.More {
			l := own.Objects[len(own.Objects)-1]
			q.UptoBucket, q.UptoKey = l.Bucket, l.Key
		}
		sm := shardMaps{}
		sm.add(o.id, own.Objects)
		settle := own.Last
		for _, id := range acting[1:] {
			objs, _, last, err := o.replicaMap(ctx, id, q)
			if err != nil {
				return nil, 0, err
			}
			sm.add(id, objs)
			if versionLess(settle, last) {
				settle = last
			}
		}
		found := compareMaps(acting, sm, nil)
		if absent := absentSomewhere(found); len(absent) > 0 {
			dels, err := o.loggedDeletes(ctx, sid, absent)
			if err != nil {
				return nil, 0, err
			}
			if len(dels) > 0 {
				found = compareMaps(acting, sm, dels)
			}
		}
		if len(found) > 0 {
			found, err = o.confirm(ctx, sid, pool, pg, acting, found, settle, damaged)
			if err != nil {
				return nil, 0, err
			}
		}
		for _, io := range found {
			if repair {
				p, err := o.pgOf(sid)
				if err == nil {
					err = o.repairCopies(ctx, p, io)
				}
				if err == nil {
					repaired++
					continue
				}
				o.log.Warn("inconsistent object not repaired", "pg", placement.PGIDOf(sid), "bucket", io.Bucket, "key", io.Key, "err", err)
			}
			res.Objects = append(res.Objects, io)
		}
		if !own.More {
			return res, repaired, nil
		}
		l := own.Objects[len(own.Objects)-1]
		after = objName{l.Bucket, l.Key}
	}
}

// confirm looks at the objects found differing a second time, once every
// copy's log has reached settle, and keeps those no copy of which changed
// in between. None when the logs do not settle within scrubSettle (a
// replica that fell behind is recovering, and the next scrub compares).
func (o *OSD) confirm(ctx context.Context, sid, pool, pg uint32, acting []uint32, found []*osdpb.InconsistentObject, settle *osdpb.Version, damaged map[objName]bool) ([]*osdpb.InconsistentObject, error) {
	q := &osdpb.PGScrubMap{Epoch: o.Map().Epoch(), Pool: pool, Pg: pg, Shallow: true}
	for _, io := range found {
		q.Names = append(q.Names, &osdpb.ObjectName{Bucket: io.Bucket, Key: io.Key})
	}
	deep := rereads(o.id, found)
	deadline := time.Now().Add(scrubSettle)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		again, settled, err := o.lookAgain(ctx, sid, acting, q, deep, settle, damaged)
		if err != nil {
			return nil, err
		}
		if settled {
			var out []*osdpb.InconsistentObject
			for _, io := range found {
				if sameCopies(io, again) {
					out = append(out, io)
				}
			}
			return out, nil
		}
		if time.Now().After(deadline) {
			o.log.Info("deep scrub: copies did not settle; differing objects left to the next scrub",
				"pg", placement.PGIDOf(sid), "objects", len(found), "settle", settle)
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// lookAgain gathers every copy's shallow map of q's names, read back on
// the replicas in deep (see rereads); settled when every copy's log had
// reached settle before its map was read (a log that reached it only
// while the map was read may have objects read before the writes that
// took it there).
func (o *OSD) lookAgain(ctx context.Context, sid uint32, acting []uint32, q *osdpb.PGScrubMap, deep map[uint32]bool, settle *osdpb.Version, damaged map[objName]bool) (shardMaps, bool, error) {
	sm := shardMaps{}
	own, err := o.scrubMap(ctx, sid, q, damaged)
	if err != nil {
		return nil, false, err
	}
	sm.add(o.id, own.Objects)
	settled := versionLE(settle, own.First)
	deepQ := proto.Clone(q).(*osdpb.PGScrubMap)
	deepQ.Shallow = false
	for _, id := range acting[1:] {
		rq := q
		if deep[id] {
			rq = deepQ
		}
		objs, first, _, err := o.replicaMap(ctx, id, rq)
		if err != nil {
			return nil, false, err
		}
		sm.add(id, objs)
		settled = settled && versionLE(settle, first)
	}
	return sm, settled, nil
}

// repairCopies installs the authoritative copy of io on every copy that
// differs from it: fetched first when it is a replica's (the backfill's
// exact read, which carries the object's version), then pushed to the
// replicas that differ. An authoritative copy that is missing is a logged
// delete (deletedObject): the delete is installed instead.
func (o *OSD) repairCopies(ctx context.Context, p *pgState, io *osdpb.InconsistentObject) error {
	i := slices.IndexFunc(io.Shards, func(sh *osdpb.ScrubShard) bool { return sh.Authoritative })
	if i < 0 {
		return errors.New("no copy reads back intact")
	}
	auth := io.Shards[i]
	var e *osdpb.LogEntry
	var data []byte
	switch {
	case auth.Missing:
		e = &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE, Bucket: io.Bucket, Key: io.Key, Version: auth.Version}
		if auth.Osd != o.id {
			if err := o.onShardWait(ctx, p.sid, func() error { return o.installNewer(ctx, p, o.id, e, nil) }); err != nil {
				return fmt.Errorf("removing our stale copy: %w", err)
			}
		}
	case auth.Osd == o.id:
		meta, v, err := o.st.HeadVersion(ctx, io.Bucket, io.Key)
		if err != nil {
			return err
		}
		if !proto.Equal(v, auth.Version) {
			return errRepairRaced
		}
		if len(meta.GetParts()) == 0 {
			if _, data, err = o.st.ReadRange(ctx, io.Bucket, io.Key, 0, -1, nil); err != nil {
				return err
			}
		}
		e = &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Bucket: io.Bucket, Key: io.Key, Meta: meta, Version: v}
	default:
		f, release, err := o.fetch(ctx, p, auth.Osd, &osdpb.PGBackfill{AfterBucket: io.Bucket, AfterKey: io.Key, Exact: true})
		if err != nil {
			return err
		}
		defer release()
		e, data = f.Entry, f.data
		if e.GetKind() != osdpb.OpKind_OP_PUT || !proto.Equal(e.Version, auth.Version) {
			return errRepairRaced
		}
		if err := o.onShardWait(ctx, p.sid, func() error { return o.installNewer(ctx, p, auth.Osd, e, data) }); err != nil {
			return fmt.Errorf("installing osd.%d's copy here: %w", auth.Osd, err)
		}
	}
	var errs []error
	for _, sh := range io.Shards {
		if sh.Osd == o.id || sh.Osd == auth.Osd || len(sh.Errors) == 0 {
			continue
		}
		q := &osdpb.PGPush{Epoch: o.Map().Epoch(), Pool: p.pool, Pg: p.pg, Entry: e}
		var rep osdpb.PGPushReply
		err := o.callWith(ctx, sh.Osd, osdpb.MsgType_MSG_PG_PUSH, q, data, &rep, nil)
		if err == nil {
			err = ops.FromReply(rep.Header)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("push to osd.%d: %w", sh.Osd, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	o.log.Warn("inconsistent object repaired", "pg", placement.PGIDOf(p.sid), "bucket", io.Bucket, "key", io.Key,
		"from", auth.Osd, "errors", io.Errors)
	return nil
}

// installNewer installs e (a repair's copy or delete, from OSD from)
// unless our copy is already newer: a write that came after the scrub
// looked is not undone. Runs on p's shard, where RepOps of the PG apply.
func (o *OSD) installNewer(ctx context.Context, p *pgState, from uint32, e *osdpb.LogEntry, data []byte) error {
	_, cur, err := o.st.HeadVersion(ctx, e.Bucket, e.Key)
	if err == nil && versionLess(e.Version, cur) {
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "%s/%s: our copy (%d.%d) is newer than the pushed one", e.Bucket, e.Key, cur.GetEpoch(), cur.GetSeq())
	}
	return o.install(ctx, p, from, e, data)
}

// onShardWait runs f on store PG sid's shard and waits for it. When it
// returns, f has run or never will: a caller that gave up waiting (ctx)
// still owns what f uses, a body to install say, and may release it.
func (o *OSD) onShardWait(ctx context.Context, sid uint32, f func() error) error {
	var mu sync.Mutex // held while f runs
	abandoned := false
	done := make(chan error, 1)
	run := func() {
		mu.Lock()
		defer mu.Unlock()
		if !abandoned {
			done <- f()
		}
	}
	select {
	case o.shardOf(sid) <- run:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		mu.Lock() // an f under way ends first (it sees ctx too)
		abandoned = true
		mu.Unlock()
		select {
		case err := <-done:
			return err
		default:
			return ctx.Err()
		}
	}
}

// servePush installs a primary's MSG_PG_PUSH. f owns m.
func (o *OSD) servePush(m *msgr.Message) {
	var q osdpb.PGPush
	if err := m.DecodeFront(&q); err != nil {
		o.badRequest(m, err)
		return
	}
	to := replyTo(m)
	reply := func(err error) {
		o.send(to, osdpb.MsgType_MSG_PG_PUSH_REPLY, &osdpb.PGPushReply{Header: o.header(nil, err)}, nil)
		m.Release()
	}
	sid, from, err := o.fromPeerOSD(m.Conn(), q.Pool, q.Pg, "push")
	if err == nil {
		err = o.fromPrimary(q.Pool, q.Pg, from)
	}
	if err == nil {
		err = o.checkPush(&q)
	}
	if err != nil {
		reply(err)
		return
	}
	o.onShard(m, sid, func() {
		p, err := o.pgOf(sid)
		if err == nil {
			ctx, cancel := context.WithTimeout(o.ctx, repairTimeout)
			err = o.installNewer(ctx, p, from, q.Entry, m.Data)
			cancel()
		}
		reply(err)
	})
}

// checkPush checks that a push is an object of its PG (or its delete),
// with a version.
func (o *OSD) checkPush(q *osdpb.PGPush) error {
	e := q.Entry
	put := e.GetKind() == osdpb.OpKind_OP_PUT && e.GetMeta() != nil
	del := e.GetKind() == osdpb.OpKind_OP_DELETE && e.GetMeta() == nil
	if !put && !del || e.GetVersion() == nil {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "push: want an object (OP_PUT) with its version and metadata, or its delete (OP_DELETE) with its version")
	}
	pool, ok := o.Map().Pool(q.Pool)
	if !ok || q.Pg == placement.MetaPG || placement.PGOf(pool, e.Bucket, e.Key) != q.Pg {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "push: %s/%s is not an object of pg %s", e.Bucket, e.Key, pgName(q.Pool, q.Pg))
	}
	return nil
}

// listInconsistent is what the last compare of PG (pool, pg), which we
// must lead, recorded (MSG_PG_LIST_INCONSISTENT).
func (o *OSD) listInconsistent(pool, pg uint32) (*osdpb.PGInconsistent, error) {
	sid, err := o.peerPG(pool, pg)
	if err != nil {
		return nil, err
	}
	mp := o.Map()
	if primary, ok := mp.Primary(pool, pg); !ok || primary != o.id {
		return nil, ops.Errorf(osdpb.Status_WRONG_PRIMARY, "osd.%d is not the primary of pg %s (epoch %d)", o.id, placement.PGIDOf(sid), mp.Epoch())
	}
	r, err := o.st.PGInconsistent(o.ctx, sid)
	if err != nil {
		return nil, err
	}
	if r == nil {
		r = &osdpb.PGInconsistent{}
	}
	return r, nil
}
