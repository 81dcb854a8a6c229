package msgr_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/proto/msgrpb"
	"google.golang.org/protobuf/proto"
)

// strippingProxy forwards TCP connections to target, decoding the
// dialer's handshake frames and taking "secure" out of its AUTH_REQUEST
// (CRCs recomputed), as an attacker on the path would to talk both sides
// down to crc.
func strippingProxy(t *testing.T, target string) string {
	return tcpProxy(t, target, stripSecure).Addr().String()
}

// stripSecure relays the dialer's banner and handshake frames from c to s,
// with "secure" taken out of AUTH_REQUEST.modes.
func stripSecure(c, s net.Conn) {
	relayHandshake(c, s, wire.TagAuthRequest, func(front []byte) []byte {
		var req msgrpb.AuthRequest
		if proto.Unmarshal(front, &req) != nil {
			return front
		}
		var kept []string
		for _, m := range req.Modes {
			if m != "secure" {
				kept = append(kept, m)
			}
		}
		req.Modes = kept
		front, _ = proto.Marshal(&req)
		return front
	})
}

// relayHandshake relays a banner and then handshake frames from one end
// to the other, the fronts of frames tagged tag changed by alter (CRCs
// recomputed), as an attacker on the path would change them.
func relayHandshake(from, to net.Conn, tag wire.Tag, alter func(front []byte) []byte) {
	var banner [wire.BannerSize]byte
	if _, err := io.ReadFull(from, banner[:]); err != nil {
		return
	}
	to.Write(banner[:])
	in := wire.NewReaderLink(from, 0, wire.HandshakeLimits)
	out := wire.NewStreamLink(to, 0, wire.LinkOptions{})
	for {
		var f wire.Frame
		if err := in.ReadFrame(&f); err != nil {
			return
		}
		if f.Tag == tag {
			f.Front = alter(f.Front)
		}
		err := out.WriteFrames([]wire.Frame{{Preamble: wire.Preamble{Tag: f.Tag}, Front: f.Front}})
		f.Release()
		if err != nil {
			return
		}
	}
}

// TestSecureOfferStripped: a dialer that prefers secure but accepts crc,
// and an acceptor that would take either, are not talked down to crc by
// someone who strips "secure" from the offer: the acceptor's mode proof
// does not match what the dialer sent, and the dialer refuses the link
// (ErrAuth) instead of running in clear. Without the proxy they agree on
// secure.
func TestSecureOfferStripped(t *testing.T) {
	ca := msgrtest.NewTestCA(t)
	either := withModes(t, ca, msgr.ModeSecure, msgr.ModeCRC)
	addr, got, _ := peerServer(t, either)
	cli := tcpEnv.NewMessenger(t, "client.x", msgrtest.NewRecorder(t), either)

	direct, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sendOne(t, direct, got); err != nil || direct.Stats().Mode != msgr.ModeSecure {
		t.Fatalf("direct: %v, mode %q", err, direct.Stats().Mode)
	}
	direct.Close()

	proxy := strippingProxy(t, strings.TrimPrefix(addr, "tcp://"))
	c, err := cli.Connect(context.Background(), "tcp://"+proxy, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the session survived a stripped offer, in mode %q", c.Stats().Mode)
	}
	if err := c.Err(); !errors.Is(err, msgr.ErrAuth) || !strings.Contains(err.Error(), "altered") {
		t.Fatalf("the session ended with %v, want ErrAuth: the offer was altered", err)
	}
}

// proofAlteringProxy forwards TCP connections to target, passing the
// dialer's bytes as they are and flipping a bit of the acceptor's
// AUTH_DONE.mode_proof.
func proofAlteringProxy(t *testing.T, target string) string {
	copyTo := func(c, s net.Conn) { io.Copy(s, c) }
	return tcpProxyBoth(t, target, copyTo, func(s, c net.Conn) {
		relayHandshake(s, c, wire.TagAuthDone, func(front []byte) []byte {
			var done msgrpb.AuthDone
			if proto.Unmarshal(front, &done) != nil || len(done.ModeProof) == 0 {
				return front
			}
			done.ModeProof[0] ^= 1
			front, _ = proto.Marshal(&done)
			return front
		})
	}).Addr().String()
}

// TestModeProofAfterEarlySessionRequest: a dialer that offers one mode
// sends its session request before AUTH_DONE (TestHandshakeWrites), yet
// still checks AUTH_DONE's mode proof: altered on the way, the link is
// refused (ErrAuth) and no session starts, in either mode.
func TestModeProofAfterEarlySessionRequest(t *testing.T) {
	ca := msgrtest.NewTestCA(t)
	for _, mode := range []msgr.Mode{msgr.ModeCRC, msgr.ModeSecure} {
		t.Run(string(mode), func(t *testing.T) {
			addr, got, _ := peerServer(t, withModes(t, ca, mode))
			cli := tcpEnv.NewMessenger(t, "client.x", msgrtest.NewRecorder(t), withModes(t, ca, mode))
			proxy := proofAlteringProxy(t, strings.TrimPrefix(addr, "tcp://"))
			c, err := cli.Connect(context.Background(), "tcp://"+proxy, "osd.0")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sendOne(t, c, got); !errors.Is(err, msgr.ErrAuth) || !strings.Contains(err.Error(), "altered") {
				t.Fatalf("the session ended with %v, want ErrAuth: the offer was altered", err)
			}
		})
	}
}
