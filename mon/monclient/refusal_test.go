package monclient_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/logbuf"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestSubscribeAccessDenied: a real mon (auth on) answers the subscription
// of an entity whose caps lack mon 'allow r' (docs/auth.md's least caps,
// osd 'allow rw bucket=bkt') with ACCESS_DENIED. Subscribe ends its wait
// with that answer at once, as an error errors.Is/As see as AccessDenied
// (the CLI's exit 1 with the mon's reason), instead of retrying until the
// caller's deadline, which reads as an unreachable cluster (exit 4).
func TestSubscribeAccessDenied(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := mon.Start(context.Background(), mon.Config{
		EmbedEtcdDir: t.TempDir(), Logger: logger,
		Pool: &osdpb.Pool{Id: 1, Name: "default", Size: 3, PgCount: 16},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Close(ctx)
	})
	subscribe := func(t *testing.T, entity string, caps map[string]string, wait time.Duration) error {
		t.Helper()
		pem, err := m.GetOrCreateKeyring(t.Context(), entity, caps)
		if err != nil {
			t.Fatal(err)
		}
		k, err := auth.ParseKeyring(pem)
		if err != nil {
			t.Fatal(err)
		}
		c, err := monclient.New(context.Background(), monclient.Options{Addrs: []string{m.Addr()}, Keyring: k, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		_, err = c.Subscribe(ctx)
		return err
	}

	// The same mon serves an entity that has mon 'allow r'.
	if err := subscribe(t, "client.reader", map[string]string{"mon": "allow r", "osd": "allow rw bucket=bkt"}, 30*time.Second); err != nil {
		t.Fatalf("subscribing with mon 'allow r': %v", err)
	}

	// Without it, the refusal comes back instead of a wait for the
	// deadline (which, far beyond the subscribe loop's 1 s retries, would
	// end in DeadlineExceeded).
	err = subscribe(t, "client.app", map[string]string{"osd": "allow rw bucket=bkt"}, 10*time.Second)
	var oe *ops.Error
	if !errors.Is(err, ops.ErrAccessDenied) || !errors.As(err, &oe) || oe.Status != osdpb.Status_ACCESS_DENIED {
		t.Fatalf("subscribing without mon 'allow r': %v, want AccessDenied", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the refusal came with the deadline: %v", err)
	}
	if !strings.Contains(err.Error(), "client.app may not subscribe to the map (needs mon 'allow r'") {
		t.Fatalf("the error does not give the mon's reason: %v", err)
	}
	t.Log(err)

	// A client that stays up after a refusal: the refusal is Subscribe's
	// answer, not a log line as well (a CLI printed it twice), and once an
	// operator fixes the caps, the subscription it keeps trying goes
	// through.
	pem, err := m.GetOrCreateKeyring(t.Context(), "client.later", map[string]string{"osd": "allow r"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := auth.ParseKeyring(pem)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	c, err := monclient.New(context.Background(), monclient.Options{Addrs: []string{m.Addr()}, Keyring: k, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Subscribe(t.Context()); !errors.Is(err, ops.ErrAccessDenied) {
		t.Fatalf("client.later's first subscription: %v", err)
	}
	if strings.Contains(logs.String(), "subscribing") {
		t.Fatalf("the refusal Subscribe returned was logged too:\n%s", logs.String())
	}
	apem, err := m.GetOrCreateKeyring(t.Context(), "client.admin", mon.AdminCaps)
	if err != nil {
		t.Fatal(err)
	}
	ak, err := auth.ParseKeyring(apem)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := monclient.New(context.Background(), monclient.Options{Addrs: []string{m.Addr()}, Keyring: ak, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Command(t.Context(), &osdpb.MonCommand{Prefix: "auth caps", Entity: "client.later", Caps: map[string]string{"mon": "allow r", "osd": "allow r"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for c.Map() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no map 20 s after client.later's caps were fixed; log:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}
