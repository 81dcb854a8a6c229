package auth

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestNewS3Key(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		k := NewS3Key()
		if len(k.AccessKey) != 20 || len(k.Secret) != 40 || ValidateS3AccessKey(k.AccessKey) != nil {
			t.Fatalf("key %+v: want a valid 20-character id and a 40-character secret", k)
		}
		if seen[k.AccessKey] || seen[k.Secret] {
			t.Fatalf("key %+v drawn twice", k)
		}
		seen[k.AccessKey], seen[k.Secret] = true, true
	}
}

func FuzzValidateS3AccessKey(f *testing.F) {
	for _, s := range []string{"AKIAIOSFODNN7EXAMPLE", "", "a/b", "ÄKEY", string(make([]byte, 129))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ValidateS3AccessKey(id) != nil {
			return
		}
		for _, r := range id {
			if r == '/' || r > 127 {
				t.Fatalf("%q accepted", id)
			}
		}
		if id == "" || len(id) > maxS3AccessKey {
			t.Fatalf("%q accepted", id)
		}
	})
}

// TestKeeperS3Key: an access key finds its entity, secret and caps; a
// miss refreshes once for concurrent callers, spaced from the last
// refresh, and a key no table holds is ErrNoS3Key.
func TestKeeperS3Key(t *testing.T) {
	caps, err := ParseCaps(map[string]string{"osd": "allow r"})
	if err != nil {
		t.Fatal(err)
	}
	newer := NewTable(2, map[string]Record{"client.u": {Caps: caps, S3Keys: []S3Key{{"AK1", "S1"}, {"AK2", "S2"}}}})
	var calls atomic.Int32
	var last atomic.Pointer[time.Time]
	k := &Keeper{MinRefreshInterval: 50 * time.Millisecond, Refresh: func(context.Context) (*Table, error) {
		calls.Add(1)
		now := time.Now()
		last.Store(&now)
		return newer, nil
	}}
	k.Note(NewTable(1, map[string]Record{"client.u": {Caps: caps}}))
	ctx := context.Background()
	// The keeper stamps its refresh before it calls Refresh, so the gap
	// between two Refresh calls can come out a hair under the spacing;
	// from a time taken before the first, it cannot.
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			id, err := k.S3Key(ctx, "AK2")
			if err != nil || id.Entity != "client.u" || id.Secret != "S2" || !id.Caps.Allows(ServiceOSD, PermRead, "b") || id.Caps.Allows(ServiceOSD, PermWrite, "b") {
				t.Errorf("AK2: %+v %v", id, err)
			}
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d refreshes for one miss, want 1", n)
	}
	if _, err := k.S3Key(ctx, "NOPE"); !errors.Is(err, ErrNoS3Key) {
		t.Fatalf("unknown key: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d refreshes after a second miss, want 2", n)
	}
	if gap := last.Load().Sub(start); gap < 50*time.Millisecond {
		t.Fatalf("the second refresh %v after the first miss, want at least MinRefreshInterval", gap)
	}
	// A miss within the spacing waits for it; a context that ends first
	// gives up without asking the mon: no telling whether the key exists.
	k3 := &Keeper{MinRefreshInterval: time.Hour, Refresh: func(context.Context) (*Table, error) {
		calls.Add(1)
		return NewTable(int64(calls.Load())+10, nil), nil
	}}
	calls.Store(0)
	if _, err := k3.S3Key(ctx, "NOPE"); !errors.Is(err, ErrNoS3Key) || calls.Load() != 1 {
		t.Fatalf("first miss: %v (%d refreshes)", err, calls.Load())
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := k3.S3Key(cctx, "NOPE"); !errors.Is(err, ErrTableUnavailable) || errors.Is(err, ErrNoS3Key) || calls.Load() != 1 {
		t.Fatalf("a miss within the spacing: %v (%d refreshes, want 1)", err, calls.Load())
	}
	// The mon refuses the table (this entity removed): a miss is no
	// answer that the key does not exist.
	refused := errors.New("client.s3-gateway has no auth record")
	k4 := &Keeper{Refresh: func(context.Context) (*Table, error) { return nil, refused }}
	k4.Note(NewTable(1, nil))
	if _, err := k4.S3Key(ctx, "AK1"); !errors.Is(err, ErrTableUnavailable) || !errors.Is(err, refused) || errors.Is(err, ErrNoS3Key) {
		t.Fatalf("a miss the mon could not answer: %v", err)
	}
}

func TestProfileS3Gateway(t *testing.T) {
	c, err := ParseCaps(map[string]string{"mon": "allow profile s3-gateway", "osd": "allow profile s3-gateway"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Allows(ServiceOSD, PermRead|PermWrite, "any") || !c.Allows(ServiceMon, PermRead, "") || c.Allows(ServiceMon, PermWrite, "") ||
		c.Allows(ServiceMon, PermExec, "") || c.HasProfile(ServiceOSD, ProfileOSD) {
		t.Fatalf("s3-gateway: %v", c)
	}
}
