package main

import (
	"testing"
	"time"
)

func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "64MiB": 64 << 20, "1.5 GB": 1500000000, "4096": 4096} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "fast", "-1MiB", "99999999999EiB"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) = %d, want an error", in, b)
		}
	}
}

// TestClientMessageSizeCapFlag: --client-message-size-cap reaches the
// OSD's configuration, 0 (the OSD's own default) when not given.
func TestClientMessageSizeCapFlag(t *testing.T) {
	_, _, osdConfig := captureOSDConfig(t)
	if got := osdConfig().ClientMessageBytes; got != 0 {
		t.Errorf("without the flag: %d, want 0 (the default)", got)
	}
	if got := osdConfig("--client-message-size-cap", "1GiB").ClientMessageBytes; got != 1<<30 {
		t.Errorf("--client-message-size-cap 1GiB: %d, want %d", got, 1<<30)
	}
}

// TestScrubFlags: `osprey osd`'s deep scrub flags reach the OSD's
// configuration: the defaults (7 days, 32 MiB/s), an interval, a pace,
// 0 as unpaced, and --no-scrub as never.
func TestScrubFlags(t *testing.T) {
	_, _, osdConfig := captureOSDConfig(t)
	for _, tc := range []struct {
		args     []string
		interval time.Duration
		rate     int64
	}{
		{nil, 7 * 24 * time.Hour, 32 << 20},
		{[]string{"--deep-scrub-interval", "36h", "--scrub-bytes-per-sec", "100MiB"}, 36 * time.Hour, 100 << 20},
		{[]string{"--scrub-bytes-per-sec", "0"}, 7 * 24 * time.Hour, -1},
		{[]string{"--no-scrub"}, -1, 32 << 20},
	} {
		if got := osdConfig(tc.args...); got.DeepScrubInterval != tc.interval || got.ScrubBytesPerSec != tc.rate {
			t.Errorf("%v: interval %v, rate %d; want %v, %d", tc.args, got.DeepScrubInterval, got.ScrubBytesPerSec, tc.interval, tc.rate)
		}
	}
}
