package msgr_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
)

// echo answers every message with a copy of its front.
var echo = msgr.DispatchFunc(func(m *msgr.Message) {
	reply := msgr.NewMessage(m.Type, append([]byte(nil), m.Front...), nil)
	c := m.Conn()
	m.Release()
	if c.TrySend(reply) != nil {
		reply.Release()
	}
})

// roundTrip connects a new messenger to the echo server at addr, sends
// text and waits for it to come back; describe says what to show if not.
func roundTrip(t *testing.T, addr, text string, describe func() string) {
	t.Helper()
	got := make(chan string, 1)
	cli := tcpEnv.NewMessenger(t, "osd.1", msgr.DispatchFunc(func(m *msgr.Message) {
		select {
		case got <- string(m.Front):
		default:
		}
		m.Release()
	}), nil)
	c, err := cli.Connect(context.Background(), addr, "osd.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(context.Background(), msgr.NewMessage(1, []byte(text), nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != text {
			t.Fatalf("echo %q, want %q", s, text)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no echo of %q: %s", text, describe())
	}
}

// TestEMFILEChild is not a test: it is the body of the child process of
// TestAcceptSurvivesEMFILE (this test binary, re-executed with
// MSGR_TEST_EMFILE set). It listens, prints its address, lowers
// RLIMIT_NOFILE to a few descriptors above what it holds, and serves an
// echo until killed. Its log goes to stderr.
func TestEMFILEChild(t *testing.T) {
	if os.Getenv("MSGR_TEST_EMFILE") == "" {
		t.Skip("helper process for TestAcceptSurvivesEMFILE")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	m, err := msgr.New(msgr.Options{Name: "osd.0", Dispatcher: echo, Logger: log, Transports: msgr.TCPOnly})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	addr, err := m.Listen(context.Background(), "tcp://127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// Room for a few accepted connections, no more.
	lim := syscall.Rlimit{Cur: uint64(len(fds) + 4), Max: uint64(len(fds) + 4)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("ADDR %s\n", addr)
	select {}
}

// TestAcceptSurvivesEMFILE: a listener whose process runs out of file
// descriptors backs off, logs it, and accepts again once descriptors are
// free, instead of never accepting again.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEMFILEChild$")
	cmd.Env = append(os.Environ(), "MSGR_TEST_EMFILE=1")
	logs := &syncBuffer{}
	cmd.Stderr = logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("child log:\n%s", logs.String())
		}
	})
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
				addrCh <- a
			}
		}
	}()
	var addr string
	select {
	case addr = <-addrCh:
	case <-time.After(30 * time.Second):
		t.Fatalf("child did not start; log:\n%s", logs.String())
	}
	a, err := msgr.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}

	// Connect until the child's accept fails for want of descriptors.
	// The kernel completes connections into the backlog whether or not
	// they are accepted, so the dials succeed; the child's log tells.
	var extra []net.Conn
	defer func() {
		for _, c := range extra {
			c.Close()
		}
	}()
	msgrtest.EventuallyDescribed(t, 20*time.Second, func() string {
		return fmt.Sprintf("EMFILE in the child after %d connections; log:\n%s", len(extra), logs.String())
	}, func() bool {
		if strings.Contains(logs.String(), "too many open files") {
			return true
		}
		if len(extra) < 64 {
			c, err := net.Dial("tcp", a.Host)
			if err != nil {
				t.Fatal(err)
			}
			extra = append(extra, c)
		}
		return false
	})
	if !strings.Contains(logs.String(), "msgr: accept failed; retrying with backoff") {
		t.Fatalf("accept failure not logged as such:\n%s", logs.String())
	}
	for _, c := range extra {
		c.Close()
	}
	extra = nil

	// The same listener accepts a session, and a message goes both ways.
	roundTrip(t, addr, "after EMFILE", func() string { return "child log:\n" + logs.String() })
	msgrtest.Eventually(t, 10*time.Second, "the recovery logged", func() bool {
		return strings.Contains(logs.String(), "msgr: accepting again")
	})
	if n := strings.Count(logs.String(), "msgr: accept failed"); n > 3 {
		t.Errorf("%d accept-failure lines in one streak, want it rate-limited:\n%s", n, logs.String())
	}
}
