package s3gw_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/client/s3gw"
)

// TestLimits: what an unauthenticated client can hold of a gateway run by
// Serve is bounded. Headers: at most 64 KiB (and net/http's 4 KiB of
// slack) is read of a header block, complete or not, before the
// connection is answered 431 and closed; a header sent slowly is cut at
// ClientTimeout. Connections: at most MaxConnections are open; at the cap
// the one that waited longest for a request (idle kept-alive, or without a
// whole first request) is closed for a new one, else the new
// one waits until one closes; a kept-alive connection left idle is closed
// after IdleTimeout, which frees its slot.
func TestLimits(t *testing.T) {
	e := newEnv(t)

	t.Run("DefaultMaxConnections", func(t *testing.T) {
		n := s3gw.DefaultMaxConnections()
		var rl syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Fatal(err)
		}
		if n < 1 || n > 4096 || uint64(n) > max(rl.Cur/2, 1) {
			t.Fatalf("DefaultMaxConnections() = %d with an open-file limit of %d: want 4096 or half the limit if less", n, rl.Cur)
		}
	})

	// The default ClientTimeout (1 minute): within the deadlines below only
	// the header bound can answer, not the header timeout.
	sv := serveWith(t, e, func(*s3gw.Options) {})

	t.Run("HeadersOver64KiB", func(t *testing.T) {
		req := signed(t, http.MethodGet, sv.url+"/", nil)
		req.Header.Set("X-Big", strings.Repeat("x", 100<<10))
		conn := rawConn(t, sv.addr, req, -1)
		// net/http half-closes the connection after its 431 and resets it
		// 500 ms later (the rest of the request unread): the client sees
		// the end of the answer, not the reset.
		wantAnsweredAndClosed(t, conn, http.StatusRequestHeaderFieldsTooLarge, "a request with 100 KiB of headers", true)
	})

	t.Run("UnterminatedHeaderBlock", func(t *testing.T) {
		// A header block of 1 KiB lines that never ends (no blank line),
		// as the probe's 1 MB ones: the gateway must not wait for its end.
		conn, err := net.Dial("tcp", sv.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		block := []byte("GET / HTTP/1.1\r\nHost: " + sv.addr + "\r\n")
		for i := 0; len(block) < 256<<10; i++ {
			block = fmt.Appendf(block, "X-Pad-%d: %s\r\n", i, strings.Repeat("p", 1000))
		}
		go conn.Write(block) // cut by the answer: its error is expected
		wantAnsweredAndClosed(t, conn, http.StatusRequestHeaderFieldsTooLarge, "an unterminated 256 KiB header block", false)
	})

	t.Run("StalledBodyOfARefusedRequest", func(t *testing.T) {
		// Refused before its body is read (no signature), a PUT whose
		// body stalls after 10 of its 100,000 bytes is still answered,
		// within the client timeout, and its connection closed: net/http
		// discards an unread body before it answers, and that read had
		// no deadline.
		// Refused before its signature is checked (a literal ';' in
		// the query), likewise.
		slow := serve(t, e, time.Second)
		for _, c := range []struct {
			target string
			status int
		}{{"/stalled/key", http.StatusForbidden}, {"/stalled/key?a=b;c", http.StatusBadRequest}} {
			conn, err := net.Dial("tcp", slow.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 100000\r\n\r\n0123456789", c.target, slow.addr)
			wantAnsweredAndClosed(t, conn, c.status, "an anonymous PUT "+c.target+" whose body stalls", false)
		}
	})

	t.Run("HeaderTrickle", func(t *testing.T) {
		slow := serve(t, e, time.Second)
		for _, kept := range []bool{false, true} {
			conn, err := net.Dial("tcp", slow.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			br := bufio.NewReader(conn)
			if kept { // the connection's second request
				roundTrip(t, conn, br, signed(t, http.MethodGet, slow.url+"/", nil), 10*time.Second)
			}
			if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: "+slow.addr+"\r\n"); err != nil {
				t.Fatal(err)
			}
			// A header line every 50 ms, never the blank line: each
			// read moves no deadline, the whole header has ClientTimeout.
			stop := make(chan struct{})
			trickled := make(chan struct{})
			go func() {
				defer close(trickled)
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if _, err := fmt.Fprintf(conn, "X-Slow-%d: s\r\n", i); err != nil {
						return
					}
				}
			}()
			start := time.Now()
			conn.SetReadDeadline(start.Add(20 * time.Second))
			_, err = io.Copy(io.Discard, br)
			close(stop)
			<-trickled
			if isTimeout(err) {
				t.Fatalf("kept-alive %v: a header sent a line at a time was not cut in 20 s (ClientTimeout 1s)", kept)
			}
			t.Logf("kept-alive %v: a trickled header was cut after %v (%v)", kept, time.Since(start).Round(time.Millisecond), err)
		}
	})

	t.Run("MaxConnections", func(t *testing.T) {
		capped := serveWith(t, e, func(o *s3gw.Options) { o.MaxConnections = 4 })
		// Four connections that sent nothing yet hold the four slots.
		var held []net.Conn
		for range 4 {
			conn, _ := dialConn(t, capped.addr)
			held = append(held, conn)
		}
		// A fifth client connects (the kernel's backlog takes it) but is
		// not served while the four are open.
		conn, br := dialConn(t, capped.addr)
		if err := signed(t, http.MethodGet, capped.url+"/", nil).Write(conn); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		if resp, err := http.ReadResponse(br, nil); err == nil {
			t.Fatalf("a fifth connection was served (%s) with 4 open and MaxConnections 4", resp.Status)
		} else if !isTimeout(err) {
			t.Fatalf("a fifth connection, past the cap: %v, want it to wait", err)
		}
		// Serve says it is at its cap (once: the log is rate-limited).
		waitUntil(t, 10*time.Second, "the connection cap's warning", func() bool {
			return strings.Contains(capped.log.String(), "at the connection cap")
		})
		if n := strings.Count(capped.log.String(), "at the connection cap"); n != 1 {
			t.Fatalf("the cap's warning was logged %d times, want once:\n%s", n, capped.log)
		}
		// One of the four closes: the fifth is served.
		held[0].Close()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the fifth connection once one of the four closed: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the fifth connection once one of the four closed: %s", resp.Status)
		}
		for _, c := range held[1:] {
			c.Close()
		}
		conn.Close()
		capped.unharmed(t, e.ctx, "a full connection cap")
	})

	t.Run("IdleConnectionsGiveWay", func(t *testing.T) {
		// A client pool's kept-alive connections hold every slot between
		// its requests: a new connection then takes the longest idle
		// one's slot at once, as nginx closes idle keep-alives, instead
		// of waiting unanswered for IdleTimeout.
		capped := serveWith(t, e, func(o *s3gw.Options) { o.MaxConnections = 3 })
		held := holdIdle(t, capped, 3)
		conn, br := dialConn(t, capped.addr)
		roundTrip(t, conn, br, signed(t, http.MethodGet, capped.url+"/", nil), 10*time.Second)
		held[0].conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := held[0].br.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the longest idle connection: %v, want it closed for the new one", err)
		}
		// The others are still served on their connections.
		roundTrip(t, held[2].conn, held[2].br, signed(t, http.MethodGet, capped.url+"/", nil), 10*time.Second)
	})

	t.Run("BusyConnectionGivesWay", func(t *testing.T) {
		// At the cap with no connection idle, a new connection takes
		// the slot of the next to finish a request, closed after its
		// answer, instead of waiting for IdleTimeout (a minute here).
		b := busyAtCap(t, e)
		resp := b.finish(t)
		// Told so in its answer, its client does not send another
		// request on it (one closed under it after the answer would get
		// a reset for a request it may not resend, a PUT).
		if !resp.Close {
			t.Error("the answer on the connection giving way did not say Connection: close")
		}
		roundTrip(t, b.conn, b.br, signed(t, http.MethodGet, b.capped.url+"/", nil), 10*time.Second)
		b.busy.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := b.busyBR.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the connection that went idle: %v, want it closed for the new one", err)
		}
	})

	t.Run("WantTakenInVain", func(t *testing.T) {
		// An answer that took the want without freeing a slot (its
		// connection was already gone) does not leave the new
		// connection waiting for good: the want is armed again, and the
		// busy connection, once idle, gives way.
		b := busyAtCap(t, e)
		if !s3gw.TakeWant(b.capped.gw) {
			t.Fatal("no want to take")
		}
		b.finish(t)
		roundTrip(t, b.conn, b.br, signed(t, http.MethodGet, b.capped.url+"/", nil), 10*time.Second)
	})

	t.Run("StreamingConnectionGivesWay", func(t *testing.T) {
		// An answer under way (its headers out, its body stalled on a
		// client that does not read) when a new connection comes: it
		// cannot say Connection: close any more, so its connection is
		// closed as it goes idle, and the new one is served then.
		if err := e.cl.MakeBucket(e.ctx, "givewaybig"); err != nil {
			t.Fatal(err)
		}
		body := bytes.Repeat([]byte("g"), 8<<20) // more than the sockets' buffers hold
		if _, err := e.cl.PutObjectBytes(e.ctx, "givewaybig", "o", body, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		capped := serveWith(t, e, func(o *s3gw.Options) { o.MaxConnections, o.IdleTimeout = 1, time.Minute })
		busy, busyBR := dialConn(t, capped.addr)
		r := signed(t, http.MethodGet, capped.url+"/givewaybig/o", nil)
		if err := r.Write(busy); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(busyBR, r)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the streaming GET: %v %v", resp, err)
		}
		conn, br := dialConn(t, capped.addr)
		waitUntil(t, 10*time.Second, "new connection waiting for a slot", func() bool { return s3gw.SlotWanted(capped.gw) })
		if n, err := io.Copy(io.Discard, resp.Body); err != nil || n != int64(len(body)) {
			t.Fatalf("the streaming GET's body: %d bytes, %v", n, err)
		}
		resp.Body.Close()
		roundTrip(t, conn, br, signed(t, http.MethodGet, capped.url+"/", nil), 10*time.Second)
		busy.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := busyBR.ReadByte(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the connection that went idle: %v, want it closed for the new one", err)
		}
	})

	t.Run("ShutdownAtCap", func(t *testing.T) {
		// Serve stops while its Accept waits for a free slot.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gw, err := s3gw.New(s3gw.Options{Client: e.cl, Credentials: s3gw.StaticCredentials{testAccess: testSecret},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxConnections: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(e.ctx)
		defer stop()
		served := make(chan error, 1)
		go func() { served <- gw.Serve(ctx, ln) }()
		url := "http://" + ln.Addr().String()
		conn, br := dialConn(t, ln.Addr().String())
		roundTrip(t, conn, br, signed(t, http.MethodGet, url+"/", nil), 10*time.Second)
		stop()
		select {
		case err := <-served:
			if err != nil {
				t.Fatalf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return at its connection cap once its context ended")
		}
	})

	t.Run("BodyMemory", func(t *testing.T) {
		// One PUT whose body is on its way holds the whole budget: the
		// next waits its BodyMemoryWait and is answered SlowDown, having
		// sent nothing; once the first ends, PUTs go through again.
		const size = 1 << 20
		sv := serveWith(t, e, func(o *s3gw.Options) { o.MaxBodyMemory, o.BodyMemoryWait = size, 300*time.Millisecond })
		e.mb(t, "bodymem")
		finish := halfPut(t, sv, sv.url+"/bodymem/first", size)
		resp, answer := send(t, signed(t, http.MethodPut, sv.url+"/bodymem/second", []byte("small")), "")
		wantS3Error(t, "a PUT past the body memory", resp, answer, "SlowDown", http.StatusServiceUnavailable)
		finish()
		waitUntil(t, 10*time.Second, "the first PUT's memory given back", func() bool { return sv.gw.BodyMemory() == 0 })
		if resp, answer := send(t, signed(t, http.MethodPut, sv.url+"/bodymem/second", []byte("small")), ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("a PUT once the memory was given back: %d %s", resp.StatusCode, answer)
		}
	})

	t.Run("BodyMemoryPerUser", func(t *testing.T) {
		// One user's slow PUT holds all that user may hold (half the
		// budget here): that user's next PUT is answered SlowDown, and
		// another user's goes through (a security probe's sixteen
		// dripping 64 MiB PUTs of one user, or of one presigned URL,
		// answered every other user SlowDown for as long as they ran).
		const size = 1 << 20
		sv := serveWith(t, e, func(o *s3gw.Options) {
			o.MaxBodyMemory, o.MaxBodyMemoryPerUser, o.BodyMemoryWait = 2*size, size, 300*time.Millisecond
			o.Credentials = s3gw.StaticCredentials{testAccess: testSecret, "OTHERUSER": "other-secret"}
		})
		e.mb(t, "bodyuser")
		finish := halfPut(t, sv, sv.url+"/bodyuser/slow", size)
		resp, answer := send(t, signed(t, http.MethodPut, sv.url+"/bodyuser/same", []byte("small")), "")
		wantS3Error(t, "the same user's PUT past its share", resp, answer, "SlowDown", http.StatusServiceUnavailable)
		other := signedAs(t, "OTHERUSER", "other-secret", http.MethodPut, sv.url+"/bodyuser/other", []byte("small"))
		if resp, answer := send(t, other, ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("another user's PUT while the first holds its share: %d %s", resp.StatusCode, answer)
		}
		finish()
	})

	t.Run("FreshConnectionsGiveWay", func(t *testing.T) {
		// Connections that never finish a request's headers (slowloris)
		// hold every slot: a new client takes the slot of the one that
		// has waited longest, not ReadHeaderTimeout later (a minute).
		capped := serveWith(t, e, func(o *s3gw.Options) { o.MaxConnections, o.ClientTimeout = 3, time.Hour })
		var loris []net.Conn
		for range 3 {
			c, _ := dialConn(t, capped.addr)
			if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n")); err != nil {
				t.Fatal(err)
			}
			loris = append(loris, c)
		}
		conn, br := dialConn(t, capped.addr)
		roundTrip(t, conn, br, signed(t, http.MethodGet, capped.url+"/", nil), 20*time.Second)
		closed := 0
		for _, c := range loris {
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
				closed++
			}
		}
		if closed != 1 {
			t.Fatalf("%d of the connections without a request closed for the new one, want 1", closed)
		}
	})

	t.Run("NewConnectionsPerHost", func(t *testing.T) {
		// Once over half the slots are open, a host holding its bound of
		// connections without a whole request has its next one closed
		// at accept; those it holds are served when they finish one.
		capped := serveWith(t, e, func(o *s3gw.Options) { o.MaxConnections, o.MaxNewPerHost, o.ClientTimeout = 4, 1, time.Hour })
		first, firstBR := dialConn(t, capped.addr)
		dialConn(t, capped.addr) // a second one, silent: now 2 of 4 open
		third, _ := dialConn(t, capped.addr)
		third.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := third.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("a third connection of one host without a request, past half the slots: %v, want it closed", err)
		}
		roundTrip(t, first, firstBR, signed(t, http.MethodGet, capped.url+"/", nil), 20*time.Second)
	})

	t.Run("IdleTimeout", func(t *testing.T) {
		idle := serveWith(t, e, func(o *s3gw.Options) { o.MaxConnections, o.IdleTimeout = 2, time.Second })
		held := holdIdle(t, idle, 2)
		// Past the cap, a request is served once an idle connection is
		// closed after IdleTimeout; the test closes none.
		conn, br := dialConn(t, idle.addr)
		roundTrip(t, conn, br, signed(t, http.MethodGet, idle.url+"/", nil), 20*time.Second)
		for i, h := range held {
			h.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err := h.br.ReadByte()
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("idle connection %d: %v, want it closed by the gateway", i, err)
			}
		}
	})
}

// atCap is a gateway capped at one connection, held by busy, which has
// sent a PUT's headers and half its body (a connection whose headers are
// not all in would give way), and conn, a new connection waiting for a
// slot.
type atCap struct {
	capped     *served
	busy, conn net.Conn
	busyBR, br *bufio.Reader
	req        *http.Request
	rest       []byte // of busy's request
}

func busyAtCap(t *testing.T, e *env) *atCap {
	t.Helper()
	b := &atCap{capped: serveWith(t, e, func(o *s3gw.Options) { o.MaxConnections, o.IdleTimeout = 1, time.Minute })}
	if _, err := e.s3.CreateBucket(e.ctx, &s3.CreateBucketInput{Bucket: aws.String("atcap")}); err != nil {
		var owned *types.BucketAlreadyOwnedByYou
		if !errors.As(err, &owned) {
			t.Fatal(err)
		}
	}
	b.busy, b.busyBR = dialConn(t, b.capped.addr)
	var req bytes.Buffer
	body := bytes.Repeat([]byte("b"), 64)
	b.req = signed(t, http.MethodPut, b.capped.url+"/atcap/busy", body)
	if err := b.req.Write(&req); err != nil {
		t.Fatal(err)
	}
	// Half a request's body: the connection is busy, not idle.
	if _, err := b.busy.Write(req.Next(req.Len() - len(body)/2)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the busy PUT reading its body", func() bool { return b.capped.gw.BodyMemory() > 0 })
	b.rest = req.Bytes()
	b.conn, b.br = dialConn(t, b.capped.addr)
	waitUntil(t, 10*time.Second, "new connection waiting for a slot", func() bool { return s3gw.SlotWanted(b.capped.gw) })
	return b
}

// finish sends the rest of busy's request and reads its answer.
func (b *atCap) finish(t *testing.T) *http.Response {
	t.Helper()
	go b.busy.Write(b.rest)
	resp, err := http.ReadResponse(b.busyBR, b.req)
	if err != nil {
		t.Fatalf("the busy connection's request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// heldConn is a connection a test keeps, with its reader.
type heldConn struct {
	conn net.Conn
	br   *bufio.Reader
}

// holdIdle opens n connections to srv and makes a request on each: they
// are then idle, kept alive, in that order. The server marks a
// connection idle after the client has its answer, on the connection's
// goroutine: each is waited for, so that the next is not marked first.
func holdIdle(t *testing.T, srv *served, n int) []heldConn {
	t.Helper()
	var held []heldConn
	for i := range n {
		conn, br := dialConn(t, srv.addr)
		roundTrip(t, conn, br, signed(t, http.MethodGet, srv.url+"/", nil), 10*time.Second)
		held = append(held, heldConn{conn, br})
		waitUntil(t, 10*time.Second, fmt.Sprintf("record of connection %d going idle", i), func() bool { return s3gw.IdleConnections(srv.gw) == i+1 })
	}
	return held
}

// dialConn is a connection to addr, closed at the test's end, with a
// reader of it.
func dialConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, bufio.NewReader(conn)
}

// roundTrip sends req on conn and wants a 200 within d, its body read:
// the connection is then idle, kept alive.
func roundTrip(t *testing.T, conn net.Conn, br *bufio.Reader, req *http.Request, d time.Duration) {
	t.Helper()
	conn.SetDeadline(time.Now().Add(d))
	defer conn.SetDeadline(time.Time{})
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("%s %s: %s %s (%v, close %v)", req.Method, req.URL, resp.Status, body, err, resp.Close)
	}
}

// wantAnsweredAndClosed wants conn answered status and then closed, each
// within 10 s, with the client's request still unfinished; clean: closed
// by a half-close (EOF), not a reset.
func wantAnsweredAndClosed(t *testing.T, conn net.Conn, status int, what string, clean bool) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: no answer (%v): net/http still reads it", what, err)
	}
	// The answer has no length: its body ends with the connection.
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("%s: %s %s, want %d", what, resp.Status, body, status)
	}
	if err == nil {
		_, err = io.Copy(io.Discard, br)
	}
	switch {
	case isTimeout(err):
		t.Fatalf("%s: answered %d, but the connection stays open", what, status)
	case clean && err != nil:
		t.Fatalf("%s: answered %d, then %v, not an EOF: the gateway did not half-close the connection", what, status, err)
	}
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// waitUntil polls cond until it holds, failing the test after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClientGoneIsNotAServerError: a request whose client went away
// before its answer (its context cancelled) is no 500 and no error
// document: it is recorded as nginx's 499, client closed request.
func TestClientGoneIsNotAServerError(t *testing.T) {
	e := newEnv(t)
	signedReq := signed(t, http.MethodGet, "http://"+e.srvAddr+"/gone/k", nil)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	r := signedReq.Clone(ctx)
	r.RequestURI = r.URL.RequestURI()
	w := httptest.NewRecorder()
	e.gw.ServeHTTP(w, r)
	if w.Code != 499 || w.Body.Len() != 0 {
		t.Fatalf("a request whose client is gone: %d, %q; want 499 and no body", w.Code, w.Body.String())
	}
}

// halfPut starts a PUT of size bytes to url and sends all but half of its
// body, then waits until the gateway holds the body's memory; finish
// sends the rest and checks the PUT's answer.
func halfPut(t *testing.T, sv *served, url string, size int) (finish func()) {
	t.Helper()
	req := signed(t, http.MethodPut, url, bytes.Repeat([]byte("m"), size))
	var raw bytes.Buffer
	if err := req.Write(&raw); err != nil {
		t.Fatal(err)
	}
	held := sv.gw.BodyMemory()
	conn, br := dialConn(t, sv.addr)
	if _, err := conn.Write(raw.Next(raw.Len() - size/2)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the PUT holding its body's memory", func() bool { return sv.gw.BodyMemory() >= held+int64(size) })
	return func() {
		t.Helper()
		go conn.Write(raw.Bytes())
		resp, err := http.ReadResponse(br, req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("the PUT: %v %v", resp, err)
		}
		resp.Body.Close()
	}
}
