package osd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// workload is the checker of the multi-process tests: a writer that puts
// new checksummed objects and records each acknowledged one, and readers
// that keep reading acknowledged objects back. A read that answers
// NoSuchKey or wrong bytes for an acknowledged object is a violation; one
// that fails retriably (the PG is peering, below min_size) is only counted.
type workload struct {
	cl     *client.Client
	bucket string
	size   func(key string) []byte

	mu         sync.Mutex
	acked      map[string][]byte
	failed     map[string][]byte // puts that failed: each may or may not have been applied
	keys       []string
	puts       []time.Time // when each put was acknowledged
	violations []string
	reads      int
	readFails  int

	// pace, when set, is the writer's least time between two puts.
	pace atomic.Int64

	stop chan struct{}
	wg   sync.WaitGroup
}

// setPace slows the writer to one put per d at most. A backfill copies
// every object ahead of its cursor, and the writer's new keys sort after
// all the others: an unpaced writer on a fast machine adds data faster
// than a throttled backfill copies it, and the backfill never ends (as
// Ceph's would not).
func (w *workload) setPace(d time.Duration) { w.pace.Store(int64(d)) }

func newWorkload(cl *client.Client, bucket string) *workload {
	return &workload{cl: cl, bucket: bucket, acked: map[string][]byte{}, failed: map[string][]byte{}, stop: make(chan struct{}),
		size: func(key string) []byte { return content(key, 0) }}
}

// write starts the writer.
func (w *workload) write(ctx context.Context) {
	w.wg.Go(func() {
		var last time.Time
		for n := 0; ; n++ {
			wait := time.Duration(0)
			if pace := time.Duration(w.pace.Load()); pace > 0 {
				wait = time.Until(last.Add(pace))
			}
			select {
			case <-w.stop:
				return
			case <-time.After(max(wait, 0)):
			}
			last = time.Now()
			key := fmt.Sprintf("k%05d", n)
			body := w.size(key)
			if _, err := osdtest.Put(ctx, w.cl, w.bucket, key, body, client.PutOptions{}); err != nil {
				if ctx.Err() != nil {
					return
				}
				w.mu.Lock()
				w.failed[key] = body
				w.mu.Unlock()
				continue
			}
			w.mu.Lock()
			w.acked[key] = body
			w.keys = append(w.keys, key)
			w.puts = append(w.puts, time.Now())
			w.mu.Unlock()
		}
	})
}

// read starts a reader of random acknowledged objects.
func (w *workload) read(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	w.wg.Go(func() {
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			w.mu.Lock()
			if len(w.keys) == 0 {
				w.mu.Unlock()
				time.Sleep(10 * time.Millisecond) // pacing: nothing acknowledged yet
				continue
			}
			key := w.keys[rng.IntN(len(w.keys))]
			want := w.acked[key]
			w.mu.Unlock()
			got, _, err := osdtest.Get(ctx, w.cl, w.bucket, key, client.GetOptions{})
			w.mu.Lock()
			w.reads++
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, client.ErrNoSuchKey):
				w.violations = append(w.violations, fmt.Sprintf("%s at %s: NoSuchKey", key, time.Now().Format(time.StampMilli)))
			case err != nil:
				w.readFails++
			case !bytes.Equal(got, want):
				w.violations = append(w.violations, fmt.Sprintf("%s: %d wrong bytes (want %d)", key, len(got), len(want)))
			}
			w.mu.Unlock()
		}
	})
}

// halt stops the writer and readers and waits for them.
func (w *workload) halt() {
	close(w.stop)
	w.wg.Wait()
}

// count is the number of acknowledged puts.
func (w *workload) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// ackedSince reports whether a put was acknowledged after t0.
func (w *workload) ackedSince(t0 time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.puts) > 0 && w.puts[len(w.puts)-1].After(t0)
}

// waitFlowing waits until at least n puts were acknowledged and one after
// since.
func (w *workload) waitFlowing(ctx context.Context, t *testing.T, n int, since time.Time) {
	t.Helper()
	for !w.ackedSince(since) || w.count() < n {
		time.Sleep(20 * time.Millisecond) // polling interval: the writer's progress
		if ctx.Err() != nil {
			t.Fatalf("the writer made no progress (%d acknowledged)", w.count())
		}
	}
}

// resumed is how long after t0 the first put acknowledged after t0+slack
// was (a put in flight at t0 may finish just after it).
func (w *workload) resumed(t0 time.Time, slack time.Duration) time.Duration {
	return w.resumedFor(t0, slack, func(string) bool { return true })
}

// resumedFor is resumed for the keys match accepts (those of the PGs an
// OSD served, say).
func (w *workload) resumedFor(t0 time.Time, slack time.Duration, match func(key string) bool) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, at := range w.puts {
		if at.After(t0.Add(slack)) && match(w.keys[i]) {
			return at.Sub(t0)
		}
	}
	return -1
}

// verify checks the readers saw no violation, then reads every
// acknowledged object back.
func (w *workload) verify(ctx context.Context, t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Errorf("reader: %s", v)
	}
	for key, want := range w.acked {
		got, _, err := osdtest.Get(ctx, w.cl, w.bucket, key, client.GetOptions{})
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("acknowledged %s lost: %v (%d bytes, want %d)", key, err, len(got), len(want))
		}
	}
	t.Logf("%d acknowledged writes, all read back; readers: %d reads, %d failed retriably, %d violations",
		len(w.acked), w.reads, w.readFails, len(w.violations))
}
