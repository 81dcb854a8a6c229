package osd_test

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestConditionalPut: If-None-Match "*" writes only a new key, If-Match
// only over the ETag named (NoSuchKey with no object), and a write whose
// condition is false leaves the object as it was, on every replica.
func TestConditionalPut(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "cond"); err != nil {
		t.Fatal(err)
	}
	put := func(body string, opts client.PutOptions) (client.ObjectInfo, error) {
		return cl.PutObject(ctx, "cond", "k", bytes.NewReader([]byte(body)), int64(len(body)), opts)
	}
	first, err := put("first", client.PutOptions{IfNoneMatch: "*"})
	if err != nil {
		t.Fatalf("If-None-Match * on a new key: %v", err)
	}
	if _, err := put("second", client.PutOptions{IfNoneMatch: "*"}); !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("If-None-Match * on an existing key: %v, want PreconditionFailed", err)
	}
	replicasHave(t, c, "cond", "k", []byte("first"))
	if _, err := put("third", client.PutOptions{IfMatch: `"0123456789abcdef0123456789abcdef"`}); !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("If-Match of another ETag: %v, want PreconditionFailed", err)
	}
	replicasHave(t, c, "cond", "k", []byte("first"))
	second, err := put("second", client.PutOptions{IfMatch: `"nope", "` + first.ETag + `"`})
	if err != nil {
		t.Fatalf("If-Match of a list with the object's ETag: %v", err)
	}
	replicasHave(t, c, "cond", "k", []byte("second"))
	if _, err := put("third", client.PutOptions{IfMatch: first.ETag}); !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("If-Match of the replaced object's ETag: %v, want PreconditionFailed", err)
	}
	if _, err := put("third", client.PutOptions{IfMatch: "*"}); err != nil {
		t.Fatalf("If-Match * on an existing key: %v", err)
	}
	if _, err := cl.PutObject(ctx, "cond", "missing", bytes.NewReader(nil), 0, client.PutOptions{IfMatch: second.ETag}); !errors.Is(err, client.ErrNoSuchKey) {
		t.Fatalf("If-Match on a missing key: %v, want NoSuchKey", err)
	}
	if _, err := cl.StatObject(ctx, "cond", "missing"); !errors.Is(err, client.ErrNoSuchKey) {
		t.Fatalf("a failed If-Match made the object: %v", err)
	}
	if _, err := put("x", client.PutOptions{IfNoneMatch: first.ETag}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("If-None-Match of an ETag: %v, want InvalidArgument", err)
	}
	if _, err := put("x", client.PutOptions{IfMatch: `"a"b"`}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("a malformed If-Match: %v, want InvalidArgument", err)
	}
	if _, err := cl.PutObject(ctx, "nobucket", "k", bytes.NewReader(nil), 0, client.PutOptions{IfNoneMatch: "*"}); !errors.Is(err, client.ErrNoSuchBucket) {
		t.Fatalf("a conditional put to a missing bucket: %v, want NoSuchBucket", err)
	}
}

// TestConditionalComplete: a completion's condition is on the final key;
// when it is false the upload stays, to be completed again. A large
// conditional PutObject (a multipart upload inside the SDK) whose
// condition fails at completion aborts its upload.
func TestConditionalComplete(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "mpc"); err != nil {
		t.Fatal(err)
	}
	old, err := cl.PutObject(ctx, "mpc", "obj", bytes.NewReader([]byte("old")), 3, client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := cl.NewMultipartUpload(ctx, "mpc", "obj", client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := osdtest.Payload(1000, 3)
	part, err := cl.PutObjectPart(ctx, "mpc", "obj", id, 1, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	parts := []client.CompletePart{{PartNumber: 1, ETag: part.ETag}}
	if _, err := cl.CompleteMultipartUpload(ctx, "mpc", "obj", id, parts, client.CompleteOptions{IfNoneMatch: "*"}); !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("complete If-None-Match * over an object: %v, want PreconditionFailed", err)
	}
	replicasHave(t, c, "mpc", "obj", []byte("old"))
	fresh, err := cl.NewMultipartUpload(ctx, "mpc", "fresh", client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fpart, err := cl.PutObjectPart(ctx, "mpc", "fresh", fresh, 1, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	fparts := []client.CompletePart{{PartNumber: 1, ETag: fpart.ETag}}
	if _, err := cl.CompleteMultipartUpload(ctx, "mpc", "fresh", fresh, fparts, client.CompleteOptions{IfMatch: old.ETag}); !errors.Is(err, client.ErrNoSuchKey) {
		t.Fatalf("complete If-Match on a missing key: %v, want NoSuchKey", err)
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "mpc", "fresh", fresh, fparts, client.CompleteOptions{IfNoneMatch: "*"}); err != nil {
		t.Fatalf("complete If-None-Match * on a missing key, after a refused one: %v", err)
	}
	if _, err := cl.CompleteMultipartUpload(ctx, "mpc", "obj", id, parts, client.CompleteOptions{IfMatch: `"` + old.ETag + `"`}); err != nil {
		t.Fatalf("complete If-Match of the object's ETag, after a refused one: %v", err)
	}
	objectIs(t, cl, "mpc", "obj", data)

	// A large put: its parts go up, its completion is refused, its
	// upload is aborted.
	big := osdtest.Payload(6<<20, 4)
	_, err = cl.PutObject(ctx, "mpc", "obj", bytes.NewReader(big), int64(len(big)), client.PutOptions{PartSize: 5 << 20, IfNoneMatch: "*"})
	if !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("a multipart put If-None-Match * over an object: %v, want PreconditionFailed", err)
	}
	ups, err := cl.ListMultipartUploads(ctx, "mpc", "")
	if err != nil || len(ups) != 0 {
		t.Fatalf("uploads after a refused conditional multipart put: %v, %v; want none", ups, err)
	}
	objectIs(t, cl, "mpc", "obj", data)
	if _, err := cl.PutObject(ctx, "mpc", "new", bytes.NewReader(big), int64(len(big)), client.PutOptions{PartSize: 5 << 20, IfNoneMatch: "*"}); err != nil {
		t.Fatalf("a multipart put If-None-Match * to a new key: %v", err)
	}
	objectIs(t, cl, "mpc", "new", big)
}

// objectIs checks a multipart object's bytes, which its primary holds in
// parts of other PGs (replicasHave reads a plain object's own).
func objectIs(t *testing.T, cl *client.Client, bucket, key string, want []byte) {
	t.Helper()
	got, _, err := osdtest.Get(t.Context(), cl, bucket, key, client.GetOptions{})
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s/%s: %d bytes, %v; want %d bytes", bucket, key, len(got), err, len(want))
	}
}

// TestConditionalPutRace: of N puts with If-None-Match "*" to one key at
// once, exactly one is written; the object is its body.
func TestConditionalPutRace(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "race"); err != nil {
		t.Fatal(err)
	}
	c.WaitSettled(t, 30*time.Second)
	const n = 16
	for round := range 3 {
		key := fmt.Sprintf("k%d", round)
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			errs  = make([]error, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				body := fmt.Appendf(nil, "writer %d", i)
				_, errs[i] = cl.PutObject(ctx, "race", key, bytes.NewReader(body), int64(len(body)), client.PutOptions{IfNoneMatch: "*"})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: writers %d and %d both wrote a new key", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, client.ErrPreconditionFailed):
				t.Fatalf("round %d: writer %d: %v", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no writer wrote the new key", round)
		}
		replicasHave(t, c, "race", key, fmt.Appendf(nil, "writer %d", winner))
	}
}

// TestConditionalPutResend: a conditional put sent again with its request
// id after it was applied (its reply was lost) is answered from the PG log
// as the first time, not PreconditionFailed against the object it wrote;
// the same put under a new request id is refused. A plain MSG_PUT_OBJECT
// that carries a condition is refused: an OSD never drops a condition.
func TestConditionalPutResend(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "idem"); err != nil {
		t.Fatal(err)
	}
	c.WaitSettled(t, 30*time.Second)
	call, pool, pg := keyCaller(ctx, t, c, "idem", "k")
	put := func(typ osdpb.MsgType, tid uint64, attempt uint32, body []byte) *osdpb.ObjectReply {
		t.Helper()
		front, _ := proto.Marshal(&osdpb.PutObject{
			Header: &osdpb.Header{Epoch: c.Map.Epoch(), Pool: pool.Id, Pg: pg, Req: &osdpb.ReqID{Client: 77, Tid: tid}, Attempt: attempt},
			Bucket: "idem", Key: "k", Meta: &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))},
			Condition: &osdpb.Condition{IfNoneMatchStar: true}})
		var rep osdpb.ObjectReply
		if err := call(typ, front, body, &rep); err != nil {
			t.Fatal(err)
		}
		return &rep
	}
	if rep := put(osdpb.MsgType_MSG_PUT_OBJECT, 1, 0, []byte("plain")); rep.Header.GetStatus() != osdpb.Status_INVALID_ARGUMENT {
		t.Fatalf("a condition on MSG_PUT_OBJECT: %v, want INVALID_ARGUMENT", rep.Header)
	}
	first := put(osdpb.MsgType_MSG_PUT_OBJECT_IF, 2, 0, []byte("first"))
	if first.Header.GetStatus() != osdpb.Status_OK {
		t.Fatalf("the first send: %v", first.Header)
	}
	again := put(osdpb.MsgType_MSG_PUT_OBJECT_IF, 2, 1, []byte("first"))
	if again.Header.GetStatus() != osdpb.Status_OK || !proto.Equal(first.Header.Version, again.Header.Version) {
		t.Fatalf("the resend: %v, want OK at version %v", again.Header, first.Header.Version)
	}
	if rep := put(osdpb.MsgType_MSG_PUT_OBJECT_IF, 3, 0, []byte("other")); rep.Header.GetStatus() != osdpb.Status_PRECONDITION_FAILED {
		t.Fatalf("a new request: %v, want PRECONDITION_FAILED", rep.Header)
	}
	replicasHave(t, c, "idem", "k", []byte("first"))
}

// TestConditionalDelete: a delete with If-Match (MSG_DELETE_OBJECT_IF)
// removes the object only if its ETag is one named, on every replica; a
// stale ETag (the object was replaced since) is PRECONDITION_FAILED and a
// missing object NO_SUCH_KEY, and both leave everything as it was. A
// condition on any other type, or an If-None-Match on a delete, is
// INVALID_ARGUMENT; a resend of an applied conditional delete is answered
// from the PG log, not checked again against the now missing object.
func TestConditionalDelete(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "cdel"); err != nil {
		t.Fatal(err)
	}
	old, err := osdtest.Put(ctx, cl, "cdel", "k", []byte("old"), client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := osdtest.Put(ctx, cl, "cdel", "k", []byte("current"), client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.RemoveObjectIf(ctx, "cdel", "k", old.ETag); !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("a delete If-Match the replaced object's ETag: %v, want ErrPreconditionFailed", err)
	}
	replicasHave(t, c, "cdel", "k", []byte("current"))
	if err := cl.RemoveObjectIf(ctx, "cdel", "k", `"`+old.ETag+`", `+cur.ETag); err != nil {
		t.Fatalf("a delete If-Match a list with the ETag: %v", err)
	}
	replicasHave(t, c, "cdel", "k", nil)
	if err := cl.RemoveObjectIf(ctx, "cdel", "k", "*"); !errors.Is(err, client.ErrNoSuchKey) {
		t.Fatalf("a delete If-Match * of a missing object: %v, want ErrNoSuchKey", err)
	}
	if err := cl.RemoveObjectIf(ctx, "cdel", "k", ""); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("a conditional delete without a condition: %v, want ErrInvalidArgument", err)
	}

	// On the wire.
	if _, err := osdtest.Put(ctx, cl, "cdel", "k", []byte("again"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c.WaitSettled(t, 30*time.Second)
	call, pool, pg := keyCaller(ctx, t, c, "cdel", "k")
	send := func(typ osdpb.MsgType, tid uint64, attempt uint32, cond *osdpb.Condition) *osdpb.ReplyHeader {
		t.Helper()
		front, _ := proto.Marshal(&osdpb.ObjectRequest{
			Header: &osdpb.Header{Epoch: c.Map.Epoch(), Pool: pool.Id, Pg: pg, Req: &osdpb.ReqID{Client: 78, Tid: tid}, Attempt: attempt},
			Bucket: "cdel", Key: "k", Condition: cond})
		var rep osdpb.ObjectReply
		if err := call(typ, front, nil, &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Header
	}
	any := &osdpb.Condition{IfMatch: []string{"*"}}
	for _, tc := range []struct {
		typ  osdpb.MsgType
		cond *osdpb.Condition
	}{
		{osdpb.MsgType_MSG_DELETE_OBJECT, any},
		{osdpb.MsgType_MSG_HEAD_OBJECT, any},
		{osdpb.MsgType_MSG_DELETE_OBJECT_IF, nil},
		{osdpb.MsgType_MSG_DELETE_OBJECT_IF, &osdpb.Condition{IfNoneMatchStar: true}},
	} {
		if h := send(tc.typ, 1, 0, tc.cond); h.GetStatus() != osdpb.Status_INVALID_ARGUMENT {
			t.Fatalf("%v with condition %v: %v, want INVALID_ARGUMENT", tc.typ, tc.cond, h)
		}
	}
	replicasHave(t, c, "cdel", "k", []byte("again"))
	first := send(osdpb.MsgType_MSG_DELETE_OBJECT_IF, 2, 0, any)
	if first.GetStatus() != osdpb.Status_OK {
		t.Fatalf("a conditional delete: %v", first)
	}
	if again := send(osdpb.MsgType_MSG_DELETE_OBJECT_IF, 2, 1, any); again.GetStatus() != osdpb.Status_OK || !proto.Equal(first.Version, again.Version) {
		t.Fatalf("its resend: %v, want OK at version %v", again, first.Version)
	}
	if h := send(osdpb.MsgType_MSG_DELETE_OBJECT_IF, 3, 0, any); h.GetStatus() != osdpb.Status_NO_SUCH_KEY {
		t.Fatalf("a new conditional delete of the deleted object: %v, want NO_SUCH_KEY", h)
	}
	replicasHave(t, c, "cdel", "k", nil)
}
