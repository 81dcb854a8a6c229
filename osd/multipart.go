package osd

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// Multipart uploads, as S3 has them. An upload's record is a hidden
// object of ops.MultipartBucket stored in the PG of the final key, so the
// final key's primary creates, completes and aborts it; each part is a
// hidden object placed by its own key, so parts go to different PGs and
// move in parallel. Completing writes the final key as a manifest: its
// metadata lists the parts, and readers fetch them from their PGs.

// uploadCreating runs as OSD osd makes an upload of bucket/key, before
// the upload's record is written.
var uploadCreating testHook[func(osd uint32, bucket, key string)]

// upload routes the four upload ops, and the conditional complete.
func (o *OSD) upload(m *msgr.Message, req *osdpb.UploadRequest) {
	t, conn := osdpb.MsgType(m.Type), replyTo(m)
	uploadReply := func(h *osdpb.ReplyHeader, applied *osdpb.LogEntry) proto.Message {
		rep := &osdpb.UploadReply{Header: h}
		if applied == nil {
			return rep
		}
		switch t {
		case osdpb.MsgType_MSG_CREATE_UPLOAD:
			_, _, rep.UploadId, _ = ops.ParseUploadKey(applied.Key)
		case osdpb.MsgType_MSG_UPLOAD_PART:
			_, n, _ := ops.ParsePartKey(applied.Key)
			mt := applied.Meta
			rep.Part = &osdpb.PartRef{Number: n, Key: applied.Key, Size: mt.GetSize(), Etag: mt.GetEtag(), Crc32C: mt.GetCrc32C()}
		case osdpb.MsgType_MSG_COMPLETE_UPLOAD, osdpb.MsgType_MSG_COMPLETE_UPLOAD_IF:
			rep.Meta = applied.Meta
		}
		return rep
	}
	fail := func(err error) {
		o.send(conn, ops.ReplyType(t), uploadReply(o.header(req.Header, err), nil), nil)
		m.Release()
	}
	if err := ops.CheckBucketName(req.Bucket); err != nil {
		fail(err)
		return
	}
	if err := ops.CheckKey(req.Key); err != nil {
		fail(err)
		return
	}
	if t != osdpb.MsgType_MSG_CREATE_UPLOAD {
		if err := ops.CheckUploadID(req.UploadId); err != nil {
			fail(err)
			return
		}
	}
	if err := conditionFor(t, t == osdpb.MsgType_MSG_COMPLETE_UPLOAD_IF, req.Condition); err != nil {
		fail(err)
		return
	}
	switch t {
	case osdpb.MsgType_MSG_CREATE_UPLOAD:
		o.objectWrite(m, req.Header, req.Bucket, req.Key, nil, uploadReply, func(e *osdpb.LogEntry) error {
			if _, err := o.st.HeadBucket(o.ctx, req.Bucket); err != nil {
				return err
			}
			if hook := uploadCreating.Load(); hook != nil {
				hook(o.id, req.Bucket, req.Key)
			}
			meta := &osdpb.ObjectMeta{MtimeUnixNano: time.Now().UnixNano(),
				ContentType: req.Meta.GetContentType(), UserMeta: req.Meta.GetUserMeta(), Internal: req.Meta.GetInternal()}
			e.Kind, e.Bucket, e.Key, e.Meta = osdpb.OpKind_OP_PUT, ops.MultipartBucket, ops.UploadKey(req.Bucket, req.Key, ops.NewUploadID()), meta
			return nil
		})

	case osdpb.MsgType_MSG_UPLOAD_PART:
		if req.PartNumber < 1 || req.PartNumber > ops.MaxParts {
			fail(ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "part number %d: must be 1 to %d", req.PartNumber, ops.MaxParts))
			return
		}
		if req.Piece > ops.MaxParts {
			fail(ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "piece %d: must be 0 to %d", req.Piece, ops.MaxParts))
			return
		}
		if req.Piece > 0 {
			if err := ops.CheckPieceSet(req.PieceSet); err != nil {
				fail(err)
				return
			}
		}
		// The part (or piece) is an object of its own PG: the header
		// names that PG.
		key := ops.PartKey(req.UploadId, req.PartNumber)
		if req.Piece > 0 {
			key = ops.PieceKey(req.UploadId, req.PartNumber, req.PieceSet, req.Piece)
		}
		// The upload must be in progress, in the bucket the caps were
		// checked on: else a writer of one bucket could replace the parts
		// of another's upload, or of an object completed from one, by its
		// id. Its record's primary is asked from a goroutine of its own,
		// so the dispatcher never waits on another OSD.
		o.wg.Go(func() {
			if err := o.uploadInProgress(req); err != nil {
				fail(err)
				return
			}
			o.writePart(m, req, key, uploadReply)
		})

	case osdpb.MsgType_MSG_ABORT_UPLOAD:
		rec := ops.UploadKey(req.Bucket, req.Key, req.UploadId)
		o.recordWrite(m, req, uploadReply, func(mp *placement.Map, e *osdpb.LogEntry) error {
			if _, err := o.st.Head(o.ctx, ops.MultipartBucket, rec); err != nil {
				return ops.Errorf(osdpb.Status_NO_SUCH_UPLOAD, "no upload %s of %s/%s", req.UploadId, req.Bucket, req.Key)
			}
			if o.completedAs(req) {
				// A record left behind by a completion (its removal
				// failed): the object's data are this upload's parts,
				// which the client deletes after an abort. S3 answers
				// an abort of a completed upload NoSuchUpload.
				return ops.Errorf(osdpb.Status_NO_SUCH_UPLOAD, "upload %s of %s/%s was completed", req.UploadId, req.Bucket, req.Key)
			}
			e.Kind, e.Bucket, e.Key = osdpb.OpKind_OP_DELETE, ops.MultipartBucket, rec
			return nil
		}, nil)

	case osdpb.MsgType_MSG_COMPLETE_UPLOAD, osdpb.MsgType_MSG_COMPLETE_UPLOAD_IF:
		// The condition (MSG_COMPLETE_UPLOAD_IF) is on the final key, and
		// write checks it on the shard, after the resend lookup.
		rec := ops.UploadKey(req.Bucket, req.Key, req.UploadId)
		var pieced []string // the records of the parts in pieces, which the object does not name
		o.recordWrite(m, req, uploadReply, func(mp *placement.Map, e *osdpb.LogEntry) error {
			upl, err := o.st.Head(o.ctx, ops.MultipartBucket, rec)
			if err != nil {
				return ops.Errorf(osdpb.Status_NO_SUCH_UPLOAD, "no upload %s of %s/%s", req.UploadId, req.Bucket, req.Key)
			}
			meta, records, err := o.manifest(mp, req, upl)
			if err != nil {
				return err
			}
			pieced = partKeys(records)
			e.Kind, e.Bucket, e.Key, e.Meta = osdpb.OpKind_OP_PUT, req.Bucket, req.Key, meta
			return nil
		}, func(mp *placement.Map, sid uint32) {
			// The upload is complete: its record goes (its parts stay,
			// as the object's data), and so do the records of its parts
			// in pieces, whose pieces the object names itself (deleting
			// an object of the multipart bucket drops no parts).
			if len(pieced) > 0 {
				o.wg.Go(func() { o.dropParts(mp, req.Header.GetPool(), pieced) })
			}
			e := &osdpb.LogEntry{Kind: osdpb.OpKind_OP_DELETE, Bucket: ops.MultipartBucket, Key: rec}
			o.write(mp, sid, e, nil, nil, nil, false, nil, func(_ *osdpb.LogEntry, err error) {
				if err != nil {
					o.log.Warn("removing a completed upload's record", "upload", req.UploadId, "err", err)
				}
			}, func() {})
		})
	}
}

// completedAs reports whether the object at req's key is made of the parts
// of req's upload (its completion): its manifest names parts (or pieces)
// under the upload id.
func (o *OSD) completedAs(req *osdpb.UploadRequest) bool {
	meta, err := o.st.Head(o.ctx, req.Bucket, req.Key)
	if err != nil {
		return false
	}
	for _, p := range meta.GetParts() {
		if strings.HasPrefix(p.GetKey(), req.UploadId+"/") {
			return true
		}
	}
	return false
}

// recordWrite runs an op on an upload record at the final key's primary:
// on the PG's shard, a resend is answered from the PG log; otherwise fill
// checks the record and builds the entry to write; after runs (on the
// shard) once that entry is written everywhere.
func (o *OSD) recordWrite(m *msgr.Message, req *osdpb.UploadRequest, reply replyFunc,
	fill func(*placement.Map, *osdpb.LogEntry) error, after func(*placement.Map, uint32)) {
	t, conn := osdpb.MsgType(m.Type), replyTo(m)
	send := func(err error, applied *osdpb.LogEntry) {
		o.answerWrite(conn, t, req.Header, reply, req.Bucket, applied, err)
	}
	mp, pool, pg, err := o.target(req.Header, req.Bucket, req.Key, false)
	if err != nil {
		send(err, nil)
		m.Release()
		return
	}
	sid := storePG(pool.Id, pg)
	if o.writeNow(mp, req.Bucket) {
		o.recordOnShard(m, req, mp, sid, send, fill, after)
		return
	}
	o.vouchedWrite(mp, sid, req.Bucket, func(err error) {
		o.send(conn, ops.ReplyType(t), reply(o.header(req.Header, err), nil), nil)
		m.Release()
	}, func() { o.recordOnShard(m, req, mp, sid, send, fill, after) })
}

// recordOnShard is recordWrite's part on the PG's shard.
func (o *OSD) recordOnShard(m *msgr.Message, req *osdpb.UploadRequest, mp *placement.Map, sid uint32, send func(error, *osdpb.LogEntry),
	fill func(*placement.Map, *osdpb.LogEntry) error, after func(*placement.Map, uint32)) {
	o.onShard(m, sid, func() {
		defer m.Release()
		e := &osdpb.LogEntry{Req: req.Header.GetReq()}
		resend := req.Header.GetAttempt() > 0
		if e.Req != nil && resend {
			if _, found, err := o.st.FindRequest(o.ctx, sid, e.Req); err == nil && found {
				// A resend: write answers it from the log. The first
				// attempt may have failed after its apply (its replicas
				// did not ack in time), before its after ran: after runs
				// again, as it would have (it must be idempotent).
				o.write(mp, sid, e, nil, nil, nil, true, nil, func(applied *osdpb.LogEntry, err error) {
					send(err, applied)
					if err == nil && after != nil {
						o.enqueue(o.shardOf(sid), func() { after(mp, sid) })
					}
				}, func() {})
				return
			}
		}
		if err := fill(mp, e); err != nil {
			send(err, nil)
			return
		}
		o.write(mp, sid, e, nil, nil, nil, resend, req.Condition, func(applied *osdpb.LogEntry, err error) {
			send(err, applied)
			if err == nil && after != nil {
				o.enqueue(o.shardOf(sid), func() { after(mp, sid) })
			}
		}, func() {})
	})
}

// pieceRecord checks the record of a part stored in pieces (an upload
// part op with piece 0, no bytes and the pieces in meta.parts) and
// returns its metadata: the pieces of one set of this part in order, 1 to
// k, whose sizes and CRC32Cs make the part's. The part's ETag is the client's:
// the OSD never holds the part whole to hash it, as it takes a single
// put's. The pieces themselves are not looked up: a record that names
// one never stored makes an object whose reads fail, not one that reads
// wrong bytes (each piece's CRC32C is checked as it is read).
func pieceRecord(req *osdpb.UploadRequest, dataLen int) (*osdpb.ObjectMeta, error) {
	meta := req.Meta
	bad := func(format string, args ...any) error {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "part %d in pieces: "+format, append([]any{req.PartNumber}, args...)...)
	}
	switch {
	case dataLen != 0:
		return nil, bad("the record carries %d bytes", dataLen)
	case len(meta.Parts) > ops.MaxParts:
		return nil, bad("%d pieces, at most %d", len(meta.Parts), ops.MaxParts)
	case meta.Etag == "" || len(meta.Etag) > 64:
		return nil, bad("ETag %q", meta.Etag)
	}
	rec := &osdpb.ObjectMeta{Size: meta.Size, Crc32C: meta.Crc32C, Etag: meta.Etag, MtimeUnixNano: time.Now().UnixNano(), UploadBucket: req.Bucket}
	var (
		size uint64
		crc  uint32
	)
	_, _, set, _, _ := ops.ParsePieceKey(meta.Parts[0].GetKey())
	for i, p := range meta.Parts {
		if want := ops.PieceKey(req.UploadId, req.PartNumber, set, uint32(i+1)); set == "" || p.GetKey() != want {
			return nil, bad("piece %d is %q, not %q", i+1, p.GetKey(), want)
		}
		if p.Size == 0 || p.Size > ops.MaxPutSize {
			return nil, bad("piece %d of %d bytes", i+1, p.Size)
		}
		size += p.Size
		crc = ops.CRC32CCombine(crc, p.Crc32C, int64(p.Size))
		rec.Parts = append(rec.Parts, &osdpb.PartRef{Number: req.PartNumber, Key: p.Key, Size: p.Size, Etag: p.Etag, Crc32C: p.Crc32C})
	}
	if size != meta.Size || crc != meta.Crc32C {
		return nil, bad("the pieces hold %d bytes of CRC32C %08x, the record says %d of %08x", size, crc, meta.Size, meta.Crc32C)
	}
	return rec, nil
}

// manifest checks the parts a completion lists against the parts stored
// (each at its own PG's primary) and returns the final object's metadata:
// S3's rules (ascending part numbers, every part but the last at least
// 5 MiB, ETags that match) and S3's multipart ETag, or with req.Whole
// its one part's. A part in pieces is named by its pieces, each with the
// part's number and ETag; records are those parts' records, garbage once
// the object is written.
func (o *OSD) manifest(mp *placement.Map, req *osdpb.UploadRequest, upl *osdpb.ObjectMeta) (meta *osdpb.ObjectMeta, records []*osdpb.PartRef, err error) {
	if len(req.Parts) == 0 {
		return nil, nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "a completion needs at least one part")
	}
	if req.Whole && len(req.Parts) != 1 {
		return nil, nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "an object put whole has one part, not %d", len(req.Parts))
	}
	pool, _ := mp.Pool(req.Header.GetPool())
	meta = &osdpb.ObjectMeta{ContentType: upl.GetContentType(), UserMeta: upl.GetUserMeta(), MtimeUnixNano: time.Now().UnixNano()}
	// The order first, as S3 checks it: parts listed in the order their
	// uploads finished are InvalidPartOrder, whatever else is wrong with
	// them (the small last part listed early is not EntityTooSmall).
	for i := 1; i < len(req.Parts); i++ {
		if req.Parts[i].Number <= req.Parts[i-1].Number {
			return nil, nil, ops.Errorf(osdpb.Status_INVALID_PART_ORDER, "part %d after part %d", req.Parts[i].Number, req.Parts[i-1].Number)
		}
	}
	etags := md5.New()
	for i, want := range req.Parts {
		key := ops.PartKey(req.UploadId, want.Number)
		got, err := o.headAnywhere(mp, pool, ops.MultipartBucket, key)
		if err != nil {
			if errors.Is(opError(err), ops.ErrNoSuchKey) {
				return nil, nil, ops.Errorf(osdpb.Status_INVALID_PART, "part %d was not uploaded", want.Number)
			}
			return nil, nil, err
		}
		if strings.Trim(want.Etag, `"`) != got.Etag {
			return nil, nil, ops.Errorf(osdpb.Status_INVALID_PART, "part %d: ETag %s, the part has %s", want.Number, want.Etag, got.Etag)
		}
		if i < len(req.Parts)-1 && got.Size < ops.MinPartSize {
			return nil, nil, ops.Errorf(osdpb.Status_ENTITY_TOO_SMALL, "part %d has %d bytes; all but the last need at least %d", want.Number, got.Size, ops.MinPartSize)
		}
		sum, _ := hex.DecodeString(got.Etag)
		etags.Write(sum)
		meta.Size += got.Size
		num := want.Number
		if req.Whole {
			num, meta.Etag = 0, got.Etag
		}
		if len(got.Parts) == 0 {
			meta.Parts = append(meta.Parts, &osdpb.PartRef{Number: num, Key: key, Size: got.Size, Etag: got.Etag, Crc32C: got.Crc32C})
			continue
		}
		for _, pc := range got.Parts {
			meta.Parts = append(meta.Parts, &osdpb.PartRef{Number: num, Key: pc.Key, Size: pc.Size, Etag: got.Etag, Crc32C: pc.Crc32C})
		}
		records = append(records, &osdpb.PartRef{Key: key})
	}
	if !req.Whole {
		meta.Etag = fmt.Sprintf("%s-%d", hex.EncodeToString(etags.Sum(nil)), len(req.Parts))
	}
	return meta, records, nil
}

// headAnywhere reads an object's metadata from its PG's primary: here, or
// over the cluster network.
func (o *OSD) headAnywhere(mp *placement.Map, pool *osdpb.Pool, bucket, key string) (*osdpb.ObjectMeta, error) {
	pg := ops.StoredPG(pool, bucket, key)
	primary, ok := mp.Primary(pool.Id, pg)
	if !ok {
		return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "pg %s has no OSD", pgName(pool.Id, pg))
	}
	if primary == o.id {
		// As a get: a PG that peers may lack what was written while
		// this OSD was away (an upload's record made meanwhile), and a
		// NoSuchUpload would end the client's retries.
		if err := o.peeringErr(storePG(pool.Id, pg)); err != nil {
			return nil, err
		}
		return o.st.Head(o.ctx, bucket, key)
	}
	ctx, cancel := context.WithTimeout(o.ctx, o.cfg.RepTimeout)
	defer cancel()
	var rep osdpb.ObjectReply
	err := o.call(ctx, primary, osdpb.MsgType_MSG_HEAD_OBJECT, &osdpb.ObjectRequest{Header: &osdpb.Header{Epoch: mp.Epoch(), Pool: pool.Id, Pg: pg}, Bucket: bucket, Key: key}, &rep, nil)
	if err == nil {
		err = ops.FromReply(rep.Header)
	}
	if err != nil {
		return nil, err
	}
	return rep.Meta, nil
}

// writePart writes an upload's part or piece (UPLOAD_PART) at key, in
// its own PG, once uploadInProgress has found the upload.
func (o *OSD) writePart(m *msgr.Message, req *osdpb.UploadRequest, key string, reply replyFunc) {
	o.objectWrite(m, req.Header, ops.MultipartBucket, key, nil, reply, func(e *osdpb.LogEntry) error {
		meta := req.Meta
		if req.Piece == 0 && len(meta.GetParts()) > 0 {
			rec, err := pieceRecord(req, len(m.Data))
			if err != nil {
				return err
			}
			e.Kind, e.Meta = osdpb.OpKind_OP_PUT, rec
			return nil
		}
		if meta == nil || meta.Size != uint64(len(m.Data)) {
			return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "part meta says %d bytes, the body has %d", meta.GetSize(), len(m.Data))
		}
		if len(m.Data) > ops.MaxPutSize {
			return ops.Errorf(osdpb.Status_ENTITY_TOO_LARGE, "part of %d bytes; at most %d", len(m.Data), ops.MaxPutSize)
		}
		// Parts arrive in parallel: large ones share the process's
		// md5-simd lanes (a lane cost half of a crypto/md5 stream with
		// eight parts in flight), small ones hash inline.
		h := ops.NewMD5(int64(len(m.Data)))
		h.Write(m.Data)
		sum := h.Sum(nil)
		h.Close()
		// The upload's bucket, which uploadInProgress found the upload in
		// and the caps were checked on, decides who reads the part
		// (authTables.partReadable).
		meta = &osdpb.ObjectMeta{Size: meta.Size, Crc32C: meta.Crc32C, Etag: hex.EncodeToString(sum), MtimeUnixNano: time.Now().UnixNano(),
			UploadBucket: req.Bucket}
		e.Kind, e.Meta = osdpb.OpKind_OP_PUT, meta
		return nil
	})
}

// uploadInProgress checks that req's upload is in progress: its record is
// at its final key's primary (NoSuchUpload otherwise).
func (o *OSD) uploadInProgress(req *osdpb.UploadRequest) error {
	mp := o.Map()
	if req.Header.GetEpoch() > mp.Epoch() {
		mp = o.refreshMap() // the client's map places the record where ours may not
	}
	pool, ok := mp.Pool(req.Header.GetPool())
	if !ok {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "no pool %d in epoch %d", req.Header.GetPool(), mp.Epoch())
	}
	_, err := o.headAnywhere(mp, pool, ops.MultipartBucket, ops.UploadKey(req.Bucket, req.Key, req.UploadId))
	if errors.Is(opError(err), ops.ErrNoSuchKey) {
		return ops.Errorf(osdpb.Status_NO_SUCH_UPLOAD, "no upload %s of %s/%s", req.UploadId, req.Bucket, req.Key)
	}
	return err
}
