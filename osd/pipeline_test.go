package osd_test

import (
	"context"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestConcurrentPutsToOneKeyKeepTheirOrder: a PG's puts are applied one
// behind the other while earlier ones are still syncing (osd/write.go,
// whenDurable). Puts racing to one key must still land in one order, the
// PG log's, on every member: each member's log lists the key's puts in
// the same order, and every member, and a get, hold the body of the last.
func TestConcurrentPutsToOneKeyKeepTheirOrder(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3})
	cl := c.Client(t, nil)
	ctx := ctxT(t, 60*time.Second)
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	const puts = 32
	var wg sync.WaitGroup
	errs := make(chan error, puts)
	for i := range puts {
		wg.Go(func() {
			_, err := osdtest.Put(ctx, cl, "bkt", "k", osdtest.Payload(4<<10, uint64(i)), client.PutOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	pg := placement.PGOf(pool, "bkt", "k")
	sid, err := placement.PGID{Pool: pool.Id, Seed: pg}.StoreID()
	if err != nil {
		t.Fatal(err)
	}
	// The order of the key's puts in each member's log, by body CRC32C.
	var order []uint32
	for _, id := range c.Map.ActingSet(pool.Id, pg) {
		entries, _, err := c.OSDs[id].Store().LogAfter(context.Background(), sid, nil, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint32
		for _, e := range entries {
			if e.Kind == osdpb.OpKind_OP_PUT && e.Key == "k" {
				got = append(got, e.Meta.GetCrc32C())
			}
		}
		if len(got) != puts {
			t.Fatalf("osd.%d: %d puts of k in the log, want %d", id, len(got), puts)
		}
		if order == nil {
			order = got
		}
		for i := range got {
			if got[i] != order[i] {
				t.Fatalf("osd.%d applied k's puts in another order than the primary: put %d has CRC %08x, not %08x", id, i, got[i], order[i])
			}
		}
	}
	body, _, err := osdtest.Get(ctx, cl, "bkt", "k", client.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, last := crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)), order[len(order)-1]; got != last {
		t.Fatalf("get returns the put with CRC %08x, not the last one in the log (%08x)", got, last)
	}
	replicasHave(t, c, "bkt", "k", body)
}
