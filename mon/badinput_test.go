package mon

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// rawClient is a bare messenger talking to a mon, to send what monclient
// never would.
type rawClient struct {
	conn    *msgr.Conn
	replies chan *msgr.Message
}

func newRawClient(t *testing.T, addr string) *rawClient {
	t.Helper()
	r := &rawClient{replies: make(chan *msgr.Message, 64)}
	ms, err := msgr.New(msgr.Options{
		Name: "client.raw", DefaultPolicy: msgr.LossyClient, Logger: testLogger(),
		Transports: []wire.Transport{tcp.Transport{}},
		Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) { r.replies <- m }),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ms.Kill)
	if r.conn, err = ms.Connect(context.Background(), addr, ""); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rawClient) send(t *testing.T, typ uint16, front []byte) { r.sendTid(t, typ, 0, front) }

// sendTid sends a request with tid in its envelope.
func (r *rawClient) sendTid(t *testing.T, typ uint16, tid uint64, front []byte) {
	t.Helper()
	m := msgr.NewMessage(typ, front, nil)
	m.SetTid(tid)
	if err := r.conn.Send(context.Background(), m); err != nil {
		m.Release()
		t.Fatal(err)
	}
}

// next waits for a reply (skipping map pushes); nil after timeout.
func (r *rawClient) next(t *testing.T, timeout time.Duration) *msgr.Message {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m := <-r.replies:
			if osdpb.MsgType(m.Type) == osdpb.MsgType_MSG_MON_MAP {
				m.Release()
				continue
			}
			return m
		case <-deadline:
			return nil
		}
	}
}

// replyHeader decodes the header (field 1) every mon reply has, and
// returns it with the tid of the reply's envelope.
func replyHeader(t *testing.T, m *msgr.Message) (*osdpb.ReplyHeader, uint64) {
	t.Helper()
	var rep osdpb.MonBeaconReply // header first: the shape of all
	if err := m.DecodeFront(&rep); err != nil {
		t.Fatalf("reply of type %d does not decode: %v", m.Type, err)
	}
	return rep.Header, m.Tid()
}

func TestBadInput(t *testing.T) {
	e := startTestEtcd(t)
	m := startTestMon(t, testConfig(e, "a"))
	r := newRawClient(t, m.Addr())

	// A boot whose front is not protobuf: INVALID_ARGUMENT, typed reply.
	r.send(t, uint16(osdpb.MsgType_MSG_MON_BOOT), []byte{0xff, 0xff, 0xff})
	rep := r.next(t, 10*time.Second)
	if rep == nil || osdpb.MsgType(rep.Type) != osdpb.MsgType_MSG_MON_BOOT_REPLY {
		t.Fatalf("malformed boot: reply %v", rep)
	}
	if h, _ := replyHeader(t, rep); h.GetStatus() != osdpb.Status_INVALID_ARGUMENT {
		t.Fatalf("malformed boot: %v", h)
	}
	rep.Release()

	// A valid front with a bad field: the error reply echoes the tid.
	front, _ := proto.Marshal(&osdpb.MonCommand{Prefix: "osd explode"})
	r.sendTid(t, uint16(osdpb.MsgType_MSG_MON_COMMAND), 77, front)
	rep = r.next(t, 10*time.Second)
	if h, tid := replyHeader(t, rep); h.GetStatus() != osdpb.Status_INVALID_ARGUMENT || tid != 77 {
		t.Fatalf("unknown command: %v tid %d", h, tid)
	} else {
		t.Logf("unknown command: %s", h.Message)
	}
	rep.Release()

	// A request type the mon does not serve: INVALID_ARGUMENT as type+1.
	front, _ = proto.Marshal(&osdpb.MonSubscribe{})
	r.sendTid(t, uint16(osdpb.MsgType_MSG_PUT_OBJECT), 5, front)
	rep = r.next(t, 10*time.Second)
	if rep == nil || osdpb.MsgType(rep.Type) != osdpb.MsgType_MSG_PUT_OBJECT_REPLY {
		t.Fatalf("wrong type: reply %v", rep)
	}
	if h, tid := replyHeader(t, rep); h.GetStatus() != osdpb.Status_INVALID_ARGUMENT || tid != 5 {
		t.Fatalf("wrong type: %v tid %d", h, tid)
	}
	rep.Release()

	// Not requests (a reply type, a map push, the top type): dropped.
	for _, typ := range []uint16{uint16(osdpb.MsgType_MSG_MON_BOOT_REPLY), uint16(osdpb.MsgType_MSG_MON_MAP), 65535} {
		r.send(t, typ, []byte{1, 2, 3})
	}
	// A beacon with another cluster's fsid.
	front, _ = proto.Marshal(&osdpb.MonBeacon{Fsid: "not-ours", Id: 0})
	r.sendTid(t, uint16(osdpb.MsgType_MSG_MON_BEACON), 9, front)
	rep = r.next(t, 10*time.Second)
	if h, tid := replyHeader(t, rep); osdpb.MsgType(rep.Type) != osdpb.MsgType_MSG_MON_BEACON_REPLY || h.GetStatus() != osdpb.Status_WRONG_CLUSTER || tid != 9 {
		t.Fatalf("beacon of another cluster: type %d %v tid %d", rep.Type, h, tid)
	}
	rep.Release()

	// Random fronts of every mon type: every request answered, no panic.
	rng := rand.New(rand.NewPCG(1, 2))
	types := []osdpb.MsgType{osdpb.MsgType_MSG_MON_BOOT, osdpb.MsgType_MSG_MON_BEACON, osdpb.MsgType_MSG_MON_FAILURE,
		osdpb.MsgType_MSG_MON_MARK_ME_DOWN, osdpb.MsgType_MSG_MON_SUBSCRIBE, osdpb.MsgType_MSG_MON_COMMAND, osdpb.MsgType_MSG_GET_MAP}
	const n = 60
	for i := range n {
		b := make([]byte, rng.IntN(40))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		r.send(t, uint16(types[i%len(types)]), b)
	}
	for i := range n {
		rep := r.next(t, 20*time.Second)
		if rep == nil {
			t.Fatalf("only %d of %d random requests answered", i, n)
		}
		rep.Release()
	}

	// The mon still serves.
	c := newTestClient(t, nil, m.Addr())
	mustBoot(t, c, bootOf(0))
	// The GET_MAP a client sends a seed is answered with the map.
	front, _ = proto.Marshal(&osdpb.GetMap{})
	r.send(t, uint16(osdpb.MsgType_MSG_GET_MAP), front)
	rep = r.next(t, 10*time.Second)
	var gm osdpb.GetMapReply
	if err := rep.DecodeFront(&gm); err != nil || gm.Map.GetEpoch() != m.Map().Epoch() {
		t.Fatalf("get map: %v %v", gm.Map, err)
	}
	rep.Release()
}

// fuzzMap is the map FuzzMonRequest runs requests against: three OSDs on
// two hosts, one of them down and out.
func fuzzMap() *placement.Map {
	pb := &osdpb.ClusterMap{Epoch: 7, Fsid: "fuzz", Pools: []*osdpb.Pool{{Id: 1, Name: "p", Size: 3, PgCount: 8}}}
	for i, h := range []string{"a", "a", "b"} {
		pb.Osds = append(pb.Osds, &osdpb.OSDInfo{Id: uint32(i), PublicAddr: "tcp://127.0.0.1:6800", ClusterAddr: "tcp://127.0.0.1:6801",
			Weight: 1, Up: i != 2, In: i != 2, Host: h, Uuid: string(rune('x' + i)), UpFrom: 3})
	}
	mp, err := placement.FromProto(pb)
	if err != nil {
		panic(err)
	}
	return mp
}

// FuzzMonRequest feeds arbitrary bytes to the mon's request path without
// etcd: decode and validate, then the pure core each request reaches (the
// boot, command and mark-me-down edits, the failure tracker, the beacon record and the
// status it feeds). Nothing may panic, errors must be typed, and every
// edit that succeeds must leave a valid map.
func FuzzMonRequest(f *testing.F) {
	seed := func(t osdpb.MsgType, pb proto.Message) {
		b, _ := proto.Marshal(pb)
		f.Add(uint16(t), b)
	}
	seed(osdpb.MsgType_MSG_MON_BOOT, bootOf(3))
	seed(osdpb.MsgType_MSG_MON_BOOT, &osdpb.MonBoot{HasId: true, Id: 1, Uuid: "y", PublicAddr: "tcp://127.0.0.1:1"})
	seed(osdpb.MsgType_MSG_MON_BEACON, &osdpb.MonBeacon{Id: 1, Pgs: []*osdpb.PGStat{{Pool: 1, Pg: 3, State: "active+clean", Epoch: 7}}})
	seed(osdpb.MsgType_MSG_MON_FAILURE, &osdpb.MonFailure{Reporter: 0, Target: 1, Epoch: 7, FailedForNanos: int64(time.Minute)})
	seed(osdpb.MsgType_MSG_MON_FAILURE, &osdpb.MonFailure{Reporter: 1, Target: 0, Epoch: 7, Immediate: true})
	seed(osdpb.MsgType_MSG_MON_MARK_ME_DOWN, &osdpb.MonMarkMeDown{Fsid: "fuzz", Id: 1, Uuid: "y", Epoch: 7})
	seed(osdpb.MsgType_MSG_MON_SUBSCRIBE, &osdpb.MonSubscribe{HaveEpoch: 3})
	for _, p := range append(append([]string{}, mutatingCommands...), monclient.ReadCommands...) {
		seed(osdpb.MsgType_MSG_MON_COMMAND, &osdpb.MonCommand{Prefix: p, Ids: []uint32{0, 2}, Weight: 0.5})
	}
	seed(osdpb.MsgType_MSG_MON_COMMAND, &osdpb.MonCommand{Prefix: "osd create", Uuid: "new"})
	seed(osdpb.MsgType_MSG_MON_COMMAND, &osdpb.MonCommand{Prefix: "osd pool set", Pool: "p", Var: "size", Val: "2"})
	seed(osdpb.MsgType_MSG_MON_COMMAND, &osdpb.MonCommand{Prefix: "osd pool set", Pool: "p", Var: "min_size", Val: "3"})
	seed(osdpb.MsgType_MSG_MON_COMMAND, &osdpb.MonCommand{Prefix: "auth s3-key add", Entity: "client.u", RequestId: make([]byte, 16)})
	seed(osdpb.MsgType_MSG_MON_COMMAND, &osdpb.MonCommand{Prefix: "osd out", Ids: []uint32{1}, RequestId: []byte{1, 2, 3}})
	f.Add(uint16(osdpb.MsgType_MSG_MON_BOOT), []byte{0xff})
	f.Add(uint16(osdpb.MsgType_MSG_PUT_OBJECT), []byte{})

	mp := fuzzMap()
	now := time.Unix(1000, 0)
	f.Fuzz(func(t *testing.T, typ uint16, front []byte) {
		req, err := decodeRequest(osdpb.MsgType(typ), front)
		if err != nil {
			if st, _ := ops.StatusOf(err); st != osdpb.Status_INVALID_ARGUMENT {
				t.Fatalf("decode error with status %v: %v", st, err)
			}
			if isMonRequest(osdpb.MsgType(typ)) && req == nil {
				t.Fatal("a mon request type decoded to nil")
			}
			return
		}
		var edit func(pb *osdpb.ClusterMap) error
		switch r := req.(type) {
		case *osdpb.MonBoot:
			edit = func(pb *osdpb.ClusterMap) error { _, err := applyBoot(pb, r); return err }
		case *osdpb.MonCommand:
			if slices.Contains(mutatingCommands, r.Prefix) {
				c := commandOf(r)
				edit = func(pb *osdpb.ClusterMap) error { _, err := c.apply(pb, now); return err }
			}
		case *osdpb.MonFailure:
			newFailureTracker(time.Second, 2).report(mp, r, now)
		case *osdpb.MonMarkMeDown:
			edit = func(pb *osdpb.ClusterMap) error {
				if len(markDown(pb, []uint32{r.Id}, now, r.Epoch, false)) == 0 {
					return errNoChange
				}
				return nil
			}
		case *osdpb.MonBeacon:
			rec := newBeaconRecord(r, now, &beaconRecord{AtUnixNano: now.Add(-time.Second).UnixNano()})
			computeStatus(statusInput{mp: mp, beacons: map[uint32]*beaconRecord{r.Id: rec}, now: now, fresh: time.Minute})
		}
		if edit == nil {
			return
		}
		var editErr error
		next, err := mp.With(func(pb *osdpb.ClusterMap) { editErr = edit(pb) })
		if editErr != nil {
			if st, _ := ops.StatusOf(editErr); st == osdpb.Status_INTERNAL_ERROR && editErr != errNoChange {
				t.Fatalf("untyped edit error: %v", editErr)
			}
			return
		}
		if err != nil {
			return // an address the map refuses: INVALID_ARGUMENT in update
		}
		computeStatus(statusInput{mp: next, now: now})
		osdTree(next)
	})
}
