package osd_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd"
)

// TestPutsInOrderWhileVouching: an OSD back in as a PG's primary, before
// it caught up on the bucket records, has the meta PG's primary vouch for
// a write's bucket first. Two puts to one key from one client, the second
// sent while the first waits (held after the answer), the second arriving
// once the OSD's copy is current and needs no vouch, apply in the order
// sent: the second waits behind the first, and the key ends with its data
// on every member.
func TestPutsInOrderWhileVouching(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, PGs: 16})
	ctx := ctxT(t, 2*time.Minute)
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	metaPrimary, _ := c.Map.Primary(pool.Id, placement.MetaPG)
	newcomer := (metaPrimary + 1) % uint32(len(c.OSDs)) // the meta primary answers its questions
	cl := c.Client(t, nil)
	if err := cl.MakeBucket(ctx, "ordered"); err != nil {
		t.Fatal(err)
	}
	_, with := newcomerMaps(t, c, newcomer)
	// A bucket made while the newcomer is out: its copy of the records is
	// behind, and it catches up when it is back.
	if err := cl.MakeBucket(ctx, "while-out"); err != nil {
		t.Fatal(err)
	}
	seed := ledPG(t, with, pool, newcomer, "the newcomer")
	key := keyInPG(t, pool, "ordered", seed, "")
	if _, err := osdtest.Put(ctx, cl, "ordered", key, []byte("zero"), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	catchUp := holdMetaCatchUp(t, newcomer)
	answered, go1 := make(chan struct{}), make(chan struct{})
	var answerOnce, go1Once sync.Once
	osd.VouchAnswered.Set(func(id uint32, bucket string) {
		if id == newcomer {
			answerOnce.Do(func() {
				close(answered)
				<-go1
			})
		}
	})
	t.Cleanup(func() {
		osd.VouchAnswered.Set(nil)
		go1Once.Do(func() { close(go1) })
	})
	for _, o := range c.OSDs {
		if err := o.AdoptMap(with); err != nil {
			t.Fatal(err)
		}
	}
	catchUp.started(ctx, t, "the newcomer")
	o := c.OSDs[newcomer]
	if o.BucketsCurrentForTest() {
		t.Fatal("the newcomer vouches for its buckets before its catch-up: the test reproduces nothing")
	}
	osdtest.Eventually(t, 30*time.Second, "the newcomer to serve its pg", func() bool {
		_, _, err := osdtest.Get(ctx, cl, "ordered", key, client.GetOptions{})
		return err == nil
	})

	// The vouch must be answered: a meta PG's primary still peering
	// under the new map refuses it, and the first put, refused, would be
	// sent again after the second and win, as it may (the two overlap).
	// The client retries a bucket read until that primary serves one.
	if _, err := cl.StatBucket(ctx, "ordered"); err != nil {
		t.Fatal(err)
	}
	put := func(data string) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := osdtest.Put(ctx, cl, "ordered", key, []byte(data), client.PutOptions{})
			done <- err
		}()
		return done
	}
	first := put("one")
	select {
	case <-answered:
	case err := <-first:
		t.Fatalf("the first put ended (%v) without asking the meta PG's primary", err)
	}
	catchUp.release()
	osdtest.Eventually(t, 30*time.Second, "the newcomer to vouch for its buckets", o.BucketsCurrentForTest)
	second := put("two")
	// The second put either waits behind the first, or (the defect) went
	// ahead and is done.
	osdtest.Eventually(t, 30*time.Second, "the second put to reach the newcomer", func() bool {
		return len(second) > 0 || o.HeldWritesForTest() == 2
	})
	go1Once.Do(func() { close(go1) })
	for i, done := range []chan error{first, second} {
		if err := <-done; err != nil {
			t.Fatalf("put %d: %v", i+1, err)
		}
	}
	if got, _, err := osdtest.Get(ctx, cl, "ordered", key, client.GetOptions{}); err != nil || string(got) != "two" {
		t.Fatalf("after two puts: %q, %v; want the second's \"two\"", got, err)
	}
	for _, id := range with.ActingSet(pool.Id, seed) {
		if _, got, err := c.OSDs[id].Store().ReadRange(ctx, "ordered", key, 0, -1, nil); err != nil || string(got) != "two" {
			t.Errorf("osd.%d holds %q, %v; want \"two\"", id, got, err)
		}
	}
}
