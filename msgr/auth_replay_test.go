package msgr_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// recordingProxy forwards TCP connections to target and records every
// byte the dialer sent, as an eavesdropper on the path would.
type recordingProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	fromC  bytes.Buffer
	target string
}

func newRecordingProxy(t *testing.T, target string) *recordingProxy {
	p := &recordingProxy{target: target}
	// Recorded before forwarded: a test that checks the recording once
	// the server has a message finds the message's bytes in it.
	p.ln = tcpProxy(t, target, func(c, s net.Conn) { io.Copy(io.MultiWriter(p, s), c) })
	return p
}

// tcpProxy listens on loopback and connects each connection to target:
// what target sends goes back unchanged, what the dialer sends goes
// through fromDialer (on a goroutine of its own; s is closed after it).
func tcpProxy(t *testing.T, target string, fromDialer func(c, s net.Conn)) net.Listener {
	return tcpProxyBoth(t, target, fromDialer, func(s, c net.Conn) { io.Copy(c, s) })
}

// tcpProxyBoth is tcpProxy with what target sends going through
// fromAcceptor (c is closed after it).
func tcpProxyBoth(t *testing.T, target string, fromDialer func(c, s net.Conn), fromAcceptor func(s, c net.Conn)) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() {
				fromAcceptor(s, c)
				c.Close()
			}()
			go func() {
				fromDialer(c, s)
				s.Close()
			}()
		}
	}()
	return ln
}

func (p *recordingProxy) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fromC.Write(b)
}

func (p *recordingProxy) recorded() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.fromC.Bytes())
}

// TestAuthReplayedHandshake: an eavesdropper who recorded everything an
// authenticated client sent (its TLS flights and a message) and plays it
// to the server again gets no session and delivers nothing: the server's
// new handshake has fresh randomness, which the recorded client Finished
// and CertificateVerify do not cover.
func TestAuthReplayedHandshake(t *testing.T) {
	ca := msgrtest.NewTestCA(t)
	addr, got, logs := peerServer(t, withKeyring(t, ca, nil))
	proxy := newRecordingProxy(t, strings.TrimPrefix(addr, "tcp://"))

	cli := tcpEnv.NewMessenger(t, "client.victim", msgrtest.NewRecorder(t), withKeyring(t, ca, nil))
	c, err := cli.Connect(context.Background(), "tcp://"+proxy.ln.Addr().String(), "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := sendOne(t, c, got); err != nil || p != "client.victim" {
		t.Fatalf("the genuine session: %q, %v", p, err)
	}
	captured := proxy.recorded()

	// Replay it on a connection of our own, and read until the server
	// ends it.
	raw, err := net.Dial("tcp", strings.TrimPrefix(addr, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write(captured); err != nil {
		t.Fatal(err)
	}
	raw.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, raw); err != nil {
		t.Fatalf("the server did not end the replayed connection: %v", err)
	}
	select {
	case p := <-got:
		t.Fatalf("the replay delivered a message as %s", p)
	default:
	}
	if !strings.Contains(logs.String(), "refused") && !strings.Contains(logs.String(), "handshake") {
		t.Fatalf("the server logged nothing about the replay:\n%s", logs.String())
	}
}
