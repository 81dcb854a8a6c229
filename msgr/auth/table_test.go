package auth

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestKeeperRefreshesOnMiss(t *testing.T) {
	ca, err := NewCA("t")
	if err != nil {
		t.Fatal(err)
	}
	old, err := ca.Issue("client.x")
	if err != nil {
		t.Fatal(err)
	}
	cur, err := ca.Issue("client.x")
	if err != nil {
		t.Fatal(err)
	}
	newer := NewTable(2, map[string]Record{"client.x": {Serial: Serial(cur.Cert)}})
	var calls atomic.Int32
	k := &Keeper{Refresh: func(context.Context) (*Table, error) {
		calls.Add(1)
		return newer, nil
	}}
	k.Note(NewTable(1, map[string]Record{}))
	ctx := context.Background()

	// Concurrent misses share one refresh, then all pass.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := k.Authenticate(ctx, "client.x", cur.Cert); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d refreshes for one miss, want 1", n)
	}
	// The old certificate is refused even after a refresh.
	if _, err := k.Authenticate(ctx, "client.x", old.Cert); !errors.Is(err, ErrBadCredential) {
		t.Fatalf("old certificate: %v", err)
	}
	// An older table never replaces a newer one.
	k.Note(NewTable(1, map[string]Record{}))
	if k.Table().Revision != 2 {
		t.Fatalf("revision %d after an older note", k.Table().Revision)
	}
	// A refresh that fails says so, and the entity stays refused.
	k2 := &Keeper{Refresh: func(context.Context) (*Table, error) { return nil, errors.New("mon down") }}
	k2.Note(NewTable(1, map[string]Record{}))
	if _, err := k2.Authenticate(ctx, "client.x", cur.Cert); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("failed refresh: %v", err)
	}
}

func TestProfileBootstrapOSD(t *testing.T) {
	c, err := ParseCaps(map[string]string{"mon": "allow profile bootstrap-osd"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.HasProfile(ServiceMon, ProfileBootstrapOSD) || c.Allows(ServiceMon, PermRead, "") {
		t.Fatalf("bootstrap-osd: %v", c)
	}
	if _, err := ParseCaps(map[string]string{"osd": "allow profile bootstrap-osd"}); !errors.Is(err, ErrInvalidCaps) {
		t.Fatalf("bootstrap-osd on osd: %v", err)
	}
}
