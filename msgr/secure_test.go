package msgr_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/wire"
)

// withModes gives a messenger ca's keyring and modes.
func withModes(t *testing.T, ca *msgrtest.TestCA, modes ...msgr.Mode) func(*msgr.Options) {
	return func(o *msgr.Options) {
		o.Auth = &msgr.AuthOptions{Keyring: ca.Keyring(t, o.Name), Modes: modes}
	}
}

// TestSecureModeNegotiation: the acceptor picks the first of its modes the
// dialer offered; with none in common the dialer's session ends with
// ErrMode (and ErrAuth: it is final) saying what each side accepts.
func TestSecureModeNegotiation(t *testing.T) {
	crc, sec := msgr.ModeCRC, msgr.ModeSecure
	for _, tc := range []struct {
		name             string
		dialer, acceptor []msgr.Mode
		want             msgr.Mode // "" : refused
	}{
		{"default", nil, nil, crc},
		{"both secure", []msgr.Mode{sec}, []msgr.Mode{sec}, sec},
		{"acceptor prefers crc", []msgr.Mode{sec, crc}, []msgr.Mode{crc, sec}, crc},
		{"acceptor prefers secure", []msgr.Mode{crc, sec}, []msgr.Mode{sec, crc}, sec},
		{"acceptor requires secure", []msgr.Mode{crc}, []msgr.Mode{sec}, ""},
		{"dialer requires secure", []msgr.Mode{sec}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca := msgrtest.NewTestCA(t)
			addr, got, logs := peerServer(t, withModes(t, ca, tc.acceptor...))
			cli := tcpEnv.NewMessenger(t, "client.x", msgrtest.NewRecorder(t), withModes(t, ca, tc.dialer...))
			c, err := cli.Connect(context.Background(), addr, "osd.0")
			if err != nil {
				t.Fatal(err)
			}
			_, err = sendOne(t, c, got)
			if tc.want == "" {
				if !errors.Is(err, msgr.ErrMode) || !errors.Is(err, msgr.ErrAuth) {
					t.Fatalf("session ended with %v, want ErrMode (and ErrAuth)", err)
				}
				if !strings.Contains(err.Error(), "client.x offers modes") {
					t.Errorf("the error does not say what was offered: %v", err)
				}
				msgrtest.Eventually(t, 5*time.Second, "the refusal in the acceptor's log", func() bool {
					return strings.Contains(logs.String(), "no connection mode in common")
				})
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m := c.Stats().Mode; m != tc.want {
				t.Fatalf("link in mode %q, want %q", m, tc.want)
			}
		})
	}
}

// TestParseModes: ParseModes reads Ceph's spellings
// and refuses what it does not know.
func TestParseModes(t *testing.T) {
	for in, want := range map[string]string{
		"crc": "crc", "secure": "secure", "prefer-secure": "secure,crc", "prefer-crc": "crc,secure",
		"secure, crc": "secure,crc", "crc secure": "crc,secure",
	} {
		got, err := msgr.ParseModes(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		var s []string
		for _, m := range got {
			s = append(s, string(m))
		}
		if strings.Join(s, ",") != want {
			t.Errorf("%q: %v, want %s", in, got, want)
		}
	}
	for _, in := range []string{"", "tls", "secure,secure", "crc,, none"} {
		if got, err := msgr.ParseModes(in); err == nil {
			t.Errorf("%q: %v, want an error", in, got)
		}
	}
}

// TestSecureFramesAreSealedOnTheWire: what an eavesdropper records of a
// secure session holds none of a message's bytes; of a crc session (the
// control, which proves the recording works) it holds them.
func TestSecureFramesAreSealedOnTheWire(t *testing.T) {
	front := []byte("front-plaintext-marker")
	data := bytes.Repeat([]byte("data-plaintext-marker "), 200)
	for _, mode := range []msgr.Mode{msgr.ModeCRC, msgr.ModeSecure} {
		t.Run(string(mode), func(t *testing.T) {
			ca := msgrtest.NewTestCA(t)
			addr, got, _ := peerServer(t, withModes(t, ca, mode))
			proxy := newRecordingProxy(t, strings.TrimPrefix(addr, "tcp://"))
			cli := tcpEnv.NewMessenger(t, "client.x", msgrtest.NewRecorder(t), withModes(t, ca, mode))
			c, err := cli.Connect(context.Background(), "tcp://"+proxy.ln.Addr().String(), "osd.0")
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Send(context.Background(), msgr.NewMessage(1, front, data)); err != nil {
				t.Fatal(err)
			}
			select {
			case <-got:
			case <-time.After(20 * time.Second):
				t.Fatal("the message never arrived")
			}
			rec := proxy.recorded()
			clear := bytes.Contains(rec, front) || bytes.Contains(rec, []byte("data-plaintext-marker"))
			if clear != (mode == msgr.ModeCRC) {
				t.Fatalf("mode %s: message bytes in clear on the wire: %v (%d bytes recorded)", mode, clear, len(rec))
			}
		})
	}
}

// tamperOnce returns a tamper hook that flips one bit of the first sealed
// segment pick chooses, and the count of segments it altered. The hook
// runs on every link's writer at once: pick must look at nothing but
// the segment.
func tamperOnce(pick func(sealed []byte) bool) (func([]byte), *atomic.Int32) {
	var n atomic.Int32
	return func(sealed []byte) {
		if pick(sealed) && n.CompareAndSwap(0, 1) {
			sealed[len(sealed)/2] ^= 0x10
		}
	}, &n
}

// tamperedPart is which sealed segment of a message testTamperedFrame
// alters.
type tamperedPart int

const (
	// tamperWhole: the message's frame in one part, or the data part of
	// one in two: the first segment longer than the data.
	tamperWhole tamperedPart = iota
	// tamperHead: the front and preamble part of a frame in two parts,
	// known by its length: tamperFront, a preamble and a tag, a length
	// no other sealed frame of the test has (the sealed handshake frames
	// are shorter, acks and keepalives a bare preamble).
	tamperHead
)

// tamperFront is the front of testTamperedFrame's messages.
var tamperFront = bytes.Repeat([]byte("front "), 70)

// dialSecure starts a messenger osd.0 on env that dispatches to d, and
// returns osd.1's Conn to it, both in secure mode with ca's keyrings.
func dialSecure(t *testing.T, env msgrtest.Env, ca *msgrtest.TestCA, d msgr.Dispatcher) *msgr.Conn {
	t.Helper()
	addr := env.Listen(t, env.NewMessenger(t, "osd.0", d, withModes(t, ca, msgr.ModeSecure)))
	cli := env.NewMessenger(t, "osd.1", msgrtest.NewRecorder(t), withModes(t, ca, msgr.ModeSecure))
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSecureTamperedFrameTCP: a sealed frame altered on the way faults
// its link on TCP, in one part (a small message), in two (a large one:
// its data part, then its front and preamble part) or in records (a
// record in the middle, then the head); see testTamperedFrame.
func TestSecureTamperedFrameTCP(t *testing.T) {
	t.Run("one-part", func(t *testing.T) { testTamperedFrame(t, tcpEnv, 2000, tamperWhole) })
	t.Run("data-part", func(t *testing.T) { testTamperedFrame(t, tcpEnv, 100<<10, tamperWhole) })
	t.Run("head-part", func(t *testing.T) { testTamperedFrame(t, tcpEnv, 100<<10, tamperHead) })
	t.Run("records", func(t *testing.T) { testTamperedFrame(t, tcpEnv, 1<<20, tamperWhole) })
	t.Run("records-head", func(t *testing.T) { testTamperedFrame(t, tcpEnv, 1<<20, tamperHead) })
}

// testTamperedFrame: a sealed frame altered on the way does not open. The
// link faults and nothing of the frame is delivered: a lossless session
// reconnects (new keys) and delivers the message exactly once; a lossy one
// ends, and the message is never delivered. The receiving conn counts the
// frame (SealFailures).
func testTamperedFrame(t *testing.T, env msgrtest.Env, size int, part tamperedPart) {
	data := bytes.Repeat([]byte{0xab}, size)
	pick := func(sealed []byte) bool { return len(sealed) > size }
	if part == tamperHead {
		pick = func(sealed []byte) bool { return len(sealed) == len(tamperFront)+wire.SealedOverhead }
	}
	t.Run("lossless", func(t *testing.T) {
		ca := msgrtest.NewTestCA(t)
		hook, tampered := tamperOnce(pick)
		defer msgr.SetTamperHook(hook)()
		var (
			mu    sync.Mutex
			count int
			conns = make(chan *msgr.Conn, 4)
		)
		c := dialSecure(t, env, ca, msgr.DispatchFunc(func(m *msgr.Message) {
			mu.Lock()
			count++
			mu.Unlock()
			if !bytes.Equal(m.Data, data) {
				t.Errorf("delivered %d bytes that differ from those sent", len(m.Data))
			}
			conns <- m.Conn()
			m.Release()
		}))
		if err := c.Send(context.Background(), msgr.NewMessage(1, tamperFront, data)); err != nil {
			t.Fatal(err)
		}
		var sc *msgr.Conn
		select {
		case sc = <-conns:
		case <-time.After(20 * time.Second):
			t.Fatal("the message was never delivered")
		}
		// A second message, after the first, proves the first was not
		// delivered twice: the session is in order.
		if err := c.Send(context.Background(), msgr.NewMessage(1, tamperFront, data)); err != nil {
			t.Fatal(err)
		}
		<-conns
		mu.Lock()
		defer mu.Unlock()
		if count != 2 || tampered.Load() != 1 {
			t.Fatalf("%d deliveries of 2 messages, %d frames tampered", count, tampered.Load())
		}
		if st := sc.Stats(); st.SealFailures != 1 || st.Faults == 0 || st.Mode != msgr.ModeSecure {
			t.Fatalf("receiver's stats after a tampered frame: %+v", st)
		}
	})
	t.Run("lossy", func(t *testing.T) {
		ca := msgrtest.NewTestCA(t)
		hook, tampered := tamperOnce(pick)
		defer msgr.SetTamperHook(hook)()
		var delivered atomic.Int32
		srv := env.NewMessenger(t, "osd.0", msgr.DispatchFunc(func(m *msgr.Message) {
			delivered.Add(1)
			m.Release()
		}), withModes(t, ca, msgr.ModeSecure))
		addr := env.Listen(t, srv)
		cli := env.NewMessenger(t, "client.x", msgrtest.NewRecorder(t), func(o *msgr.Options) {
			withModes(t, ca, msgr.ModeSecure)(o)
			o.DefaultPolicy = msgr.LossyClient
		})
		c, err := cli.Connect(context.Background(), addr, "osd.0")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Send(context.Background(), msgr.NewMessage(1, tamperFront, data)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("the lossy session survived a tampered frame")
		}
		// The server's reader refused the frame before it closed the
		// link the client saw close: nothing can be delivered now.
		if n := delivered.Load(); n != 0 || tampered.Load() != 1 {
			t.Fatalf("%d messages delivered from a tampered frame (%d tampered)", n, tampered.Load())
		}
	})
}

// TestSecureReceivedDataAlignedTCP: in secure mode too, over TCP, a
// received message's data starts on a wire.DataAlign boundary, whatever
// form its sealed frame took; see testSecureDataPlaced.
func TestSecureReceivedDataAlignedTCP(t *testing.T) {
	testSecureDataPlaced(t, tcpEnv, func(front, data int) bool { return true })
}

// testSecureDataPlaced sends secure messages with fronts and data either
// side of the two-part form's thresholds (4 KiB of data, a 512-byte
// front) and of the links' large-frame sizes: each arrives intact, and
// its data starts on a wire.DataAlign boundary (where the OSD's store
// writes it from with O_DIRECT) when aligned says the link places it so.
func testSecureDataPlaced(t *testing.T, env msgrtest.Env, aligned func(front, data int) bool) {
	dc := &msgrtest.DataCheck{Aligned: aligned, Wait: 60 * time.Second}
	for i, size := range []int{1, 100, 4095, 4096, 4097, 16 << 10, 64 << 10, 100 << 10, 1 << 20, 4<<20 + 1} {
		for j, front := range []int{0, 16, 512, 513} {
			dc.Sent = append(dc.Sent, msgrtest.Sent{Front: bytes.Repeat([]byte{byte(j)}, front), Data: dataOf(size, i)})
		}
	}
	dc.Run(t, dialSecure(t, env, msgrtest.NewTestCA(t), dc.Dispatcher()))
}

// TestRecvBudgetSecure: testRecvBudget in secure mode over TCP, where the
// link charges each sealed frame before it reads it and the message
// opened from it holds that charge: the budget holds as in crc mode, and
// every byte charged is released. A message holds its front, its
// preamble and two GCM tags beyond its data.
func TestRecvBudgetSecure(t *testing.T) {
	testRecvBudgetOver(t, msgrtest.WithSecure(t, tcpEnv, msgrtest.NewTestCA(t)), 16+wire.SealedOverhead+wire.SealTagSize)
}
