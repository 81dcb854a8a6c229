package wire

import (
	"cmp"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/guard"
)

// Inbound is a messenger's account of the connections its listeners
// accepted, over all its listeners and transports: it bounds how many are
// open at once, and how many of them one source host may hold before they
// authenticate, counts refusals and accept errors, and logs them
// rate-limited, so a peer that floods us cannot flood the log. A transport
// calls Admit on every connection it accepts, before spending anything on
// it, and the InboundConn's Done when that connection closes; the
// messenger calls Authenticated once the peer has passed the handshake's
// authentication step. A nil *Inbound admits everything and logs nothing.
type Inbound struct {
	max     int64
	perHost int
	who     string // the log's prefix: InboundLimits.Who
	earlyIs string // what the early connections lack: InboundLimits.Early
	log     *slog.Logger
	rl      guard.RateLog
	open    atomic.Int64
	early   atomic.Int64 // connections not yet authenticated
	refused atomic.Uint64
	byHost  atomic.Uint64 // refusals over perHost, also in refused
	errors  atomic.Uint64
	banners atomic.Uint64

	mu    sync.Mutex
	hosts map[string]int // connections not yet authenticated, by source host
}

// InboundLimits are an Inbound's bounds; zero or negative means none.
type InboundLimits struct {
	// MaxConns bounds the accepted connections open at once.
	MaxConns int
	// MaxEarlyPerHost bounds the accepted connections from one source
	// address that have not yet authenticated (banner and handshake),
	// once more than half of MaxConns are open, so that one host cannot
	// hold every MaxConns slot with connections that never say who they
	// are. Connections whose source address is not an IP (a fabric
	// address we cannot read) are not bounded per host.
	MaxEarlyPerHost int
	// Who prefixes the log lines of refusals, and Early says what an
	// early connection lacks in them: "msgr" and "not yet authenticated"
	// by default (the S3 gateway's lack a whole request).
	Who, Early string
}

// NewInbound applies lim and logs to log.
func NewInbound(lim InboundLimits, log *slog.Logger) *Inbound {
	return &Inbound{max: int64(lim.MaxConns), perHost: lim.MaxEarlyPerHost, who: cmp.Or(lim.Who, "msgr"), earlyIs: cmp.Or(lim.Early, "not yet authenticated"), log: log, hosts: map[string]int{}}
}

// InboundStats is a snapshot of an Inbound.
type InboundStats struct {
	Open int64 // accepted connections not yet closed, handshaking or not
	// Early counts the open connections whose peer has not yet
	// authenticated (in their banner or handshake).
	Early        int64
	Refused      uint64 // connections closed at accept, over either limit
	AcceptErrors uint64 // failed accept calls (EMFILE, ENFILE, …), each retried
	// RefusedPerHost counts the refusals (in Refused too) of connections
	// whose host already held MaxEarlyPerHost connections not yet
	// authenticated.
	RefusedPerHost uint64
	// BannerFailures counts accepted connections that never completed
	// the banner exchange (garbage, a wrong version, silence), which the
	// messenger never sees as links.
	BannerFailures uint64
}

// Stats returns the counters.
func (in *Inbound) Stats() InboundStats {
	if in == nil {
		return InboundStats{}
	}
	return InboundStats{Open: in.open.Load(), Early: in.early.Load(), Refused: in.refused.Load(),
		RefusedPerHost: in.byHost.Load(), AcceptErrors: in.errors.Load(), BannerFailures: in.banners.Load()}
}

// InboundConn is one admitted connection's share of its Inbound. Its
// methods are safe on nil (a nil Inbound's connections).
type InboundConn struct {
	in    *Inbound
	host  string      // the source host counted in in.hosts; "" if none
	early bool        // still counted as not authenticated; in.mu
	done  atomic.Bool // Done ran
}

// Admit counts a connection just accepted on listener from remote
// (host:port). Over a limit it counts and logs (rate-limited) a refusal and
// returns false: the caller closes the connection at once. On true the
// caller must call the InboundConn's Done exactly once when the connection
// closes.
func (in *Inbound) Admit(listener, remote string) (*InboundConn, bool) {
	if in == nil {
		return nil, true
	}
	n := in.open.Add(1)
	if in.max > 0 && n > in.max {
		in.refuse("refused "+listener, in.who+": connection refused: connection limit reached",
			"listener", listener, "remote", remote, "max_conns", in.max)
		return nil, false
	}
	c := &InboundConn{in: in, early: true}
	if host, _, err := net.SplitHostPort(remote); err == nil && host != "" && in.perHost > 0 {
		in.mu.Lock()
		early := in.hosts[host]
		if early >= in.perHost && in.scarce(n) {
			in.mu.Unlock()
			in.byHost.Add(1)
			in.refuse("refused per host "+listener, in.who+": connection refused: too many connections from one host "+in.earlyIs,
				"listener", listener, "remote", remote, "max_per_host", in.perHost)
			return nil, false
		}
		in.hosts[host] = early + 1
		c.host = host
		in.mu.Unlock()
	}
	in.early.Add(1)
	return c, true
}

// refuse takes back Admit's count of a connection it refuses, counts the
// refusal and logs it (rate-limited per key) with attrs and the total.
func (in *Inbound) refuse(key, msg string, attrs ...any) {
	in.open.Add(-1)
	total := in.refused.Add(1)
	in.rl.Log(in.log, slog.LevelWarn, key, msg, append(attrs, "refused_total", total)...)
}

// scarce reports whether, with open connections open, slots are scarce
// enough for the bound per host to apply: past half of max, or always
// without max. Below that a host's burst of connections (many clients
// behind one address starting at once) costs no one a slot.
func (in *Inbound) scarce(open int64) bool {
	return in.max <= 0 || open > in.max/2
}

// BannerFailed counts a connection whose banner exchange failed; the
// caller still calls Done.
func (c *InboundConn) BannerFailed() {
	if c != nil {
		c.in.banners.Add(1)
	}
}

// Authenticated records that the peer passed the handshake's
// authentication step: from now on the connection no longer counts
// against its host's bound on connections not yet authenticated.
func (c *InboundConn) Authenticated() {
	if c == nil {
		return
	}
	in := c.in
	in.mu.Lock()
	defer in.mu.Unlock()
	if !c.early {
		return
	}
	c.early = false
	in.early.Add(-1)
	if c.host != "" {
		if in.hosts[c.host]--; in.hosts[c.host] <= 0 {
			delete(in.hosts, c.host)
		}
	}
}

// Done ends what Admit counted; a second call does nothing.
func (c *InboundConn) Done() {
	if c == nil || c.done.Swap(true) {
		return
	}
	c.Authenticated() // no longer early either way
	c.in.open.Add(-1)
}

// AcceptRetry keeps one accept loop alive through temporary errors
// (EMFILE, ENFILE, ECONNABORTED…): it backs off from 5 ms doubling to 1 s,
// as net/http's Server, and logs failures and recoveries rate-limited (at
// most one line of each per listener per guard.DefaultEvery). Only the loop's goroutine uses it.
type AcceptRetry struct {
	In       *Inbound // may be nil: nothing logged or counted
	Listener string   // the listening address, for the log

	bo       guard.Backoff
	failures int
	since    time.Time
}

// Failed records a failed accept and waits out the backoff. It returns
// false if done closed meanwhile: the loop ends.
func (a *AcceptRetry) Failed(err error, done <-chan struct{}) bool {
	d := a.bo.Next()
	if a.failures == 0 {
		a.since = time.Now()
	}
	a.failures++
	if in := a.In; in != nil {
		in.errors.Add(1)
		in.rl.Log(in.log, slog.LevelWarn, "accept "+a.Listener, "msgr: accept failed; retrying with backoff",
			"listener", a.Listener, "err", err, "retry_in", d, "failures", a.failures)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// OK records a successful accept, ending a streak of failures. The
// recovery is logged rate-limited too, and the next streak's first failure
// does not skip the limit: a peer that can make descriptors run out again
// and again (opening and closing connections) must not be able to make us
// log two lines a streak.
func (a *AcceptRetry) OK() {
	if a.failures == 0 {
		return
	}
	if in := a.In; in != nil {
		in.rl.Log(in.log, slog.LevelInfo, "accepting "+a.Listener, "msgr: accepting again",
			"listener", a.Listener, "failures", a.failures, "after", time.Since(a.since).Round(time.Millisecond))
	}
	a.failures = 0
	a.bo.Reset()
}
