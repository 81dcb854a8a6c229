package wire

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/internal/guard"
)

// Inbound is a messenger's account of the connections its listeners
// accepted, over all its listeners and transports: it bounds how many are
// open at once, counts refusals and accept errors, and logs them
// rate-limited, so a peer that floods us cannot flood the log. A transport
// calls Admit on every connection it accepts, before spending anything on
// it, and Done when that connection closes. A nil *Inbound admits
// everything and logs nothing.
type Inbound struct {
	max     int64
	log     *slog.Logger
	rl      guard.RateLog
	open    atomic.Int64
	refused atomic.Uint64
	errors  atomic.Uint64
	banners atomic.Uint64
}

// NewInbound allows maxConns open accepted connections (no bound if <= 0)
// and logs to log.
func NewInbound(maxConns int, log *slog.Logger) *Inbound {
	return &Inbound{max: int64(maxConns), log: log}
}

// InboundStats is a snapshot of an Inbound.
type InboundStats struct {
	Open         int64  // accepted connections not yet closed, handshaking or not
	Refused      uint64 // connections closed at accept, over the limit
	AcceptErrors uint64 // failed accept calls (EMFILE, ENFILE, …), each retried
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
	return InboundStats{Open: in.open.Load(), Refused: in.refused.Load(), AcceptErrors: in.errors.Load(), BannerFailures: in.banners.Load()}
}

// BannerFailed counts an admitted connection whose banner exchange
// failed; the caller still calls Done.
func (in *Inbound) BannerFailed() {
	if in != nil {
		in.banners.Add(1)
	}
}

// Admit counts a connection just accepted on listener from remote. Over the
// limit it counts and logs (rate-limited) a refusal and returns false: the
// caller closes the connection at once. On true the caller must call Done
// exactly once when the connection closes.
func (in *Inbound) Admit(listener, remote string) bool {
	if in == nil {
		return true
	}
	if n := in.open.Add(1); in.max > 0 && n > in.max {
		in.open.Add(-1)
		total := in.refused.Add(1)
		in.rl.Log(in.log, slog.LevelWarn, "refused "+listener, "msgr: connection refused: connection limit reached",
			"listener", listener, "remote", remote, "max_conns", in.max, "refused_total", total)
		return false
	}
	return true
}

// Done ends what Admit counted.
func (in *Inbound) Done() {
	if in != nil {
		in.open.Add(-1)
	}
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
