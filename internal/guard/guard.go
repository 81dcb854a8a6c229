// Package guard keeps a daemon alive under pressure: the backoff of an
// accept loop that hits a temporary error (EMFILE, ENFILE, ECONNABORTED…)
// and rate-limited logging of lines a peer or a failing disk can make us
// repeat (refused connections, failed handshakes, Pebble's background
// errors on a full disk).
package guard

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Accept backoff bounds, as net/http's Server.
const (
	BackoffMin = 5 * time.Millisecond
	BackoffMax = time.Second
)

// Backoff is the delay after consecutive failures: BackoffMin, doubling
// up to BackoffMax, back to BackoffMin after Reset. The zero value is ready.
type Backoff struct {
	d time.Duration
}

// Next returns the delay before the next attempt.
func (b *Backoff) Next() time.Duration {
	if b.d == 0 {
		b.d = BackoffMin
	} else {
		b.d = min(2*b.d, BackoffMax)
	}
	return b.d
}

// Reset starts the next streak of failures from BackoffMin.
func (b *Backoff) Reset() { b.d = 0 }

// maxKeys bounds a RateLog's memory: keys unused for a whole interval are
// dropped once there are this many.
const maxKeys = 256

// RateLog logs a line at most once per Every for each key, and says in the
// next line it lets through how many it suppressed meanwhile. Keys name a
// kind of event ("refused: connection limit"), not a peer, so that a peer
// cannot grow the map; it is bounded anyway. Safe for concurrent use.
type RateLog struct {
	Every time.Duration // default 10s
	// Now, if set, replaces time.Now (tests).
	Now func() time.Time

	mu   sync.Mutex
	keys map[string]*rateKey
}

type rateKey struct {
	last       time.Time
	suppressed int
}

// DefaultEvery is a RateLog's interval when Every is zero.
const DefaultEvery = 10 * time.Second

// Log writes msg with args at level to log, unless a line with this key
// went out less than Every ago; then it only counts it. A line that goes
// out after suppressed ones carries "suppressed", their count. It reports
// whether the line was written.
func (r *RateLog) Log(log *slog.Logger, level slog.Level, key, msg string, args ...any) bool {
	if log == nil {
		return false
	}
	now := r.now()
	every := r.Every
	if every <= 0 {
		every = DefaultEvery
	}
	r.mu.Lock()
	if r.keys == nil {
		r.keys = map[string]*rateKey{}
	}
	k := r.keys[key]
	if k == nil {
		if len(r.keys) >= maxKeys {
			for name, old := range r.keys {
				if now.Sub(old.last) >= every {
					delete(r.keys, name)
				}
			}
		}
		k = &rateKey{}
		r.keys[key] = k
	} else if now.Sub(k.last) < every {
		k.suppressed++
		r.mu.Unlock()
		return false
	}
	suppressed := k.suppressed
	k.last, k.suppressed = now, 0
	r.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	log.Log(context.Background(), level, msg, args...)
	return true
}

// Forget drops key, so that its next line goes out at once (the start of
// a new streak). It returns how many lines were suppressed since the last
// one written.
func (r *RateLog) Forget(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.keys[key]
	if k == nil {
		return 0
	}
	delete(r.keys, key)
	return k.suppressed
}

func (r *RateLog) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
