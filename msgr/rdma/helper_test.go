//go:build rdma

package rdma_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/freeport"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/msgr/transports"
)

// The peer-kill test runs its server in a child process: this test binary
// again, with helperEnv set, running only TestRDMAHelperProcess.
const (
	helperEnv     = "OSPREY_RDMA_TEST_HELPER"
	helperPortEnv = "OSPREY_RDMA_TEST_HELPER_PORT"
	helperSendEnv = "OSPREY_RDMA_TEST_HELPER_SEND" // "id,count,size": count < 0 sends until killed
	helperProvEnv = "OSPREY_RDMA_TEST_HELPER_PROVIDER"
)

// TestRDMAHelperProcess is not a test: it is the server "osd.0" of
// TestRDMAPeerKilledMidTransfer in a process of its own. It listens on
// rdma+tcp://127.0.0.1:PORT, prints "ADDR addr", then "COUNT n" whenever
// the number of messages it received changes and "ERR e" for a check
// failure; once a session is accepted it sends to the peer as
// helperSendEnv says. On stdin's end it shuts down and prints
// "FINAL n err".
func TestRDMAHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "1":
	case "churn":
		churn(t)
		return
	case "closerace":
		closeRace(t)
		return
	case "connlimit":
		connLimit(t)
		return
	default:
		t.Skip("the child process of TestRDMAPeerKilledMidTransfer, TestRDMASocketsAcceptChurn, TestRDMACloseRace and TestRDMAConnectionLimit")
	}
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
		outMu.Unlock()
	}
	var count atomic.Int64
	rec := msgrtest.NewRecorder(t)
	rec.OnMsg = func(*msgr.Message) bool { count.Add(1); return false }
	ts, err := transports.Default() // killed, never closed
	if err != nil {
		say("ERR %v", err)
		os.Exit(2)
	}
	m, err := msgr.New(msgr.Options{
		Name: "osd.0", Dispatcher: rec, RecvWindowMsgs: 32, Transports: ts,
		// Its link faults go to stderr, which the test prints if it fails.
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Reconnect: msgr.Backoff{Min: time.Millisecond, Max: 50 * time.Millisecond},
	})
	if err != nil {
		say("ERR %v", err)
		os.Exit(2)
	}
	addr, err := m.Listen(context.Background(), "rdma+tcp://127.0.0.1:"+os.Getenv(helperPortEnv))
	if err != nil {
		say("ERR %v", err)
		os.Exit(2)
	}
	say("ADDR %s", addr)

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // report progress
		defer wg.Done()
		last, lastErr := int64(-1), ""
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if n := count.Load(); n != last {
				last = n
				say("COUNT %d", n)
			}
			if err := rec.Err(); err != nil && err.Error() != lastErr {
				lastErr = err.Error()
				say("ERR %v", err)
			}
		}
	}()
	go func() { // send to the peer once its session is up
		defer wg.Done()
		spec := strings.Split(os.Getenv(helperSendEnv), ",")
		if len(spec) != 3 {
			return
		}
		id, _ := strconv.Atoi(spec[0])
		total, _ := strconv.Atoi(spec[1])
		size, _ := strconv.Atoi(spec[2])
		var c *msgr.Conn
		for c == nil {
			for x := range m.Conns() {
				c = x
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond): // polling for the accepted session
			}
		}
		data := fill(size, uint64(id))
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-done; cancel() }()
		for i := 0; total < 0 || i < total; i++ {
			if err := c.Send(ctx, msgr.NewMessage(1, msgrtest.Payload(uint32(id), uint64(i), data), data)); err != nil {
				return
			}
		}
	}()

	io.Copy(io.Discard, os.Stdin) // until the parent closes it (or dies)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	serr := m.Shutdown(ctx)
	close(done)
	wg.Wait()
	errText := "nil"
	if err := rec.Err(); err != nil {
		errText = err.Error()
	} else if serr != nil {
		errText = serr.Error()
	}
	say("FINAL %d %s", count.Load(), errText)
	os.Exit(0)
}

// helper is a running child server.
type helper struct {
	t       testing.TB
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	addr    chan string
	final   chan string
	count   atomic.Int64
	mu      sync.Mutex
	errs    []string
	stderr  strings.Builder
	exited  chan struct{} // closed once the child has been waited for
	exitErr error         // cmd.Wait's result, set before exited closes
}

func startHelper(t testing.TB, port int, send string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRDMAHelperProcess$", "-test.count=1", "-test.timeout=90s")
	cmd.Env = append(os.Environ(), helperEnv+"=1", fmt.Sprintf("%s=%d", helperPortEnv, port), helperSendEnv+"="+send)
	h := &helper{t: t, cmd: cmd, addr: make(chan string, 1), final: make(chan string, 1), exited: make(chan struct{})}
	h.count.Store(-1)
	var err error
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &lockedWriter{w: &h.stderr, mu: &h.mu}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			switch kind {
			case "ADDR":
				h.addr <- rest
			case "COUNT":
				n, _ := strconv.ParseInt(rest, 10, 64)
				h.count.Store(n)
			case "ERR":
				h.mu.Lock()
				h.errs = append(h.errs, rest)
				h.mu.Unlock()
			case "FINAL":
				h.final <- rest
			}
		}
	}()
	go func() {
		<-scanned // Wait closes the pipe: read it all first
		h.exitErr = cmd.Wait()
		close(h.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-h.exited:
		default:
			cmd.Process.Kill()
			<-h.exited
		}
		if t.Failed() {
			t.Logf("helper %s's stderr:\n%s", send, h.stderrText())
		}
	})
	return h
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func (h *helper) waitAddr() string {
	h.t.Helper()
	select {
	case a := <-h.addr:
		return a
	case <-h.exited:
		h.t.Fatalf("helper exited before listening: %v; stderr:\n%s", h.exitErr, h.stderrText())
	case <-time.After(30 * time.Second):
		h.t.Fatalf("helper did not listen within 30s; stderr:\n%s", h.stderrText())
	}
	return ""
}

func (h *helper) stderrText() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stderr.String()
}

func (h *helper) checkErrs() {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.errs) > 0 {
		h.t.Fatalf("helper reported: %v", h.errs)
	}
}

// kill ends the child with SIGKILL: no CLOSE, no shutdown, no flush.
func (h *helper) kill() {
	h.t.Helper()
	if err := h.cmd.Process.Kill(); err != nil {
		h.t.Fatal(err)
	}
	select {
	case <-h.exited:
	case <-time.After(10 * time.Second):
		h.t.Fatal("killed helper did not exit")
	}
}

// stop closes the child's stdin so it shuts down, and returns its FINAL
// line.
func (h *helper) stop() string {
	h.t.Helper()
	h.stdin.Close()
	var final string
	select {
	case final = <-h.final:
	case <-time.After(30 * time.Second):
		h.t.Fatalf("helper did not finish; stderr:\n%s", h.stderrText())
	}
	select {
	case <-h.exited:
		if h.exitErr != nil {
			h.t.Fatalf("helper exited with %v; stderr:\n%s", h.exitErr, h.stderrText())
		}
	case <-time.After(10 * time.Second):
		h.t.Fatal("helper did not exit")
	}
	return final
}

// freePort is a loopback port nobody listens on now, below the ephemeral
// range (freeport.Port): a child process binds it later, while other
// tests connect out.
func freePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.Port("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// runHelper runs the helper's mode over provider in a child process, so
// that a crash there is a test failure with the child's output, not the
// end of this test binary; the child must print want.
func runHelper(t *testing.T, mode, provider, want string) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in the helper process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRDMAHelperProcess$", "-test.count=1", "-test.timeout=120s")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperProvEnv+"="+provider)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("child over rdma+%s: %v\n%s", provider, err, out)
	}
}
