package guard

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRateLog(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	now := time.Unix(1000, 0)
	r := RateLog{Every: 10 * time.Second, Now: func() time.Time { return now }}
	for range 5 {
		r.Log(log, slog.LevelWarn, "a", "refused")
	}
	r.Log(log, slog.LevelWarn, "b", "other")
	if got := strings.Count(out.String(), "msg=refused"); got != 1 {
		t.Fatalf("%d lines for key a within the interval, want 1:\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "msg=other") {
		t.Fatal("another key was suppressed")
	}
	now = now.Add(10 * time.Second)
	if !r.Log(log, slog.LevelWarn, "a", "refused") {
		t.Fatal("not logged after the interval")
	}
	if !strings.Contains(out.String(), "suppressed=4") {
		t.Fatalf("suppressed count missing:\n%s", out.String())
	}
	r.Log(log, slog.LevelWarn, "a", "refused")
	if n := r.Forget("a"); n != 1 {
		t.Fatalf("Forget: %d suppressed, want 1", n)
	}
	if !r.Log(log, slog.LevelWarn, "a", "refused") {
		t.Fatal("a forgotten key's next line was suppressed")
	}
	// Many keys: the map stays bounded.
	for i := range 10 * maxKeys {
		now = now.Add(DefaultEvery)
		r.Log(log, slog.LevelDebug, fmt.Sprint("k", i), "x")
	}
	if len(r.keys) > maxKeys {
		t.Fatalf("%d keys kept", len(r.keys))
	}
}

func TestBackoff(t *testing.T) {
	var b Backoff
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		if d := b.Next(); d != w*time.Millisecond {
			t.Fatalf("step %d: %v, want %v", i, d, w*time.Millisecond)
		}
	}
	b.Reset()
	if d := b.Next(); d != BackoffMin {
		t.Fatalf("after Reset: %v", d)
	}
}
