package osd_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/internal/stallfs"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// heldSyncFS holds the syncs of Pebble's WAL files while g is closed:
// what a held sync covers stays unsynced, so a power cut loses it.
func heldSyncFS(fs vfs.FS, g *stallfs.Gate) vfs.FS {
	return stallfs.FS{FS: fs, Gate: g, Ops: stallfs.Syncs, Match: func(name string) bool { return strings.HasSuffix(name, ".log") }}
}

// TestResendAckedOnlyWhenDurable: a resent put found in the PG log is
// answered as the first time, and the answer must not come before the
// first time's entry is synced on every member: at the primary, which
// syncs its WAL before it answers from the log, and at a replica, which
// syncs before it acks the sync RepOp that the resend sends (a duplicate
// of what it applied). The test holds one member's WAL syncs, so the first
// try's entry is applied there but not synced, resends the put, and cuts
// that member's power the moment the resend is answered: the put must
// survive.
func TestResendAckedOnlyWhenDurable(t *testing.T) {
	for _, held := range []string{"primary", "replica"} {
		t.Run(held, func(t *testing.T) { testResendAckedOnlyWhenDurable(t, held == "primary") })
	}
}

func testResendAckedOnlyWhenDurable(t *testing.T, atPrimary bool) {
	fss := make([]*vfs.MemFS, 3)
	gates := make([]*stallfs.Gate, 3)
	syncWAL := make([]chan struct{}, 3) // a SyncWAL started on osd.i
	for i := range fss {
		fss[i], gates[i], syncWAL[i] = vfs.NewCrashableMem(), stallfs.NewGate(), make(chan struct{}, 1)
	}
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8, Tweak: func(cfg *osd.Config) {
		id := cfg.ID
		cfg.Store = store.WithFSForTest(cfg.Store, heldSyncFS(fss[id], gates[id]))
		cfg.Store = store.WithSyncWALHookForTest(cfg.Store, func() {
			select {
			case syncWAL[id] <- struct{}{}:
			default:
			}
		})
	}})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "held", "k")
	set := c.Map.ActingSet(pool.Id, pg)
	held := set[1]
	if atPrimary {
		held = set[0]
	}
	// The PG serves (peered, replicas current) before the syncs are held.
	warm := ""
	for i := 0; warm == ""; i++ {
		if k := fmt.Sprintf("warm%d", i); placement.PGOf(pool, "held", k) == pg {
			warm = k
		}
	}
	if _, err := osdtest.Put(ctx, cl, "held", warm, []byte("up"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	select { // the warm-up's, if any
	case <-syncWAL[held]:
	default:
	}

	body := []byte("acknowledged once, then again")
	put := func(attempt uint32) []byte {
		front, _ := proto.Marshal(&osdpb.PutObject{
			Header: &osdpb.Header{Epoch: c.Map.Epoch(), Pool: pool.Id, Pg: pg, Req: &osdpb.ReqID{Client: 42, Tid: 7}, Attempt: attempt},
			Bucket: "held", Key: "k", Meta: &osdpb.ObjectMeta{Size: uint64(len(body)), Crc32C: crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))}})
		return front
	}

	gates[held].Hold()
	defer gates[held].Release()
	first, resend := rawCaller(ctx, t, c, set[0]), rawCaller(ctx, t, c, set[0])
	go func() {
		var rep osdpb.ObjectReply
		first(osdpb.MsgType_MSG_PUT_OBJECT, put(0), body, &rep) // its answer may come late or never
	}()
	select {
	case <-gates[held].Entered(): // applied on osd.held, its sync held
	case <-ctx.Done():
		t.Fatal("the first try's sync never started")
	}
	answered := make(chan *osdpb.ObjectReply, 1)
	go func() {
		var rep osdpb.ObjectReply
		if err := resend(osdpb.MsgType_MSG_PUT_OBJECT, put(1), body, &rep); err != nil {
			rep.Header = &osdpb.ReplyHeader{Status: osdpb.Status_INTERNAL_ERROR, Message: err.Error()}
		}
		answered <- &rep
	}()
	var rep *osdpb.ObjectReply
	select {
	case rep = <-answered:
		// Answered while osd.held's sync is held: the cut below loses
		// the entry if that is all it had.
	case <-syncWAL[held]:
		// The answer waits for a sync: let the syncs go.
		gates[held].Release()
		rep = <-answered
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if rep.Header.GetStatus() != osdpb.Status_OK {
		t.Fatalf("the resend: %v", rep.Header)
	}
	clone := fss[held].CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	gates[held].Release()

	cfg := c.Config(held)
	opts := store.WithFSForTest(cfg.Store, clone)
	opts.Dir = filepath.Join(cfg.DataDir, "store")
	s, err := store.Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("osd.%d after the power cut: %v", held, err)
	}
	defer s.Close()
	if _, got, err := s.ReadRange(context.Background(), "held", "k", 0, -1, nil); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("osd.%d lost a put whose resend was acknowledged, to a power cut: %q, %v", held, got, err)
	}
}
