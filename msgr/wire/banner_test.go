package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestBannerRoundTrip(t *testing.T) {
	in := Banner{Version: Version, Supported: KnownFeatures | 1<<60, Required: FeatureRendezvous}
	var b [BannerSize]byte
	in.Put(b[:])
	if !bytes.Equal(b[:8], []byte("OSPREYMS")) {
		t.Fatalf("magic %q", b[:8])
	}
	out, err := ParseBanner(b[:])
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Fatalf("got %+v, want %+v", out, in)
	}
}

func TestParseBannerRejects(t *testing.T) {
	var good [BannerSize]byte
	(&Banner{Version: Version}).Put(good[:])
	for n := range BannerSize {
		if _, err := ParseBanner(good[:n]); !errors.Is(err, ErrBanner) {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
	for i := range 8 {
		b := good
		b[i] ^= 0x20
		if _, err := ParseBanner(b[:]); !errors.Is(err, ErrBanner) {
			t.Errorf("magic byte %d flipped: %v", i, err)
		}
	}
	// Something that is not our protocol at all, e.g. an HTTP client.
	if _, err := ParseBanner([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n.....")); !errors.Is(err, ErrBanner) {
		t.Errorf("http: %v", err)
	}
}

func TestNegotiate(t *testing.T) {
	mine := Banner{Version: Version, Supported: KnownFeatures}
	tests := []struct {
		name       string
		mine, peer Banner
		want       uint64
		fail       bool
	}{
		{"same", mine, mine, KnownFeatures, false},
		{"peer has fewer", mine, Banner{Version: Version, Supported: FeatureRendezvous}, FeatureRendezvous, false},
		{"peer has none", mine, Banner{Version: Version}, 0, false},
		{"peer has unknown extra", mine, Banner{Version: Version, Supported: KnownFeatures | 1<<40}, KnownFeatures, false},
		{"version newer", mine, Banner{Version: Version + 1, Supported: KnownFeatures}, 0, true},
		{"version zero", mine, Banner{Version: 0, Supported: KnownFeatures}, 0, true},
		{"peer requires unknown", mine, Banner{Version: Version, Supported: KnownFeatures | 1<<40, Required: 1 << 40}, 0, true},
		{"peer requires one we lack", Banner{Version: Version, Supported: FeatureRendezvous},
			Banner{Version: Version, Supported: KnownFeatures, Required: FeatureNoDataCRC}, 0, true},
		{"we require one the peer lacks", Banner{Version: Version, Supported: KnownFeatures, Required: FeatureNoDataCRC},
			Banner{Version: Version, Supported: FeatureRendezvous}, 0, true},
		{"both require, both have", Banner{Version: Version, Supported: KnownFeatures, Required: FeatureNoDataCRC},
			Banner{Version: Version, Supported: KnownFeatures, Required: FeatureRendezvous}, KnownFeatures, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Negotiate(tc.mine, tc.peer)
			if tc.fail {
				if !errors.Is(err, ErrBanner) {
					t.Fatalf("got %#x, %v; want ErrBanner", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %#x, %v; want %#x", got, err, tc.want)
			}
			// Agreement is symmetric.
			back, err := Negotiate(tc.peer, tc.mine)
			if err != nil || back != got {
				t.Fatalf("reverse: got %#x, %v; want %#x", back, err, got)
			}
		})
	}
}

func TestExchangeBanner(t *testing.T) {
	type result struct {
		f   uint64
		err error
	}
	// Both sides write before they read, so this needs a stream with
	// buffering (TCP), not the synchronous net.Pipe.
	run := func(a, b Banner) (ra, rb result) {
		ca, cb := tcpPair(t)
		defer ca.Close()
		defer cb.Close()
		ch := make(chan result, 1)
		go func() {
			f, err := ExchangeBanner(cb, b)
			ch <- result{f, err}
		}()
		f, err := ExchangeBanner(ca, a)
		return result{f, err}, <-ch
	}
	full := Banner{Version: Version, Supported: KnownFeatures}
	ra, rb := run(full, Banner{Version: Version, Supported: FeatureNoDataCRC})
	if ra.err != nil || rb.err != nil || ra.f != FeatureNoDataCRC || rb.f != FeatureNoDataCRC {
		t.Fatalf("got %+v, %+v", ra, rb)
	}
	// A stream link does not offer RENDEZVOUS, which it refuses, but
	// agrees on the rest with a peer that does (the banners of earlier
	// builds), and the peer reads a banner without it.
	stream := KnownFeatures &^ (FeatureRendezvous | FeatureRendezvousFront)
	ra, rb = run(full, full)
	if ra.err != nil || rb.err != nil || ra.f != stream || rb.f != stream {
		t.Fatalf("both offering every feature: got %+v, %+v", ra, rb)
	}
	sa, sb := tcpPair(t)
	go ExchangeBanner(sb, full)
	var raw [BannerSize]byte
	full.Put(raw[:])
	sa.Write(raw[:])
	if _, err := io.ReadFull(sa, raw[:]); err != nil {
		t.Fatal(err)
	}
	if got, err := ParseBanner(raw[:]); err != nil || got.Supported != stream {
		t.Fatalf("a stream link's banner offers %#x (%v), want %#x", got.Supported, err, stream)
	}
	sa.Close()
	sb.Close()
	ra, rb = run(full, Banner{Version: Version + 1, Supported: KnownFeatures})
	if !errors.Is(ra.err, ErrBanner) || !errors.Is(rb.err, ErrBanner) {
		t.Fatalf("version mismatch: %v, %v", ra.err, rb.err)
	}
	ra, rb = run(Banner{Version: Version, Supported: KnownFeatures, Required: FeatureRendezvous}, Banner{Version: Version})
	if !errors.Is(ra.err, ErrBanner) || !errors.Is(rb.err, ErrBanner) {
		t.Fatalf("required feature: %v, %v", ra.err, rb.err)
	}

	// A peer that hangs up before its banner: an I/O error, not a panic.
	ca, cb := tcpPair(t)
	go func() {
		io.CopyN(io.Discard, cb, BannerSize)
		cb.Write([]byte("OSPR"))
		cb.Close()
	}()
	if _, err := ExchangeBanner(ca, full); !isTruncated(err) {
		t.Fatalf("short banner: %v", err)
	}
	ca.Close()
}

// TestNegotiateRequiresUnsupported: whatever either side requires must be
// in the agreed features, or the link runs without something one side
// said it cannot do without.
func TestNegotiateRequiresUnsupported(t *testing.T) {
	mine := Banner{Version: Version, Supported: KnownFeatures}
	peer := Banner{Version: Version, Supported: 0, Required: FeatureNoDataCRC}
	agreed, err := Negotiate(mine, peer)
	if err == nil && agreed&peer.Required != peer.Required {
		t.Fatalf("agreed %#x, but the peer requires %#x", agreed, peer.Required)
	}
}
