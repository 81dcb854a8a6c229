package osd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

type replies chan *msgr.Message

func (r replies) Dispatch(m *msgr.Message) { r <- m }
func (replies) HandleEvent(msgr.Event)     {}

// TestBadInput sends an OSD malformed fronts, unknown ops, requests without
// headers and invalid names: each gets a reply with the right status on the
// same connection, and the OSD keeps serving a normal client.
func TestBadInput(t *testing.T) {
	var logMu sync.Mutex
	var logs bytes.Buffer
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 4, Tweak: func(cfg *osd.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
	}})
	ctx := ctxT(t, time.Minute)
	got := make(replies, 16)
	m, err := msgr.New(msgr.Options{Name: "client.evil", Dispatcher: got, DefaultPolicy: msgr.LossyClient, Transports: tcpOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	conn, err := m.Connect(ctx, c.Seeds()[0], "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	hdr := &osdpb.Header{Epoch: 1, Pool: 1, Req: &osdpb.ReqID{Client: 7, Tid: 1}}
	mustFront := func(pb proto.Message) []byte {
		b, err := proto.Marshal(pb)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	atK := &osdpb.Header{Epoch: 1, Pool: 1, Pg: placement.PGOf(pool, "fine", "k"), Req: &osdpb.ReqID{Client: 7, Tid: 2}}
	cases := []struct {
		name  string
		typ   osdpb.MsgType
		front []byte
		data  []byte
		want  osdpb.Status
	}{
		{"garbage front", osdpb.MsgType_MSG_PUT_OBJECT, []byte{0xff, 0xff, 0xff, 0x01}, nil, osdpb.Status_INVALID_ARGUMENT},
		{"unknown op", 999, mustFront(&osdpb.BucketRequest{Header: hdr}), nil, osdpb.Status_INVALID_ARGUMENT},
		{"no header", osdpb.MsgType_MSG_CREATE_BUCKET, mustFront(&osdpb.BucketRequest{Bucket: "fine"}), nil, osdpb.Status_INVALID_ARGUMENT},
		{"bad bucket name", osdpb.MsgType_MSG_CREATE_BUCKET, mustFront(&osdpb.BucketRequest{Header: &osdpb.Header{Epoch: 1, Pool: 1, Pg: 0xffffffff}, Bucket: "Bad..Name"}), nil, osdpb.Status_INVALID_BUCKET_NAME},
		{"bad key", osdpb.MsgType_MSG_GET_OBJECT, mustFront(&osdpb.GetObject{Header: hdr, Bucket: "fine", Key: "nul\x00"}), nil, osdpb.Status_INVALID_KEY},
		{"bad hold_parts", osdpb.MsgType_MSG_GET_OBJECT, mustFront(&osdpb.GetObject{Header: atK, Bucket: "fine", Key: "k", HasRange: true, HoldParts: strings.Repeat("p", 2000)}), nil, osdpb.Status_INVALID_ARGUMENT},
		{"hold_parts not a part", osdpb.MsgType_MSG_GET_OBJECT, mustFront(&osdpb.GetObject{Header: atK, Bucket: "fine", Key: "k", HoldParts: "photos/cat.jpg"}), nil, osdpb.Status_INVALID_ARGUMENT},
		{"size mismatch", osdpb.MsgType_MSG_PUT_OBJECT, mustFront(&osdpb.PutObject{Header: hdr, Bucket: "fine", Key: "k", Meta: &osdpb.ObjectMeta{Size: 10}}), []byte("abc"), osdpb.Status_INVALID_ARGUMENT},
		{"wrong pg", osdpb.MsgType_MSG_HEAD_OBJECT, mustFront(&osdpb.ObjectRequest{Header: &osdpb.Header{Epoch: 1, Pool: 1, Pg: 3000}, Bucket: "fine", Key: "k"}), nil, osdpb.Status_WRONG_PRIMARY},
		{"unknown pool", osdpb.MsgType_MSG_HEAD_OBJECT, mustFront(&osdpb.ObjectRequest{Header: &osdpb.Header{Epoch: 1, Pool: 42}, Bucket: "fine", Key: "k"}), nil, osdpb.Status_INVALID_ARGUMENT},
		{"a reply sent as a request", osdpb.MsgType_MSG_GET_OBJECT_REPLY, []byte{1, 2, 3}, nil, -1},
	}
	for _, tc := range cases {
		if err := conn.Send(ctx, msgr.NewMessage(uint16(tc.typ), tc.front, tc.data)); err != nil {
			t.Fatalf("%s: send: %v", tc.name, err)
		}
		if tc.want < 0 {
			continue // no reply expected; the next case shows the conn still works
		}
		select {
		case r := <-got:
			var rep osdpb.BucketReply // every reply has its header as field 1
			if err := r.DecodeFront(&rep); err != nil {
				t.Fatalf("%s: reply: %v", tc.name, err)
			}
			if osdpb.MsgType(r.Type) != ops.ReplyType(tc.typ) || rep.Header.GetStatus() != tc.want {
				t.Fatalf("%s: reply type %v status %v (%s), want %v", tc.name, osdpb.MsgType(r.Type), rep.Header.GetStatus(), rep.Header.GetMessage(), tc.want)
			}
			r.Release()
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no reply", tc.name)
		}
	}
	// A peer that repeats a bad request cannot make the OSD repeat its
	// log line: one per 10 s.
	for i := range 200 {
		if err := conn.Send(ctx, msgr.NewMessage(uint16(osdpb.MsgType_MSG_PUT_OBJECT), []byte{0xff, 0xff, 0xff, 0x01}, nil)); err != nil {
			t.Fatalf("bad request %d: %v", i, err)
		}
		select {
		case r := <-got:
			r.Release()
		case <-time.After(10 * time.Second):
			t.Fatalf("bad request %d: no reply", i)
		}
	}
	logMu.Lock()
	if n := strings.Count(logs.String(), "bad request"); n > 2 {
		t.Errorf("%d log lines for 209 bad requests, want at most 2", n)
	}
	logMu.Unlock()
	// The OSD still serves.
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "fine"); err != nil {
		t.Fatal(err)
	}
	if _, err := osdtest.Put(ctx, cl, "fine", "k", []byte("v"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	id, err := cl.NewMultipartUpload(ctx, "fine", "big", client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.PutObjectPart(ctx, "fine", "big", id, 1, bytes.NewReader(nil), client.MaxPartSize+1); !errors.Is(err, client.ErrEntityTooLarge) {
		t.Fatalf("oversized part: %v", err)
	}
}

// keyCaller is rawCaller to the primary of the PG of (bucket, key), with
// the pool and PG a request's header names.
func keyCaller(ctx context.Context, t *testing.T, c *osdtest.Cluster, bucket, key string) (func(typ osdpb.MsgType, front, data []byte, rep proto.Message) error, *osdpb.Pool, uint32) {
	t.Helper()
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, bucket, key)
	primary, _ := c.Map.Primary(pool.Id, pg)
	return rawCaller(ctx, t, c, primary), pool, pg
}

// rawCaller connects to OSD id as a client of its own, bypassing the SDK
// (to choose request ids and attempts), and returns a function that sends
// one request and decodes its reply into rep.
func rawCaller(ctx context.Context, t *testing.T, c *osdtest.Cluster, id uint32) func(typ osdpb.MsgType, front, data []byte, rep proto.Message) error {
	t.Helper()
	got := make(replies, 4)
	m, err := msgr.New(msgr.Options{Name: "client.resend", Dispatcher: got, DefaultPolicy: msgr.LossyClient, Transports: tcpOnly})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Shutdown(context.Background()) })
	addr, _ := c.Map.PublicAddr(id)
	conn, err := m.Connect(ctx, addr, msgr.EntityName(fmt.Sprintf("osd.%d", id)))
	if err != nil {
		t.Fatal(err)
	}
	return func(typ osdpb.MsgType, front, data []byte, rep proto.Message) error {
		if err := conn.Send(ctx, msgr.NewMessage(uint16(typ), front, data)); err != nil {
			return err
		}
		select {
		case r := <-got:
			defer r.Release()
			return r.DecodeFront(rep)
		case <-time.After(10 * time.Second):
			return fmt.Errorf("no reply to %v", typ)
		}
	}
}

// TestResendAnsweredFromLog sends one put twice with the same request id
// (as a client does after a fault): the second is answered from the PG log
// with the first one's version, and applied no second time, even though
// its body differs.
func TestResendAnsweredFromLog(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "idem"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "idem", "k")
	primary, _ := c.Map.Primary(pool.Id, pg)
	call := rawCaller(ctx, t, c, primary)
	attempt := uint32(0)
	put := func(body []byte) *osdpb.ObjectReply {
		defer func() { attempt++ }()
		front, _ := proto.Marshal(&osdpb.PutObject{
			Header: &osdpb.Header{Epoch: c.Map.Epoch(), Pool: pool.Id, Pg: pg, Req: &osdpb.ReqID{Client: 42, Tid: 7}, Attempt: attempt},
			Bucket: "idem", Key: "k", Meta: &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))}})
		var rep osdpb.ObjectReply
		// The PG may still be peering after the bucket was made: a client
		// resends then, with the same request id, as this does.
		deadline := time.Now().Add(30 * time.Second)
		for {
			rep.Reset()
			err := call(osdpb.MsgType_MSG_PUT_OBJECT, front, body, &rep)
			if err == nil && rep.Header.GetStatus() == osdpb.Status_SERVICE_UNAVAILABLE && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond) // a client's resend backoff, not synchronization
				continue
			}
			if err != nil || rep.Header.GetStatus() != osdpb.Status_OK {
				t.Fatalf("put: %v %v", err, rep.Header)
			}
			return &rep
		}
	}
	first := put([]byte("first body"))
	again := put([]byte("another body entirely"))
	if first.Header.Version.GetSeq() == 0 || !proto.Equal(first.Header.Version, again.Header.Version) {
		t.Fatalf("versions %v then %v: the resend was not answered from the log", first.Header.Version, again.Header.Version)
	}
	replicasHave(t, c, "idem", "k", []byte("first body"))
	last, _, err := c.OSDs[primary].Store().PGInfo(ctx, uint32(pool.Id)<<16|pg)
	if err != nil || !proto.Equal(last, first.Header.Version) {
		t.Fatalf("pg version %v after the resend, want %v (%v)", last, first.Header.Version, err)
	}
}

// TestBucketDeleteResendAnsweredFromLog: a bucket delete sent again with
// its request id (its reply was lost) is answered from the meta PG's log as
// the first time, not with NoSuchBucket for the bucket it deleted; a
// resend of a delete of a bucket that never existed still gets
// NoSuchBucket.
func TestBucketDeleteResendAnsweredFromLog(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	primary, _ := c.Map.Primary(pool.Id, placement.MetaPG)
	call := rawCaller(ctx, t, c, primary)
	del := func(bucket string, tid uint64, attempt uint32) osdpb.Status {
		front, _ := proto.Marshal(&osdpb.BucketRequest{Bucket: bucket,
			Header: &osdpb.Header{Epoch: c.Map.Epoch(), Pool: pool.Id, Pg: placement.MetaPG, Req: &osdpb.ReqID{Client: 42, Tid: tid}, Attempt: attempt}})
		var rep osdpb.BucketReply
		if err := call(osdpb.MsgType_MSG_DELETE_BUCKET, front, nil, &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Header.GetStatus()
	}
	// The first send may find the meta PG still settling after the
	// bucket's creation (ServiceUnavailable, nothing applied), which a
	// client retries, with the same request id.
	st := del("gone", 9, 0)
	for deadline := time.Now().Add(10 * time.Second); st == osdpb.Status_SERVICE_UNAVAILABLE && time.Now().Before(deadline); st = del("gone", 9, 0) {
		time.Sleep(20 * time.Millisecond) // a client's retry backoff
	}
	if st != osdpb.Status_OK {
		t.Fatalf("delete: %v", st)
	}
	if st := del("gone", 9, 1); st != osdpb.Status_OK {
		t.Fatalf("the resend of the delete: %v, want OK as the first time", st)
	}
	if st := del("never", 10, 1); st != osdpb.Status_NO_SUCH_BUCKET {
		t.Fatalf("a resent delete of a bucket that never was: %v, want NoSuchBucket", st)
	}
}
