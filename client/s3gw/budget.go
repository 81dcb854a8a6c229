package s3gw

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// DefaultMaxBodyMemory is Options.MaxBodyMemory's default: sixteen
// requests at the per-request bound (64 MiB) at once.
const DefaultMaxBodyMemory = 1 << 30

// defaultBodyMemoryWait is how long a PUT or UploadPart waits for its
// share of MaxBodyMemory before it is answered SlowDown, as MinIO's
// requests_deadline.
const defaultBodyMemoryWait = 10 * time.Second

// ErrSlowDown: S3's answer to a client that sends more than it takes in
// now; the AWS SDKs, aws-cli, boto3 and rclone back off and retry it.
var ErrSlowDown = &Error{Code: "SlowDown", Status: http.StatusServiceUnavailable}

// bodyBudget bounds the memory the bodies of the PUTs and UploadParts in
// progress hold at once (Options.MaxBodyMemory). Each is bounded on its
// own (perRequest: the SDK sends a body of up to 64 MiB in one op, a
// larger one in pieces, Concurrency in flight), but not their sum: sixteen
// clients' 64 MiB parts at once held about a gigabyte. A request takes
// min(its length, perRequest) before it reads its body, so a client that
// sent Expect: 100-continue sends nothing while it waits, and gives it
// back when it ends.
type bodyBudget struct {
	sem        *semaphore.Weighted // nil: no bound
	max        int64
	perRequest int64
	wait       time.Duration
	held       atomic.Int64
	noteMu     sync.Mutex       // orders the notes as the changes
	note       func(held int64) // Options.OnBodyMemory; may be nil
}

func newBodyBudget(max, perRequest int64, wait time.Duration, note func(int64)) *bodyBudget {
	b := &bodyBudget{max: max, perRequest: perRequest, wait: wait, note: note}
	if max > 0 {
		b.sem = semaphore.NewWeighted(max)
	}
	return b
}

// acquire takes the share of a body of length n (unknown: negative),
// waiting up to the budget's wait; release gives it back.
func (b *bodyBudget) acquire(ctx context.Context, n int64) (release func(), err error) {
	if n < 0 || n > b.perRequest {
		n = b.perRequest
	}
	n = min(n, b.max)
	if b.sem == nil || n <= 0 {
		return func() {}, nil
	}
	if !b.sem.TryAcquire(n) {
		wctx, cancel := context.WithTimeout(ctx, b.wait)
		defer cancel()
		if err := b.sem.Acquire(wctx, n); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, errf(ErrSlowDown, "Please reduce your request rate: the gateway holds its most of request bodies (%d MiB) and none ended within %v", b.max>>20, b.wait)
			}
			return nil, err
		}
	}
	b.add(n)
	return func() {
		b.add(-n)
		b.sem.Release(n)
	}, nil
}

func (b *bodyBudget) add(n int64) {
	if b.note == nil {
		b.held.Add(n)
		return
	}
	b.noteMu.Lock()
	defer b.noteMu.Unlock()
	b.note(b.held.Add(n))
}

// BodyMemory is how much of Options.MaxBodyMemory the requests in
// progress hold.
func (g *Gateway) BodyMemory() int64 { return g.bodies.held.Load() }
