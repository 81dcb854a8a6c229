package osd_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// heldSyncFS holds the syncs of Pebble's WAL files while closed: what a
// held sync covers stays unsynced, so a power cut loses it.
type heldSyncFS struct {
	vfs.FS
	g *syncGate
}

type syncGate struct {
	mu      sync.Mutex
	open    chan struct{} // nil while syncs pass
	entered chan struct{} // a sync is held (buffered 1)
}

func newSyncGate() *syncGate { return &syncGate{entered: make(chan struct{}, 1)} }

func (g *syncGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *syncGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		close(g.open)
		g.open = nil
	}
}

func (g *syncGate) wait() {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open == nil {
		return
	}
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-open
}

func (fs heldSyncFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return heldSyncFile{f, fs.g}, nil
}

func (fs heldSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs heldSyncFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	return fs.wrap(name, f, err)
}

type heldSyncFile struct {
	vfs.File
	g *syncGate
}

func (f heldSyncFile) Sync() error     { f.g.wait(); return f.File.Sync() }
func (f heldSyncFile) SyncData() error { f.g.wait(); return f.File.SyncData() }
func (f heldSyncFile) SyncTo(n int64) (bool, error) {
	f.g.wait()
	return f.File.SyncTo(n)
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
	gates := make([]*syncGate, 3)
	syncWAL := make([]chan struct{}, 3) // a SyncWAL started on osd.i
	for i := range fss {
		fss[i], gates[i], syncWAL[i] = vfs.NewCrashableMem(), newSyncGate(), make(chan struct{}, 1)
	}
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8, Tweak: func(cfg *osd.Config) {
		id := cfg.ID
		cfg.Store = store.WithFSForTest(cfg.Store, heldSyncFS{fss[id], gates[id]})
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

	gates[held].hold()
	defer gates[held].release()
	first, resend := rawCaller(ctx, t, c, set[0]), rawCaller(ctx, t, c, set[0])
	go func() {
		var rep osdpb.ObjectReply
		first(osdpb.MsgType_MSG_PUT_OBJECT, put(0), body, &rep) // its answer may come late or never
	}()
	select {
	case <-gates[held].entered: // applied on osd.held, its sync held
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
		gates[held].release()
		rep = <-answered
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if rep.Header.GetStatus() != osdpb.Status_OK {
		t.Fatalf("the resend: %v", rep.Header)
	}
	clone := fss[held].CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	gates[held].release()

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
