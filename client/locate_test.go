package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/osd/store"
)

// TestLocate: Locate names the PG and OSDs that do hold an object: with
// 4 OSDs and 2 replicas, every object is on exactly the two OSDs of the
// acting set it gives, primary first, and on no other.
func TestLocate(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 4, Size: 2, PGs: 16})
	cl := c.Client(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := cl.MakeBucket(ctx, "where"); err != nil {
		t.Fatal(err)
	}
	pgs := map[string]bool{}
	for i := range 12 {
		key := fmt.Sprintf("obj-%d", i)
		if _, err := osdtest.Put(ctx, cl, "where", key, []byte(key), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		loc, err := cl.Locate("where", key)
		if err != nil {
			t.Fatal(err)
		}
		if loc.Epoch != cl.Map().Epoch() || loc.Pool == "" || len(loc.Acting) != 2 {
			t.Fatalf("%s: %+v", key, loc)
		}
		pgs[loc.PG.String()] = true
		for id, o := range c.OSDs {
			_, err := o.Store().Head(ctx, "where", key)
			switch holds := slices.Contains(loc.Acting, uint32(id)); {
			case holds && err != nil:
				t.Errorf("%s: Locate says osd.%d (of %v) holds it; its store: %v", key, id, loc.Acting, err)
			case !holds && !errors.Is(err, store.ErrNoSuchKey):
				t.Errorf("%s: osd.%d is not in %v, but its store answers %v", key, id, loc.Acting, err)
			}
		}
		p, _ := cl.Map().Primary(loc.PG.Pool, loc.PG.Seed)
		if p != loc.Acting[0] {
			t.Errorf("%s: primary osd.%d, acting %v", key, p, loc.Acting)
		}
	}
	if len(pgs) < 2 {
		t.Errorf("12 keys all in one PG: %v", pgs)
	}
	if _, err := cl.Locate("Bad_Bucket", "k"); !errors.Is(err, ops.ErrInvalidBucketName) {
		t.Errorf("Locate on a bad bucket name: %v", err)
	}
}
