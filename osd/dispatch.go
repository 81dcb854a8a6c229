package osd

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// replyTimeout bounds sending one reply: a client that stops reading
// loses its replies, not the OSD's goroutines.
const replyTimeout = 30 * time.Second

// publicDispatcher serves clients.
type publicDispatcher struct{ o *OSD }

func (d publicDispatcher) Dispatch(m *msgr.Message) { d.o.dispatchClient(m, false) }

func (d publicDispatcher) HandleEvent(ev msgr.Event) {
	d.o.log.Debug("public conn event", "event", ev.Kind, "conn", ev.Conn, "err", ev.Err)
	if ev.Kind == msgr.EventReset {
		d.o.opTimes.dropConn(ev.Conn)
	}
}

// send sends pb (and payload, whose reference it takes over) as a message
// of type t on c, without ever blocking the caller: replies go out from
// shard goroutines and from the dispatchers of peer sessions, which must
// not stall because one client stopped reading. A full send queue hands
// the message to a goroutine that waits up to replyTimeout. Errors are
// the peer's problem: it is gone or not reading.
func (o *OSD) send(to dest, t osdpb.MsgType, pb proto.Message, payload *wire.Buffer) {
	o.sendCRC(to, t, pb, payload, payloadCRC{})
}

// dest is where a message goes: a session, and the tid the message
// carries in its envelope (msgr.Message.SetTid): a reply's is its
// request's, which the requester matches it by.
type dest struct {
	c   *msgr.Conn
	tid uint64
}

// replyTo is the destination of the reply to req.
func replyTo(req *msgr.Message) dest { return dest{req.Conn(), req.Tid()} }

// payloadCRC is what the OSD knows of a payload's CRC32C without reading
// it: nothing, the CRC of bytes it checked (known), or the CRC the store
// recorded for bytes it did not check (source).
type payloadCRC struct {
	crc           uint32
	known, source bool
}

// sendCRC is send with the payload's CRC32C, when known, handed to the
// messenger so that it does not read the payload again to compute it: as
// the data's (Message.SetDataCRC), or as what the data should be
// (Message.SetSourceCRC), which the receiver checks them against.
func (o *OSD) sendCRC(to dest, t osdpb.MsgType, pb proto.Message, payload *wire.Buffer, pc payloadCRC) {
	o.opTimes.done(to, t)
	c := to.c
	front, err := proto.Marshal(pb)
	if err != nil {
		o.log.Error("marshal reply", "type", t, "err", err)
		if payload != nil {
			payload.Release()
		}
		return
	}
	m := msgr.NewMessage(uint16(t), front, nil)
	m.SetTid(to.tid)
	if payload != nil {
		m.SetPayload(payload)
		switch {
		case pc.known:
			m.SetDataCRC(pc.crc)
		case pc.source:
			m.SetSourceCRC(pc.crc)
		}
	}
	err = c.TrySend(m)
	if errors.Is(err, msgr.ErrWouldBlock) {
		o.wg.Go(func() {
			ctx, cancel := context.WithTimeout(o.ctx, replyTimeout)
			defer cancel()
			if err := c.Send(ctx, m); err != nil {
				m.Release()
				o.log.Debug("send failed", "type", t, "conn", c, "err", err)
			}
		})
		return
	}
	if err != nil {
		m.Release()
		o.log.Debug("send failed", "type", t, "conn", c, "err", err)
	}
}

// header builds a reply header for a request with header req: the status
// of err, our epoch, the request id, and our map when the sender's is older.
func (o *OSD) header(req *osdpb.Header, err error) *osdpb.ReplyHeader {
	mp := o.Map()
	st, msg := ops.StatusOf(opError(err))
	h := &osdpb.ReplyHeader{Status: st, Message: msg, Epoch: mp.Epoch(), Req: req.GetReq()}
	if req.GetEpoch() < mp.Epoch() {
		h.Map = mp.Proto()
	}
	if st == osdpb.Status_INTERNAL_ERROR {
		o.log.Warn("op failed", "req", req.GetReq(), "err", err)
	}
	return h
}

// opError maps store errors to the op statuses clients see.
func opError(err error) error {
	var oe *ops.Error
	switch {
	case err == nil, errors.As(err, &oe):
		return err
	case errors.Is(err, store.ErrNoSuchBucket):
		// Not found needs no message: the requester knows what it asked
		// for, and the store's wording ("store: head ...") is ours.
		return &ops.Error{Status: osdpb.Status_NO_SUCH_BUCKET}
	case errors.Is(err, store.ErrNoSuchKey):
		return &ops.Error{Status: osdpb.Status_NO_SUCH_KEY}
	case errors.Is(err, store.ErrBucketExists):
		return ops.Errorf(osdpb.Status_BUCKET_ALREADY_EXISTS, "%v", err)
	case errors.Is(err, store.ErrInvalidKey):
		return ops.Errorf(osdpb.Status_INVALID_KEY, "%v", err)
	case errors.Is(err, store.ErrInvalidRange):
		return ops.Errorf(osdpb.Status_INVALID_RANGE, "%v", err)
	case errors.Is(err, store.ErrBadDigest):
		return ops.Errorf(osdpb.Status_BAD_DIGEST, "%v", err)
	case errors.Is(err, store.ErrInvalidArgument):
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%v", err)
	case store.IsNoSpace(err):
		return ops.Errorf(osdpb.Status_STORAGE_FULL, "%v", err)
	case errors.Is(err, store.ErrClosed), errors.Is(err, context.Canceled),
		// A peer that did not answer in time (call): it may be stopped,
		// or slow; the client retries, as for any OSD that goes.
		errors.Is(err, context.DeadlineExceeded):
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "%v", err)
	}
	return err
}

// badRequest answers a request that could not be decoded or is of an
// unknown type. Every reply has its ReplyHeader as field 1, so one shape
// serves; a type that is not a request gets no reply.
func (o *OSD) badRequest(m *msgr.Message, err error) {
	o.refuse(m, "bad request", ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%v", err))
}

// refuse answers m with err, logged (rate-limited) as kind, and releases
// it. Every reply front starts with its header as field 1, so a
// BucketReply serves for all.
func (o *OSD) refuse(m *msgr.Message, kind string, err *ops.Error) {
	t := osdpb.MsgType(m.Type)
	o.ratelog.Log(o.log, slog.LevelInfo, kind, kind, "type", t, "conn", m.Conn(), "err", err)
	if ops.IsRequest(t) {
		var req osdpb.BucketRequest
		_ = proto.Unmarshal(m.Front, &req) // best effort, for the request id
		o.send(replyTo(m), ops.ReplyType(t), &osdpb.BucketReply{Header: o.header(req.Header, err)}, nil)
	}
	m.Release()
}

// permitted checks m's op on bucket against the peer's caps
// (authTables.opAllowed); when it is refused, m is answered ACCESS_DENIED
// and released.
func (o *OSD) permitted(m *msgr.Message, bucket string) bool {
	err := o.authz.opAllowed(m.Conn().Peer(), osdpb.MsgType(m.Type), bucket)
	if err == nil {
		return true
	}
	o.refuse(m, "access denied", err)
	return false
}

// bucketRequest is a client request on a bucket: every one but GET_MAP.
type bucketRequest interface {
	proto.Message
	GetBucket() string
}

// admit decodes m's front into req and checks the peer may do m's op on
// req's bucket. When either fails, m is answered and released, and admit
// returns false.
func (o *OSD) admit(m *msgr.Message, req bucketRequest) bool {
	_, ok := o.admitRead(m, req)
	return ok
}

// admitRead is admit for an op that reads: byUpload says the peer was let
// through on an upload id alone (authTables.hiddenAllowed), so that what
// it reads must be parts and pieces of buckets it may read
// (authTables.partReadable).
func (o *OSD) admitRead(m *msgr.Message, req bucketRequest) (byUpload, ok bool) {
	if err := m.DecodeFront(req); err != nil {
		o.badRequest(m, err)
		return false, false
	}
	if req.GetBucket() == ops.MultipartBucket {
		return o.admitHidden(m, req)
	}
	return false, o.permitted(m, req.GetBucket())
}

// admitHidden checks an op on the multipart bucket by the object's key,
// or a listing's prefix (authTables.hiddenAllowed); when it is refused,
// m is answered ACCESS_DENIED and released.
func (o *OSD) admitHidden(m *msgr.Message, req bucketRequest) (byUpload, ok bool) {
	key, list := "", false
	switch r := req.(type) {
	case *osdpb.ListObjects:
		key, list = r.GetPrefix(), true
	case interface{ GetKey() string }:
		key = r.GetKey()
	}
	byUpload, err := o.authz.hiddenAllowed(m.Conn().Peer(), osdpb.MsgType(m.Type), key, list)
	if err != nil {
		o.refuse(m, "access denied", err)
		return false, false
	}
	return byUpload, true
}

// target checks that the op of hdr on (bucket, key) belongs here: epochs,
// pool, PG and primary. key "" with meta set means the bucket's meta PG.
func (o *OSD) target(hdr *osdpb.Header, bucket, key string, meta bool) (*placement.Map, *osdpb.Pool, uint32, error) {
	mp := o.Map()
	if hdr == nil {
		return nil, nil, 0, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "request without a header")
	}
	if hdr.Epoch > mp.Epoch() {
		mp = o.refreshMap()
		if hdr.Epoch > mp.Epoch() {
			return nil, nil, 0, ops.Errorf(osdpb.Status_STALE_EPOCH, "osd.%d has epoch %d, the request %d", o.id, mp.Epoch(), hdr.Epoch)
		}
	}
	pool, ok := mp.Pool(hdr.Pool)
	if !ok {
		return nil, nil, 0, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "no pool %d in epoch %d", hdr.Pool, mp.Epoch())
	}
	pg := uint32(placement.MetaPG)
	if !meta {
		pg = ops.StoredPG(pool, bucket, key)
	}
	if hdr.Pg != pg {
		return nil, nil, 0, ops.Errorf(osdpb.Status_WRONG_PRIMARY, "%s/%s is in pg %d, not %d (epoch %d)", bucket, key, pg, hdr.Pg, mp.Epoch())
	}
	if p, _ := mp.Primary(pool.Id, pg); p != o.id {
		return nil, nil, 0, ops.Errorf(osdpb.Status_WRONG_PRIMARY, "pg %s: primary is osd.%d, not osd.%d (epoch %d)", pgName(pool.Id, pg), p, o.id, mp.Epoch())
	}
	return mp, pool, pg, nil
}

// clientReceived runs as OSD osd takes up a client's message, which it
// drops unanswered when the hook returns true (an OSD frozen as seen from
// its clients).
var clientReceived testHook[func(osd uint32, t osdpb.MsgType) bool]

// dispatchClient routes one client op: writes to their PG's shard, reads
// to the reader pool. fromPeer marks ops that came over the cluster
// network (a bucket-emptiness check).
func (o *OSD) dispatchClient(m *msgr.Message, fromPeer bool) {
	t := osdpb.MsgType(m.Type)
	if h := clientReceived.Load(); h != nil && !fromPeer && h(o.id, t) {
		m.Release()
		return
	}
	o.opTimes.start(m, t)
	if !fromPeer && t != osdpb.MsgType_MSG_GET_MAP {
		o.opsServed.Add(1)
		o.clientWriteBytes.Add(uint64(len(m.Data)))
	}
	switch t {
	case osdpb.MsgType_MSG_GET_MAP:
		var req osdpb.GetMap
		if err := m.DecodeFront(&req); err != nil {
			o.badRequest(m, err)
			return
		}
		rep := &osdpb.GetMapReply{Header: &osdpb.ReplyHeader{Epoch: o.Map().Epoch()}, Map: o.Map().Proto()}
		if req.Epoch != 0 {
			// A past epoch, for a peer filling its history.
			if past, ok := o.mapAt(req.Epoch); ok {
				rep.Map = past.Proto()
			} else {
				rep.Map = nil
				rep.Header = o.header(nil, ops.Errorf(osdpb.Status_NO_SUCH_KEY, "map epoch %d is not in osd.%d's history", req.Epoch, o.id))
			}
		}
		o.send(replyTo(m), ops.ReplyType(t), rep, nil)
		m.Release()

	case osdpb.MsgType_MSG_CREATE_BUCKET, osdpb.MsgType_MSG_DELETE_BUCKET:
		var req osdpb.BucketRequest
		if !o.admit(m, &req) {
			return
		}
		o.onShard(m, storePG(0, placement.MetaPG), func() { o.bucketWrite(m, &req) })

	case osdpb.MsgType_MSG_HEAD_BUCKET, osdpb.MsgType_MSG_LIST_BUCKETS:
		var req osdpb.BucketRequest
		if !o.admit(m, &req) {
			return
		}
		o.onReaders(m, func() { o.bucketRead(m, &req) })

	case osdpb.MsgType_MSG_PUT_OBJECT, osdpb.MsgType_MSG_PUT_OBJECT_IF:
		var req osdpb.PutObject
		if !o.admit(m, &req) {
			return
		}
		if len(req.Meta.GetParts()) > 0 {
			if err := o.authz.manifestAllowed(m.Conn().Peer(), t); err != nil {
				o.refuse(m, "access denied", err)
				return
			}
		}
		o.objectWrite(m, req.Header, req.Bucket, req.Key, req.Condition, objectReply, func(e *osdpb.LogEntry) error {
			if err := conditionFor(t, t == osdpb.MsgType_MSG_PUT_OBJECT_IF, req.Condition); err != nil {
				return err
			}
			meta := req.Meta
			if meta == nil {
				meta = &osdpb.ObjectMeta{}
			}
			if len(meta.Parts) == 0 && meta.Size != uint64(len(m.Data)) {
				return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "meta says %d bytes, the body has %d", meta.Size, len(m.Data))
			}
			if len(m.Data) > ops.MaxPutSize {
				return ops.Errorf(osdpb.Status_ENTITY_TOO_LARGE, "%d bytes; a single put takes at most %d", len(m.Data), ops.MaxPutSize)
			}
			meta.MtimeUnixNano = time.Now().UnixNano()
			e.Kind, e.Meta = osdpb.OpKind_OP_PUT, meta
			return nil
		})

	case osdpb.MsgType_MSG_DELETE_OBJECT, osdpb.MsgType_MSG_DELETE_OBJECT_IF:
		var req osdpb.ObjectRequest
		if !o.admit(m, &req) {
			return
		}
		o.objectWrite(m, req.Header, req.Bucket, req.Key, req.Condition, objectReply, func(e *osdpb.LogEntry) error {
			if err := conditionFor(t, t == osdpb.MsgType_MSG_DELETE_OBJECT_IF, req.Condition); err != nil {
				return err
			}
			if req.Condition.GetIfNoneMatchStar() {
				return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "If-None-Match on a delete: a delete takes If-Match only")
			}
			e.Kind = osdpb.OpKind_OP_DELETE
			return nil
		})

	case osdpb.MsgType_MSG_GET_OBJECT:
		var req osdpb.GetObject
		byUpload, ok := o.admitRead(m, &req)
		if !ok {
			return
		}
		o.onReaders(m, func() { o.getObject(m, &req, byUpload) })

	case osdpb.MsgType_MSG_HEAD_OBJECT:
		var req osdpb.ObjectRequest
		byUpload, ok := o.admitRead(m, &req)
		if !ok {
			return
		}
		if err := conditionFor(t, false, req.Condition); err != nil {
			o.send(replyTo(m), ops.ReplyType(t), &osdpb.ObjectReply{Header: o.header(req.Header, err)}, nil)
			m.Release()
			return
		}
		o.onReaders(m, func() {
			o.getObject(m, &osdpb.GetObject{Header: req.Header, Bucket: req.Bucket, Key: req.Key, HasRange: true, Length: 0}, byUpload)
		})

	case osdpb.MsgType_MSG_LIST_OBJECTS:
		var req osdpb.ListObjects
		byUpload, ok := o.admitRead(m, &req)
		if !ok {
			return
		}
		o.onReaders(m, func() { o.listObjects(m, &req, fromPeer, byUpload) })

	case osdpb.MsgType_MSG_CREATE_UPLOAD, osdpb.MsgType_MSG_UPLOAD_PART, osdpb.MsgType_MSG_COMPLETE_UPLOAD, osdpb.MsgType_MSG_COMPLETE_UPLOAD_IF,
		osdpb.MsgType_MSG_ABORT_UPLOAD:
		var req osdpb.UploadRequest
		if !o.admit(m, &req) {
			return
		}
		o.upload(m, &req)

	case osdpb.MsgType_MSG_PG_SCRUB:
		var req osdpb.PGScrub
		if err := m.DecodeFront(&req); err != nil {
			o.badRequest(m, err)
			return
		}
		if err := o.authz.adminAllowed(m.Conn().Peer(), "scrub"); err != nil {
			o.refuse(m, "access denied", err)
			return
		}
		n, err := o.requestScrub(&req)
		o.send(replyTo(m), ops.ReplyType(t), &osdpb.PGScrubReply{Header: o.header(req.Header, err), Queued: uint32(n)}, nil)
		m.Release()

	case osdpb.MsgType_MSG_PG_REPAIR:
		var req osdpb.PGRepair
		if err := m.DecodeFront(&req); err != nil {
			o.badRequest(m, err)
			return
		}
		if err := o.authz.adminAllowed(m.Conn().Peer(), "repair"); err != nil {
			o.refuse(m, "access denied", err)
			return
		}
		// A repair reads the whole PG back: it answers when done, from a
		// goroutine of its own, not the dispatcher's.
		o.wg.Go(func() {
			defer m.Release()
			res, err := o.RepairPG(o.ctx, req.Header.GetPool(), req.Header.GetPg())
			o.send(replyTo(m), ops.ReplyType(t), &osdpb.PGRepairReply{Header: o.header(req.Header, err),
				Inconsistent: uint32(res.Inconsistent), Repaired: uint32(res.Fixed)}, nil)
		})

	case osdpb.MsgType_MSG_PG_LIST_INCONSISTENT:
		var req osdpb.PGListInconsistent
		if err := m.DecodeFront(&req); err != nil {
			o.badRequest(m, err)
			return
		}
		if err := o.authz.adminAllowed(m.Conn().Peer(), "list inconsistent objects"); err != nil {
			o.refuse(m, "access denied", err)
			return
		}
		r, err := o.listInconsistent(req.Header.GetPool(), req.Header.GetPg())
		o.send(replyTo(m), ops.ReplyType(t), &osdpb.PGListInconsistentReply{Header: o.header(req.Header, err), Result: r}, nil)
		m.Release()

	case osdpb.MsgType_MSG_PG_INSPECT:
		var req osdpb.PGInspect
		if err := m.DecodeFront(&req); err != nil {
			o.badRequest(m, err)
			return
		}
		if err := o.authz.adminAllowed(m.Conn().Peer(), "query a pg"); err != nil {
			o.refuse(m, "access denied", err)
			return
		}
		pool, pg := req.Header.GetPool(), req.Header.GetPg()
		reply := func(out string, err error) {
			o.send(replyTo(m), ops.ReplyType(t), &osdpb.PGInspectReply{Header: o.header(req.Header, err), Output: out}, nil)
			m.Release()
		}
		sid, err := o.peerPG(pool, pg)
		if err != nil {
			reply("", err)
			return
		}
		// The PG's shard owns its peering machine, which the answer reads.
		o.onShard(m, sid, func() { reply(o.inspectPG(pool, pg)) })

	default:
		o.badRequest(m, errors.New("unknown op"))
	}
}

// onShard runs f on the shard of store PG sid; f owns m.
func (o *OSD) onShard(m *msgr.Message, sid uint32, f func()) {
	o.queue(m, o.shardOf(sid), f)
}

// onReaders runs f on the reader pool; f owns m.
func (o *OSD) onReaders(m *msgr.Message, f func()) {
	o.queue(m, o.readers, f)
}

// queue runs f from q; f owns m. An op the OSD drops unqueued, as it
// shuts down, gets no reply and leaves the ops in flight.
func (o *OSD) queue(m *msgr.Message, q chan func(), f func()) {
	if !o.enqueue(q, f) {
		o.opTimes.drop(m)
		m.Release()
	}
}

// bucketRead serves HEAD_BUCKET and LIST_BUCKETS from the bucket records,
// at the meta PG's primary.
func (o *OSD) bucketRead(m *msgr.Message, req *osdpb.BucketRequest) {
	defer m.Release()
	t := osdpb.MsgType(m.Type)
	isList := t == osdpb.MsgType_MSG_LIST_BUCKETS
	_, _, _, err := o.target(req.Header, req.Bucket, "", true)
	if err == nil {
		// A new primary answers from the bucket records once it has
		// caught up on them, not before.
		err = o.peeringErr(placement.MetaPG)
	}
	if err == nil && !isList {
		err = ops.CheckBucketName(req.Bucket)
	}
	if err != nil {
		if isList {
			o.send(replyTo(m), ops.ReplyType(t), &osdpb.ListBucketsReply{Header: o.header(req.Header, err)}, nil)
		} else {
			o.send(replyTo(m), ops.ReplyType(t), &osdpb.BucketReply{Header: o.header(req.Header, err)}, nil)
		}
		return
	}
	if isList {
		var rep osdpb.ListBucketsReply
		for b, err2 := range o.st.Buckets(o.ctx) {
			if err2 != nil {
				err = err2
				break
			}
			// Only the buckets the caller may read: a client whose caps
			// name buckets lists those (opAllowed let it list).
			if b.Name != ops.MultipartBucket && o.authz.opAllowed(m.Conn().Peer(), osdpb.MsgType_MSG_HEAD_BUCKET, b.Name) == nil {
				rep.Buckets = append(rep.Buckets, b)
			}
		}
		if err != nil {
			rep.Buckets = nil
		}
		rep.Header = o.header(req.Header, err)
		o.send(replyTo(m), ops.ReplyType(t), &rep, nil)
		return
	}
	info, err := o.st.HeadBucket(o.ctx, req.Bucket)
	o.send(replyTo(m), ops.ReplyType(t), &osdpb.BucketReply{Header: o.header(req.Header, err), Info: info}, nil)
}

// getObject serves GET_OBJECT and HEAD_OBJECT (a zero-length range) at the
// PG's primary. The bytes go into a buffer from the client's conn, which on
// RDMA is registered memory the client reads without a copy.
func (o *OSD) getObject(m *msgr.Message, req *osdpb.GetObject, byUpload bool) {
	defer m.Release()
	t, to := osdpb.MsgType(m.Type), replyTo(m)
	fail := func(err error) {
		o.bucketAnswer(req.Bucket, err, func(err error) {
			o.send(to, ops.ReplyType(t), &osdpb.ObjectReply{Header: o.header(req.Header, err)}, nil)
		})
	}
	if err := checkNames(req.Bucket, req.Key); err != nil {
		fail(err)
		return
	}
	_, pool, pg, err := o.target(req.Header, req.Bucket, req.Key, false)
	holdFor := o.st.KeepReplacedFor()
	if err == nil && req.HoldParts != "" {
		// A reader holds its parts (partholds.go): nothing is read, as
		// the object may be another, or gone, by now, so the primary
		// takes it while it peers too (a map just made it the primary,
		// and the one before asks it for the holds).
		upload, ok := uploadOfPart(req.HoldParts)
		if !ok || req.Bucket == ops.MultipartBucket {
			fail(ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "hold_parts %.64q: not a part of a multipart object of a bucket", req.HoldParts))
			return
		}
		rep := &osdpb.ObjectReply{Header: o.header(req.Header, nil)}
		if holdFor > 0 && o.partHolds.hold(req.Bucket, upload, holdFor) {
			rep.HoldMs = msOf(holdFor)
		}
		o.send(to, ops.ReplyType(t), rep, nil)
		return
	}
	if err == nil {
		err = o.peeringErr(storePG(pool.Id, pg))
	}
	if err != nil {
		fail(err)
		return
	}
	if byUpload || t == osdpb.MsgType_MSG_HEAD_OBJECT {
		meta, err := o.st.Head(o.ctx, req.Bucket, req.Key)
		if err == nil && byUpload {
			// A part let through by its upload id: its bucket's readers
			// only, checked on its metadata before anything is read (or
			// repaired) for a caller that may not have it, and before the
			// read's own errors (a range past its end) say anything of it.
			err = o.authz.partReadable(m.Conn().Peer(), meta)
		}
		if err != nil {
			fail(err)
			return
		}
		if t == osdpb.MsgType_MSG_HEAD_OBJECT {
			o.send(replyTo(m), ops.ReplyType(t), &osdpb.ObjectReply{Header: o.header(req.Header, nil), Meta: meta}, nil)
			return
		}
	}
	off, length := uint64(0), int64(-1)
	if req.HasRange {
		off, length = req.Offset, req.Length
	}
	ropts := store.ReadOptions{Unchecked: req.ClientChecks, Recheck: req.Recheck, Want: req.Want}
	meta, buf, crc, known, err := o.getInto(m.Conn(), req.Bucket, req.Key, int64(off), length, ropts)
	if repairable(err) {
		// Our copy is damaged: a replica's serves (repair.go).
		if rerr := o.readRepair(pool.Id, pg, req.Bucket, req.Key, err); rerr != nil {
			err = rerr
		} else {
			meta, buf, crc, known, err = o.getInto(m.Conn(), req.Bucket, req.Key, int64(off), length, ropts)
		}
	}
	if err != nil {
		fail(err)
		return
	}
	rep := &osdpb.ObjectReply{Header: o.header(req.Header, nil), Meta: meta, Offset: off}
	if !byUpload && len(meta.Parts) > 0 {
		rep.HoldMs = msOf(holdFor)
	}
	var pc payloadCRC
	if buf != nil {
		o.clientReadBytes.Add(uint64(len(buf.B)))
		whole := off == 0 && uint64(len(buf.B)) == meta.Size && len(meta.Parts) == 0
		if !known && whole {
			crc, known = meta.Crc32C, true
		}
		switch {
		case req.ClientChecks && known:
			// The client checks the bytes against the CRC the store
			// recorded, checked here or not: sent as the source's
			// claim, bytes damaged on disk, or in the read cache's
			// memory since they were checked, reach it as a mismatch
			// it reads again, never as a link fault replayed forever.
			rep.DataCrc32C = &crc
			pc = payloadCRC{crc: crc, source: true}
		case whole:
			// Checked chunk by chunk against the chunks' CRCs, which
			// make up the object's CRC32C: the messenger need not read
			// it again.
			pc = payloadCRC{crc: crc, known: true}
		}
	}
	o.sendCRC(replyTo(m), ops.ReplyType(t), rep, buf, pc)
}

// getInto reads [off, off+length) of an object (length -1: to the end)
// as a get's payload for c, with no copy in the OSD: the bytes of an object in a
// data file are lent by the store's cache of verified extents, read into
// it with O_DIRECT on a miss (store.ReadShared), and the buffer returns
// them when the messenger is done with it (on RDMA the cache is in
// memory registered with the public messenger's transport, cacheMemory,
// so the peer reads them from there too); a small object's bytes, in
// Pebble, go into a buffer from c, which on RDMA is registered memory the
// peer reads without a copy. The caller owns the returned buffer (nil for
// an empty range or a manifest). crc, when known, is the CRC32C the store
// recorded for the bytes (store.Shared.CRC). opts are the store's: with
// Unchecked (the client checks the bytes against the reply's data_crc32c)
// a data file's bytes are not checked here; Recheck reads them from the
// disk, checked. Its Alloc is getInto's.
func (o *OSD) getInto(c *msgr.Conn, bucket, key string, off, length int64, opts store.ReadOptions) (_ *osdpb.ObjectMeta, _ *wire.Buffer, crc uint32, known bool, _ error) {
	var buf *wire.Buffer
	alloc := func(n int) []byte {
		var err error
		if buf, err = c.AllocPayload(n); err != nil {
			// The conn has no memory of its own to give (its link is
			// gone, or its registered pool is spent): ordinary memory
			// serves, at the price of a copy on RDMA.
			buf = wire.GetBuffer(n)
		}
		return buf.B
	}
	opts.Alloc = alloc
	meta, sh, err := o.st.ReadShared(o.ctx, bucket, key, off, length, opts)
	switch {
	case err != nil:
		if buf != nil {
			buf.Release()
		}
		return nil, nil, 0, false, err
	case len(sh.B) == 0:
		if buf != nil {
			buf.Release()
		}
		sh.Release()
		return meta, nil, 0, false, nil
	case buf != nil:
		buf.B = sh.B // in buf's memory: the store appended to buf.B[:0]
		return meta, buf, sh.CRC, sh.HasCRC, nil
	}
	return meta, sh.Buffer(), sh.CRC, sh.HasCRC, nil
}

// cacheMemory is the store's read-cache allocator (store.Options.
// ReadCacheAlloc): memory registered with the public messenger's
// transport (Messenger.AllocRegistered), so that getInto's reply from a
// cached extent carries a buffer the RDMA rendezvous sends where it lies,
// with no copy, instead of copying 4 MiB into a registered buffer per get.
// Before the messenger exists, and on TCP, it has none to give and the
// store uses its own memory, as it always does for a TCP-only OSD.
type cacheMemory struct {
	pub atomic.Pointer[msgr.Messenger]
}

func (c *cacheMemory) AllocAligned(n int) (*wire.Buffer, error) {
	m := c.pub.Load()
	if m == nil {
		return nil, store.ErrAllocUnavailable
	}
	buf, err := m.AllocRegistered(n)
	if errors.Is(err, msgr.ErrNoRegisteredMemory) || errors.Is(err, wire.ErrRegisteredPressure) {
		return nil, store.ErrAllocUnavailable
	}
	return buf, err
}

// readInto, recovery's read, reads [off, off+length) of an object (length
// -1: to the end) into a buffer from c, which on RDMA is registered memory
// the peer reads without a copy; meta, from a Head just before, sizes it.
// If the object grew in between, the bytes come in ordinary memory
// instead. The caller owns the returned buffer (nil for an empty range or
// a manifest). It reads past the store's cache (ReadRange, unlike a get):
// a recovery that walks a PG's objects once would only fill the cache with
// objects nobody asked for.
func (o *OSD) readInto(c *msgr.Conn, bucket, key string, meta *osdpb.ObjectMeta, off, length int64) (*osdpb.ObjectMeta, *wire.Buffer, error) {
	n := int64(meta.Size) - off
	if length >= 0 && length < n {
		n = length
	}
	var buf *wire.Buffer
	var dst []byte
	if n > 0 && len(meta.Parts) == 0 {
		var err error
		if buf, err = c.AllocPayload(int(n)); err != nil {
			return nil, nil, err
		}
		dst = buf.B[:0]
	}
	meta, data, err := o.st.ReadRange(o.ctx, bucket, key, off, length, dst)
	if err != nil {
		if buf != nil {
			buf.Release()
		}
		return nil, nil, err
	}
	if buf != nil && len(data) <= cap(buf.B) && (len(data) == 0 || &data[0] == &buf.B[:1][0]) {
		buf.B = data
		return meta, buf, nil
	}
	if buf != nil {
		buf.Release()
	}
	return meta, wire.NewExternalBuffer(data, func(*wire.Buffer) {}), nil
}

// listObjects serves LIST_OBJECTS for the PGs named, which must all be
// ours as primary; between OSDs with no PGs named it checks every local
// object (bucket deletes use it to see that a bucket is empty). A
// client's listing of the multipart bucket is filtered by what the
// client may read there (hiddenListing; byUpload: let through by an
// upload id alone, authTables.hiddenAllowed).
func (o *OSD) listObjects(m *msgr.Message, req *osdpb.ListObjects, fromPeer, byUpload bool) {
	defer m.Release()
	t := osdpb.MsgType(m.Type)
	rep := &osdpb.ListObjectsReply{}
	var err error
	if req.Bucket != ops.MultipartBucket {
		err = ops.CheckBucketName(req.Bucket)
	}
	var opts store.ListOptions
	if err == nil {
		opts, err = o.listOptions(req, fromPeer)
	}
	if err == nil {
		var res store.ListResult
		if res, err = o.st.List(o.ctx, req.Bucket, opts); err == nil {
			rep.Objects, rep.CommonPrefixes, rep.Truncated = res.Objects, res.CommonPrefixes, res.Truncated
			if req.Bucket == ops.MultipartBucket && !fromPeer {
				err = o.hiddenListing(m.Conn().Peer(), rep, byUpload)
			}
		}
	}
	if err != nil && !fromPeer { // a peer's is a bucket delete's emptiness check, which retries any failure
		to := replyTo(m)
		o.bucketAnswer(req.Bucket, err, func(err error) {
			o.send(to, ops.ReplyType(t), &osdpb.ListObjectsReply{Header: o.header(req.Header, err)}, nil)
		})
		return
	}
	rep.Header = o.header(req.Header, err)
	o.send(replyTo(m), ops.ReplyType(t), rep, nil)
}

// hiddenListing filters a client's listing of the multipart bucket by
// what it may read of the parts and pieces in it (authTables.partReadable;
// nothing for caps that cover the bucket). One let through by an upload id
// alone (byUpload) shows parts and pieces only, and is refused whole if it
// holds one of another's bucket: filtered, its Truncated and StartAfter
// would still let the caller count another upload's parts. One let
// through by a bucket (its upload records, "BUCKET/") drops the parts it
// holds that are not that caller's to read: an upload id is a valid
// bucket name, so such a listing can match parts too.
func (o *OSD) hiddenListing(peer msgr.EntityName, rep *osdpb.ListObjectsReply, byUpload bool) error {
	if !byUpload && o.authz.opAllowed(peer, osdpb.MsgType_MSG_LIST_OBJECTS, ops.MultipartBucket) == nil {
		return nil
	}
	var refused error
	rep.Objects = slices.DeleteFunc(rep.Objects, func(e *osdpb.ObjectEntry) bool {
		if !ops.IsPartOrPiece(e.GetKey()) {
			return byUpload
		}
		err := o.authz.partReadable(peer, e.GetMeta())
		refused = cmp.Or(refused, err)
		return err != nil
	})
	if byUpload {
		rep.CommonPrefixes = nil
		return refused
	}
	return nil
}

func (o *OSD) listOptions(req *osdpb.ListObjects, fromPeer bool) (store.ListOptions, error) {
	opts := store.ListOptions{Prefix: req.Prefix, Delimiter: req.Delimiter, StartAfter: req.StartAfter, MaxKeys: int(req.MaxKeys)}
	if opts.MaxKeys <= 0 || opts.MaxKeys > ops.MaxListKeys {
		opts.MaxKeys = ops.MaxListKeys
	}
	if fromPeer && len(req.Pgs) == 0 {
		return opts, nil
	}
	if len(req.Pgs) == 0 {
		return opts, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "list without PGs")
	}
	mp := o.Map()
	if req.Header.GetEpoch() > mp.Epoch() {
		mp = o.refreshMap()
	}
	pool, ok := mp.Pool(req.Header.GetPool())
	if !ok {
		return opts, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "no pool %d", req.Header.GetPool())
	}
	want := make(map[uint32]bool, len(req.Pgs))
	for _, pg := range req.Pgs {
		if !mp.IsPrimary(pool.Id, pg, o.id) {
			return opts, ops.Errorf(osdpb.Status_WRONG_PRIMARY, "osd.%d is not the primary of pg %s (epoch %d)", o.id, pgName(pool.Id, pg), mp.Epoch())
		}
		if err := o.peeringErr(storePG(pool.Id, pg)); err != nil {
			return opts, err
		}
		want[pg] = true
	}
	opts.Include = func(key string) bool { return want[ops.StoredPG(pool, req.Bucket, key)] }
	return opts, nil
}

// checkNames checks the names of an object op; parts and upload records of
// the multipart bucket are objects too.
func checkNames(bucket, key string) error { return ops.CheckObjectNames(bucket, key) }
