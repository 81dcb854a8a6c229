package osd_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// repliedTo is a reply with a header.
type repliedTo interface {
	proto.Message
	GetHeader() *osdpb.ReplyHeader
}

// askAs sends req to OSD to of c on the cluster network as osd.<as>, and
// decodes the reply into rep, whose status it returns.
func askAs(ctx context.Context, t *testing.T, c *osdtest.Cluster, as, to uint32, mt osdpb.MsgType, req proto.Message, rep repliedTo) osdpb.Status {
	t.Helper()
	got := make(replies, 4)
	m, err := msgr.New(msgr.Options{Name: msgr.EntityName(fmt.Sprintf("osd.%d", as)), Dispatcher: got, DefaultPolicy: msgr.LosslessPeer, Transports: tcpOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	addr, _ := c.Map.ClusterAddr(to)
	conn, err := m.Connect(ctx, addr, msgr.EntityName(fmt.Sprintf("osd.%d", to)))
	if err != nil {
		t.Fatal(err)
	}
	front, _ := proto.Marshal(req)
	msg := msgr.NewMessage(uint16(mt), front, []byte("evil"))
	// A tid of its own: the OSD may replay to us, under a name a real OSD
	// used before, replies meant for that one.
	tid := askTid.Add(1)
	msg.SetTid(tid)
	if err := conn.Send(ctx, msg); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case r := <-got:
			// The OSD also sends this name its own requests (PG queries,
			// heartbeats), whose tids come from its own counter: only
			// the reply type with our tid answers us.
			if r.Tid() != tid || r.Type != uint16(mt)+1 {
				r.Release()
				continue
			}
			defer r.Release()
			if err := r.DecodeFront(rep); err != nil {
				t.Fatal(err)
			}
			return rep.GetHeader().GetStatus()
		case <-timeout:
			t.Fatal("no reply")
			return 0
		}
	}
}

// askTid numbers askAs's requests.
var askTid atomic.Uint64

// TestReplicaRefusesForeignRepOps: a replica applies a PG's RepOps, and
// answers its PG queries, only from that PG's primary at the current
// epoch. A peer that names itself another OSD, an epoch from the future,
// and a PG id out of range (pool 65536, which once shared pool 0's PG
// logs) are each refused with a clear status, and nothing reaches the
// store.
func TestReplicaRefusesForeignRepOps(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "bkt", "injected")
	acting := c.Map.ActingSet(pool.Id, pg)
	if len(acting) != 3 {
		t.Fatalf("acting set %v", acting)
	}
	// Impostors use ids no OSD runs under: a second session under a live
	// OSD's name would collide with its real one (identities are issue
	// 20's). osd.7 is not in the map. The checks of epoch and PG id come
	// before the sender's, so a stranger exercises them too.
	replica := acting[1]
	const stranger = 7
	sid := uint32(pool.Id)<<16 | pg
	last, _, err := c.OSDs[replica].Store().PGInfo(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}

	ask := func(as uint32, mt osdpb.MsgType, req proto.Message, rep repliedTo) osdpb.Status {
		t.Helper()
		return askAs(ctx, t, c, as, replica, mt, req, rep)
	}
	send := func(as uint32, op *osdpb.RepOp) osdpb.Status {
		return ask(as, osdpb.MsgType_MSG_REP_OP, op, &osdpb.RepOpReply{})
	}
	entry := func() *osdpb.LogEntry {
		return &osdpb.LogEntry{Kind: osdpb.OpKind_OP_PUT, Bucket: "bkt", Key: "injected",
			Version: &osdpb.Version{Epoch: c.Map.Epoch(), Seq: last.GetSeq() + 1},
			Meta:    &osdpb.ObjectMeta{Size: 4}}
	}
	for _, tc := range []struct {
		name string
		as   uint32
		op   *osdpb.RepOp
		want osdpb.Status
	}{
		{"not the primary", stranger, &osdpb.RepOp{Epoch: c.Map.Epoch(), Pool: pool.Id, Pg: pg, Entry: entry(), Tid: 1}, osdpb.Status_WRONG_PRIMARY},
		{"future epoch", stranger, &osdpb.RepOp{Epoch: c.Map.Epoch() + 5, Pool: pool.Id, Pg: pg, Entry: entry(), Tid: 2}, osdpb.Status_STALE_EPOCH},
		{"pool 65536", stranger, &osdpb.RepOp{Epoch: c.Map.Epoch(), Pool: 65536 + pool.Id, Pg: pg, Entry: entry(), Tid: 3}, osdpb.Status_INVALID_ARGUMENT},
		{"pg out of range", stranger, &osdpb.RepOp{Epoch: c.Map.Epoch(), Pool: pool.Id, Pg: 9999, Entry: entry(), Tid: 4}, osdpb.Status_INVALID_ARGUMENT},
	} {
		if got := send(tc.as, tc.op); got != tc.want {
			t.Errorf("%s: status %v, want %v", tc.name, got, tc.want)
		}
	}
	// PG queries: a member answers only the PG's primary of its current
	// interval, once it has the querying map; an answer to anyone else
	// would let a stale primary pick an authoritative log it has no right
	// to, or count an answer the old interval's RepOps can still overtake.
	query := func(as uint32, q *osdpb.PGQuery) osdpb.Status {
		return ask(as, osdpb.MsgType_MSG_PG_QUERY, q, &osdpb.PGQueryReply{})
	}
	for _, tc := range []struct {
		name string
		q    *osdpb.PGQuery
		want osdpb.Status
	}{
		{"query from a non-primary", &osdpb.PGQuery{Epoch: c.Map.Epoch(), Pool: pool.Id, Pg: pg}, osdpb.Status_WRONG_PRIMARY},
		{"query from a future epoch", &osdpb.PGQuery{Epoch: c.Map.Epoch() + 5, Pool: pool.Id, Pg: pg}, osdpb.Status_STALE_EPOCH},
		{"query of pool 65536", &osdpb.PGQuery{Epoch: c.Map.Epoch(), Pool: 65536 + pool.Id, Pg: pg}, osdpb.Status_INVALID_ARGUMENT},
	} {
		if got := query(stranger, tc.q); got != tc.want {
			t.Errorf("%s: status %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, err := c.OSDs[replica].Store().Head(ctx, "bkt", "injected"); !errors.Is(err, store.ErrNoSuchKey) {
		t.Fatalf("the injected object reached the replica's store: %v", err)
	}
	now, _, _ := c.OSDs[replica].Store().PGInfo(ctx, sid)
	if !proto.Equal(now, last) {
		t.Fatalf("pg version moved from %v to %v", last, now)
	}
	// The real primary's writes still go through.
	if _, err := osdtest.Put(ctx, cl, "bkt", "injected", []byte("real"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	replicasHave(t, c, "bkt", "injected", []byte("real"))
}
