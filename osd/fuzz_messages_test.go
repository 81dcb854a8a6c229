package osd_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// FuzzOSDMessages sends one OSD whatever message a client may send on its
// public network or a peer OSD on its cluster network: any type, front and
// data. Whatever it is, the OSD must stay up and keep answering; a panic in
// any op's decoding or validation fails the run (the daemon shares the test
// process). After every input a GET_MAP on the public network must be
// answered.
//
// The seeds are a well-formed front of every op type on both networks, and
// garbage: `go test` runs them; `go test -fuzz FuzzOSDMessages ./osd/`
// mutates them.
func FuzzOSDMessages(f *testing.F) {
	hdr := &osdpb.Header{Epoch: 1, Pool: 1, Req: &osdpb.ReqID{Client: 9, Tid: 1}}
	entry := &osdpb.LogEntry{Version: &osdpb.Version{Epoch: 1, Seq: 1}, Kind: osdpb.OpKind_OP_PUT, Bucket: "fz", Key: "k",
		Meta: &osdpb.ObjectMeta{Size: 3}, DroppedParts: []string{"0123456789abcdef0123456789abcdef/00001"}}
	fronts := map[osdpb.MsgType]proto.Message{
		osdpb.MsgType_MSG_GET_MAP:       &osdpb.GetMap{},
		osdpb.MsgType_MSG_CREATE_BUCKET: &osdpb.BucketRequest{Header: hdr, Bucket: "fz"},
		osdpb.MsgType_MSG_DELETE_BUCKET: &osdpb.BucketRequest{Header: hdr, Bucket: "fz"},
		osdpb.MsgType_MSG_HEAD_BUCKET:   &osdpb.BucketRequest{Header: hdr, Bucket: "fz"},
		osdpb.MsgType_MSG_LIST_BUCKETS:  &osdpb.BucketRequest{Header: hdr},
		osdpb.MsgType_MSG_PUT_OBJECT:    &osdpb.PutObject{Header: hdr, Bucket: "fz", Key: "k", Meta: &osdpb.ObjectMeta{Size: 3}},
		osdpb.MsgType_MSG_GET_OBJECT: &osdpb.GetObject{Header: hdr, Bucket: "fz", Key: "k", HasRange: true, Offset: 1, Length: 1,
			Want: &osdpb.ObjectMeta{Size: 5, Crc32C: 1, MtimeUnixNano: 2}, HoldParts: "0123456789abcdef0123456789abcdef/00001"},
		osdpb.MsgType_MSG_HEAD_OBJECT:          &osdpb.ObjectRequest{Header: hdr, Bucket: "fz", Key: "k"},
		osdpb.MsgType_MSG_DELETE_OBJECT:        &osdpb.ObjectRequest{Header: hdr, Bucket: "fz", Key: "k"},
		osdpb.MsgType_MSG_LIST_OBJECTS:         &osdpb.ListObjects{Header: hdr, Bucket: "fz", Prefix: "k", Delimiter: "/", MaxKeys: 5},
		osdpb.MsgType_MSG_CREATE_UPLOAD:        &osdpb.UploadRequest{Header: hdr, Bucket: "fz", Key: "k"},
		osdpb.MsgType_MSG_UPLOAD_PART:          &osdpb.UploadRequest{Header: hdr, Bucket: "fz", Key: "k", UploadId: "u", PartNumber: 1},
		osdpb.MsgType_MSG_COMPLETE_UPLOAD:      &osdpb.UploadRequest{Header: hdr, Bucket: "fz", Key: "k", UploadId: "u"},
		osdpb.MsgType_MSG_ABORT_UPLOAD:         &osdpb.UploadRequest{Header: hdr, Bucket: "fz", Key: "k", UploadId: "u"},
		osdpb.MsgType_MSG_PG_SCRUB:             &osdpb.PGScrub{Header: hdr},
		osdpb.MsgType_MSG_PG_REPAIR:            &osdpb.PGRepair{Header: hdr},
		osdpb.MsgType_MSG_PG_LIST_INCONSISTENT: &osdpb.PGListInconsistent{Header: hdr},
		osdpb.MsgType_MSG_PG_INSPECT:           &osdpb.PGInspect{Header: hdr},
		osdpb.MsgType_MSG_PG_SCRUB_MAP: &osdpb.PGScrubMap{Epoch: 1, Pool: 1, AfterBucket: "fz", UptoBucket: "fz", UptoKey: "z",
			Names: []*osdpb.ObjectName{{Bucket: "fz", Key: "k"}}, Shallow: true},
		osdpb.MsgType_MSG_PG_PUSH: &osdpb.PGPush{Epoch: 1, Pool: 1, Entry: entry},
		osdpb.MsgType_MSG_PUT_OBJECT_IF: &osdpb.PutObject{Header: hdr, Bucket: "fz", Key: "k", Meta: &osdpb.ObjectMeta{Size: 3},
			Condition: &osdpb.Condition{IfMatch: []string{"*", "0123456789abcdef0123456789abcdef"}, IfNoneMatchStar: true}},
		osdpb.MsgType_MSG_COMPLETE_UPLOAD_IF: &osdpb.UploadRequest{Header: hdr, Bucket: "fz", Key: "k", UploadId: "u",
			Condition: &osdpb.Condition{IfNoneMatchStar: true}},
		osdpb.MsgType_MSG_DELETE_OBJECT_IF: &osdpb.ObjectRequest{Header: hdr, Bucket: "fz", Key: "k",
			Condition: &osdpb.Condition{IfMatch: []string{"0123456789abcdef0123456789abcdef"}}},
		osdpb.MsgType_MSG_REP_OP:          &osdpb.RepOp{Epoch: 1, Pool: 1, Entry: entry},
		osdpb.MsgType_MSG_REP_OP_REPLY:    &osdpb.RepOpReply{Header: &osdpb.ReplyHeader{Epoch: 1}, Pool: 1},
		osdpb.MsgType_MSG_PG_QUERY:        &osdpb.PGQuery{Epoch: 1, Pool: 1},
		osdpb.MsgType_MSG_PG_LOG_PULL:     &osdpb.PGLogPull{Epoch: 1, Pool: 1, After: &osdpb.Version{}, MaxEntries: 10},
		osdpb.MsgType_MSG_PG_BACKFILL:     &osdpb.PGBackfill{Epoch: 1, Pool: 1, AfterBucket: "fz"},
		osdpb.MsgType_MSG_PG_STRAY:        &osdpb.PGStray{Epoch: 1, Pool: 1, Last: &osdpb.Version{Epoch: 1, Seq: 1}},
		osdpb.MsgType_MSG_HEARTBEAT:       &osdpb.Heartbeat{From: 7, Epoch: 1, SentUnixNano: 1},
		osdpb.MsgType_MSG_HEARTBEAT_REPLY: &osdpb.HeartbeatReply{From: 7, Epoch: 1},
		osdpb.MsgType_MSG_BUCKET_FENCE:    &osdpb.BucketFence{Bucket: "fz", TtlMs: 10},
		osdpb.MsgType_MSG_PART_HOLDS:      &osdpb.PartHolds{Bucket: "fz", Uploads: []string{"0123456789abcdef0123456789abcdef"}},
	}
	for t, pb := range fronts {
		front, err := proto.Marshal(pb)
		if err != nil {
			f.Fatal(err)
		}
		for _, cluster := range []bool{false, true} {
			f.Add(cluster, uint16(t), front, []byte("abc"))
		}
	}
	// Fronts missing what an op needs.
	for t, pb := range map[osdpb.MsgType]proto.Message{
		osdpb.MsgType_MSG_REP_OP:     &osdpb.RepOp{Epoch: 1, Pool: 1},
		osdpb.MsgType_MSG_PUT_OBJECT: &osdpb.PutObject{Header: hdr, Bucket: "fz", Key: "k"},
		osdpb.MsgType_MSG_GET_OBJECT: &osdpb.GetObject{Header: &osdpb.Header{Epoch: 1, Pool: 1}},
		osdpb.MsgType_MSG_PG_PUSH:    &osdpb.PGPush{Epoch: 1, Pool: 1},
		// A fence for no bucket, lifted, of a length past its bound.
		osdpb.MsgType_MSG_BUCKET_FENCE: &osdpb.BucketFence{Lift: true, TtlMs: 1 << 31},
		osdpb.MsgType_MSG_PG_SCRUB_MAP: &osdpb.PGScrubMap{Epoch: 1, Pool: 1, ToEnd: true,
			Names: slices.Repeat([]*osdpb.ObjectName{{Bucket: "fz", Key: "k"}}, 300)},
		osdpb.MsgType_MSG_PG_REPAIR: &osdpb.PGRepair{},
		// Conditions on the wrong type, empty, or with bad tags.
		osdpb.MsgType_MSG_PUT_OBJECT_IF: &osdpb.PutObject{Header: hdr, Bucket: "fz", Key: "k", Meta: &osdpb.ObjectMeta{}, Condition: &osdpb.Condition{}},
		osdpb.MsgType_MSG_DELETE_OBJECT: &osdpb.PutObject{Header: hdr, Bucket: "fz", Key: "k", Condition: &osdpb.Condition{IfMatch: []string{"\"", ""}}},
		osdpb.MsgType_MSG_COMPLETE_UPLOAD: &osdpb.UploadRequest{Header: hdr, Bucket: "fz", Key: "k", UploadId: "u",
			Condition: &osdpb.Condition{IfNoneMatchStar: true}},
		osdpb.MsgType_MSG_DELETE_OBJECT_IF: &osdpb.ObjectRequest{Header: hdr, Bucket: "fz", Key: "k", Condition: &osdpb.Condition{IfNoneMatchStar: true}},
		osdpb.MsgType_MSG_HEAD_OBJECT:      &osdpb.ObjectRequest{Header: hdr, Bucket: "fz", Key: "k", Condition: &osdpb.Condition{IfMatch: []string{"*"}}},
	} {
		front, _ := proto.Marshal(pb)
		f.Add(true, uint16(t), front, []byte(nil))
		f.Add(false, uint16(t), front, []byte(nil))
	}
	for _, t := range []uint16{0, 2, 14, 201, 999, 0xffff} {
		f.Add(false, t, []byte{0xff, 0xff, 0xff, 0x01}, []byte(nil))
		f.Add(true, t, []byte{0x0a, 0x80}, []byte(nil))
	}

	c := osdtest.Start(f, osdtest.Options{OSDs: 1, PGs: 4})
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	public, _ := c.Map.PublicAddr(0)
	clusterAddr, _ := c.Map.ClusterAddr(0)
	// Two messengers: a client on the public network, and a process that
	// calls itself osd.7 (in no map) on the cluster network, which a
	// cluster without auth lets in.
	pub := newFuzzPeer(ctx, f, "client.fuzz", msgr.LossyClient, public, "osd.0")
	clu := newFuzzPeer(ctx, f, "osd.7", msgr.LosslessPeer, clusterAddr, "osd.0")

	var tid uint64
	f.Fuzz(func(t *testing.T, cluster bool, typ uint16, front, data []byte) {
		tid++
		p := pub
		if cluster {
			p = clu
		}
		m := msgr.NewMessage(typ, front, data)
		m.SetTid(tid)
		if err := p.send(ctx, m); err != nil {
			t.Fatalf("send: %v", err)
		}
		// The OSD is alive and serving: a GET_MAP is answered.
		tid++
		probe, _ := proto.Marshal(&osdpb.GetMap{})
		pm := msgr.NewMessage(uint16(osdpb.MsgType_MSG_GET_MAP), probe, nil)
		pm.SetTid(tid)
		if err := pub.send(ctx, pm); err != nil {
			t.Fatalf("probe: %v", err)
		}
		deadline := time.After(30 * time.Second)
		for {
			select {
			case r := <-pub.got:
				found := r.Tid() == tid
				var rep osdpb.GetMapReply
				err := r.DecodeFront(&rep)
				r.Release()
				if !found {
					continue // a reply to an earlier input
				}
				if err != nil || rep.GetMap() == nil {
					t.Fatalf("GET_MAP after type %d: %v, map %v", typ, err, rep.GetMap() != nil)
				}
				return
			case <-deadline:
				t.Fatalf("no answer to GET_MAP after a message of type %d (cluster %v)", typ, cluster)
			}
		}
	})
}

// fuzzPeer is one end of FuzzOSDMessages: a messenger with a session to
// the OSD, whose replies it keeps (public) or drops (cluster).
type fuzzPeer struct {
	m    *msgr.Messenger
	addr string
	to   msgr.EntityName
	got  replies
}

func newFuzzPeer(ctx context.Context, f *testing.F, name string, pol msgr.Policy, addr string, to msgr.EntityName) *fuzzPeer {
	p := &fuzzPeer{addr: addr, to: to, got: make(replies, 64)}
	var d msgr.Dispatcher = p.got
	if pol != msgr.LossyClient {
		d = dropAll{}
	}
	m, err := msgr.New(msgr.Options{Name: msgr.EntityName(name), Dispatcher: d, DefaultPolicy: pol, Transports: tcpOnly})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Shutdown(context.Background()) })
	p.m = m
	return p
}

// send sends m on the session to the OSD, connecting (again) as needed:
// the OSD may end a session over what it was sent, and then the next
// input starts a new one.
func (p *fuzzPeer) send(ctx context.Context, m *msgr.Message) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for range 3 {
		conn, err := p.m.Connect(ctx, p.addr, p.to)
		if err == nil {
			if err = conn.Send(ctx, m); err == nil {
				return nil
			}
		}
		last = err
	}
	m.Release()
	return fmt.Errorf("to %s: %w", p.to, last)
}

// dropAll releases what it is sent: the fuzzing OSD peer's replies.
type dropAll struct{}

func (dropAll) Dispatch(m *msgr.Message) { m.Release() }
func (dropAll) HandleEvent(msgr.Event)   {}
