package osd_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestMarkedDownTooOften: an OSD that finds itself marked down while it
// runs boots again, but not after more than MaxMarkdownCount times within
// MaxMarkdownPeriod: it then stays down (its PGs go on without it) until
// the period since the first of them has passed, then boots again.
func TestMarkedDownTooOften(t *testing.T) {
	const count, period = 2, 12 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := local.Start(ctx, local.Options{OSDs: 3, PGs: 8, WithMon: true, NoAuth: true, Dir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxMarkdownCount: count, MaxMarkdownPeriod: period,
		NearfullRatio: 1, BackfillfullRatio: 1, FullRatio: 1, FailsafeFullRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	mc, err := monclient.New(ctx, monclient.Options{Addrs: []string{c.Mon.Addr()}, Name: "client.admin", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Close() })
	o := c.OSDs[0]
	up := func() bool { info, ok := c.Mon.Map().OSD(0); return ok && info.Up }
	markDown := func() uint64 {
		t.Helper()
		rep, err := mc.Command(ctx, &osdpb.MonCommand{Prefix: "osd down", Ids: []uint32{0}})
		if err != nil {
			t.Fatal(err)
		}
		return rep.GetEpoch()
	}
	start := time.Now()
	for i := range count {
		epoch := markDown()
		msgrtest.Eventually(t, 30*time.Second, "osd.0 up again", func() bool {
			return up() && c.Mon.Map().Epoch() > epoch
		})
		if !o.HeldDownUntil().IsZero() {
			t.Fatalf("held down after %d markdowns of %d allowed", i+1, count)
		}
	}
	markDown()
	msgrtest.Eventually(t, 30*time.Second, "osd.0 held down", func() bool { return !o.HeldDownUntil().IsZero() })
	if time.Since(start) >= period {
		t.Skipf("the markdowns took %v, more than the period %v: the machine is too slow for this test", time.Since(start), period)
	}
	if up() {
		t.Fatal("osd.0 up while held down")
	}
	until := o.HeldDownUntil()
	// The status says why it stays down, not only its log.
	heldLine := func() string {
		st, err := c.Mon.StatusDetail(ctx)
		if err != nil {
			return ""
		}
		for _, ch := range st.Health.Detail {
			for _, l := range ch.Detail {
				if ch.Code == "OSD_DOWN" && strings.HasPrefix(l, "osd.0 ") && strings.Contains(l, "held down by itself until "+until.UTC().Format(time.TimeOnly)) {
					return l
				}
			}
		}
		return ""
	}
	msgrtest.Eventually(t, time.Until(until), "the status's OSD_DOWN to say osd.0 holds itself down", func() bool { return heldLine() != "" })
	t.Logf("held: %s", heldLine())
	msgrtest.Eventually(t, 30*time.Second+period, "osd.0 up after its hold", func() bool { return up() })
	if now := time.Now(); now.Before(until) {
		t.Fatalf("osd.0 booted at %v, before its hold ended at %v", now, until)
	}
	if !o.HeldDownUntil().IsZero() {
		t.Fatal("still held after booting")
	}
}
