package msgr

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// ---- Scripted simulation ----

var rewriteCreditScripts = flag.Bool("credit.rewrite", false, "rewrite the expected output of testdata/credit/*.txt")

// TestCreditScripts runs testdata/credit/*.txt, transcripts of the same two
// simulated nodes driven step by step, in the style of etcd-raft's
// interaction tests. Each case is a command, a "----" line and the expected
// output, ending at a blank line. Commands:
//
//	init msgs=N bytes=N [ctl=1] two nodes a (dialer) and b, handshake done
//	                           (ctl=1: the links agree CONTROL_SLOTS)
//	send a SIZE...             queue messages at a
//	write a                    a's writer runs (if kicked) until collect is empty
//	deliver b [N]              deliver N (default all) frames in flight to b
//	consume b [N]              b's dispatcher releases N (default all) messages
//	timer a                    a's ack timer fires (if armed)
//	tick a [keepalive]         a's Conn.tick
//	idle a                     a's Conn.tick after IdleTimeout of silence
//	close a                    a closes the session (CLOSE goes next)
//	inject b TAG seq=N size=N  a frame to b that bypasses a's credit check
//	fault                      the link fails
//	handshake [a=N] [b=N]      a new link, with a's and b's windows (default msgs)
//	state                      both nodes
//
// go test -run TestCreditScripts -credit.rewrite ./msgr rewrites the outputs.
func TestCreditScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "credit", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scripts in testdata/credit")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			runCreditScript(t, file)
		})
	}
}

type scriptCase struct {
	line     int
	cmd      string
	expected string
}

func parseScript(t *testing.T, file string) []scriptCase {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var cases []scriptCase
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		c := scriptCase{line: i + 1, cmd: l}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "----" {
			t.Fatalf("%s:%d: %q not followed by ----", file, i+1, l)
		}
		i += 2
		var out []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			out = append(out, lines[i])
		}
		c.expected = strings.Join(out, "\n")
		cases = append(cases, c)
	}
	return cases
}

func runCreditScript(t *testing.T, file string) {
	cases := parseScript(t, file)
	var s *simulation
	var rewritten strings.Builder
	for _, c := range cases {
		var out []string
		printf := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
		fields := strings.Fields(c.cmd)
		node := func(i int) *simNode {
			if s == nil {
				t.Fatalf("%s:%d: init first", file, c.line)
			}
			if len(fields) <= i {
				t.Fatalf("%s:%d: missing node", file, c.line)
			}
			switch fields[i] {
			case "a":
				return s.a
			case "b":
				return s.b
			}
			t.Fatalf("%s:%d: no node %q", file, c.line, fields[i])
			return nil
		}
		count := func(i, all int) int {
			if len(fields) <= i {
				return all
			}
			n, err := strconv.Atoi(fields[i])
			if err != nil {
				t.Fatalf("%s:%d: %v", file, c.line, err)
			}
			return min(n, all)
		}
		kv := func(from int) map[string]uint64 {
			m := map[string]uint64{}
			for _, f := range fields[from:] {
				k, v, ok := strings.Cut(f, "=")
				if !ok {
					t.Fatalf("%s:%d: want key=value, got %q", file, c.line, f)
				}
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatalf("%s:%d: %v", file, c.line, err)
				}
				m[k] = n
			}
			return m
		}
		if s != nil {
			s.failf = func(msg string) { printf("error: %s", msg) }
		}
		switch fields[0] {
		case "init":
			args := kv(1)
			cfg := simConfig{windowMsgs: args["msgs"], windowBytes: args["bytes"], queueMsgs: 1 << 20, ctl: args["ctl"] != 0}
			s = newSimulation(t, cfg)
			s.failf = func(msg string) { printf("error: %s", msg) }
			printf("%s", s.trace[len(s.trace)-1][7:])
		case "send":
			n := node(1)
			for _, f := range fields[2:] {
				size, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("%s:%d: %v", file, c.line, err)
				}
				n.sizes = append(n.sizes, size)
				n.sendNext()
			}
			printf("%s queued %d", n.name, n.e.sess.queued())
		case "write":
			n := node(1)
			if !n.wake && !n.running {
				printf("%s: writer not woken", n.name)
				break
			}
			n.wake, n.running = false, true
			for {
				fr := s.collect(n)
				if len(fr) == 0 {
					n.running = false
					break
				}
				for _, f := range fr {
					printf("%s -> %s", n.name, fmtSimFrame(f))
				}
			}
			if len(out) == 0 {
				printf("%s -> nothing%s", n.name, ifStr(n.timer, " (ack timer armed)"))
			}
		case "deliver":
			n := node(1)
			for range count(2, len(n.in)) {
				f := n.in[0]
				n.in = n.in[1:]
				printf("%s <- %s", n.name, fmtSimFrame(f))
				s.handle(n, f)
				if n.closed {
					n.closed = false
					printf("%s: session closed by peer", n.name)
				}
			}
			if len(out) == 0 {
				printf("nothing in flight to %s", n.name)
			}
		case "consume":
			n := node(1)
			for range count(2, len(n.dq)) {
				size := n.consume()
				printf("%s released %d bytes; grant %s", n.name, size, grantState(&n.e.cw))
			}
			if len(out) == 0 {
				printf("%s holds nothing", n.name)
			}
		case "timer":
			n := node(1)
			if !n.timer {
				printf("%s: ack timer not armed", n.name)
				break
			}
			n.fireTimer()
			printf("%s: ack timer fired", n.name)
		case "tick":
			n := node(1)
			n.tick(len(fields) > 2 && fields[2] == "keepalive")
			printf("%s: tick", n.name)
		case "idle":
			n := node(1)
			fx, dead := n.e.onTick(2*time.Minute, time.Minute, false, false)
			n.apply(fx)
			printf("%s: %s", n.name, map[bool]string{true: "link dead (idle timeout)", false: "link kept"}[dead])
		case "close":
			n := node(1)
			n.apply(n.e.closeLink(0))
			printf("%s: closing", n.name)
		case "inject":
			n := node(1)
			args := kv(3)
			tag := map[string]wire.Tag{"MESSAGE": wire.TagMessage, "ACK": wire.TagAck, "KEEPALIVE": wire.TagKeepalive,
				"KEEPALIVE_ACK": wire.TagKeepaliveAck, "CLOSE": wire.TagClose}[fields[2]]
			f := wire.Frame{Preamble: wire.Preamble{Tag: tag, Seq: args["seq"], Ack: args["ack"]}, Front: simPayload[:args["size"]]}
			printf("%s <- %s (injected)", n.name, fmtSimFrame(f))
			s.handle(n, f)
		case "fault":
			s.fault()
			printf("link down; in flight dropped")
		case "handshake":
			w := map[string]uint64{"a": s.cfg.windowMsgs, "b": s.cfg.windowMsgs}
			maps.Copy(w, kv(1))
			s.handshake(false, w["a"], w["b"])
			printf("%s", s.trace[len(s.trace)-1][7:])
		case "state":
			for _, n := range []*simNode{s.a, s.b} {
				e := &n.e
				printf("%s: %v", n.name, &e.cw)
				printf("   queued %d (sent on this link %d), in flight to it %d, held %d, inSeq %d%s%s%s", e.sess.queued(), e.sess.sent,
					len(n.in), len(n.dq), e.sess.inSeq, ifStr(e.sess.ackOwed(), ", ack owed"),
					ifStr(e.cw.grantUrgent(), ", grant urgent"), ifStr(e.cw.grantIdle(), ", grant idle"))
			}
		default:
			t.Fatalf("%s:%d: unknown command %q", file, c.line, fields[0])
		}
		got := strings.Join(out, "\n")
		if *rewriteCreditScripts {
			fmt.Fprintf(&rewritten, "%s\n----\n%s\n\n", c.cmd, got)
			continue
		}
		if got != c.expected {
			t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", file, c.line, c.cmd, got, c.expected)
		}
	}
	if *rewriteCreditScripts {
		// Comments are kept only at the top of the file.
		b, _ := os.ReadFile(file)
		var head strings.Builder
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(l, "#") {
				break
			}
			head.WriteString(l + "\n")
		}
		if head.Len() > 0 {
			head.WriteString("\n")
		}
		if err := os.WriteFile(file, []byte(head.String()+rewritten.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func fmtSimFrame(f wire.Frame) string {
	s := fmt.Sprintf("%v", f.Tag)
	if f.Tag == wire.TagMessage || f.Tag == wire.TagKeepalive || f.Tag == wire.TagKeepaliveAck {
		s += fmt.Sprintf(" seq=%d", f.Seq)
	}
	if f.Tag == wire.TagMessage {
		s += fmt.Sprintf(" size=%d", len(f.Front)+len(f.Data))
	}
	return s + fmt.Sprintf(" ack=%d grant=%d/%d", f.Ack, f.GrantMsgs, f.GrantBytes)
}

func grantState(w *creditWindow) string {
	m, b := w.grant()
	am, ab := advertised(w)
	s := fmt.Sprintf("%d/%d (advertised %d/%d)", m, b, am, ab)
	switch {
	case w.grantUrgent():
		s += ", urgent"
	case w.grantIdle():
		s += ", idle"
	}
	return s
}

func ifStr(c bool, s string) string {
	if c {
		return s
	}
	return ""
}
