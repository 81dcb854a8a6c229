package osd_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestNewPGWhoseReplicasWereLate: as a new cluster forms, a replica may
// not have taken up the map yet when its primary queries it and then
// pushes to it ("no state yet"). A PG both of whose replicas refused so
// was left backfilling+degraded+peered, taking no writes, until the next
// map, which an idle cluster does not make (CI once saw 5 of 32 PGs so
// for minutes). The refused push is sent again, and every PG goes clean.
func TestNewPGWhoseReplicasWereLate(t *testing.T) {
	type key struct{ osd, sid uint32 }
	var mu sync.Mutex
	refused := map[key]bool{} // refused a RepOp: from then on takes them
	osd.PGStateLate.Set(func(id, sid uint32, typ osdpb.MsgType) bool {
		if id == 0 {
			return false // osd.0 is on time, so it leads PGs of late replicas
		}
		mu.Lock()
		defer mu.Unlock()
		k := key{id, sid}
		if refused[k] {
			return false
		}
		refused[k] = typ == osdpb.MsgType_MSG_REP_OP
		return true
	})
	t.Cleanup(func() { osd.PGStateLate.Set(nil) })
	c := osdtest.Start(t, osdtest.Options{})
	c.WaitSettled(t, 30*time.Second)

	// Not vacuous: some PG of osd.0's had both replicas refuse its push.
	mu.Lock()
	defer mu.Unlock()
	both := 0
	for k := range refused {
		if k.osd == 1 && refused[k] && refused[key{2, k.sid}] {
			both++
		}
	}
	if both == 0 {
		t.Fatalf("no PG had both replicas refuse a push: %v", refused)
	}
}
