package s3gw

import (
	"cmp"
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
//
// One user holds at most perUser of it (Options.MaxBodyMemoryPerUser):
// the share is taken for the length a request declares, and a body may
// come as slowly as a byte per ClientTimeout, so without it one user's
// (or one presigned URL's) sixteen slow 64 MiB PUTs, or a reader's 128
// stalled DeleteObjects, answered every other user SlowDown for as long
// as they dripped (a security probe did both).
type bodyBudget struct {
	sem        *semaphore.Weighted // nil: no bound
	max        int64
	perRequest int64
	perUser    int64 // 0: no bound per user
	wait       time.Duration
	held       atomic.Int64
	noteMu     sync.Mutex       // orders the notes as the changes
	note       func(held int64) // Options.OnBodyMemory; may be nil

	mu    sync.Mutex
	users map[string]*userShare // by user, while one of its requests holds or waits
}

// userShare is what one user's requests hold of the budget.
type userShare struct {
	sem  *semaphore.Weighted
	refs int // its requests holding or waiting
}

func newBodyBudget(limit, perRequest, perUser int64, wait time.Duration, note func(int64)) *bodyBudget {
	b := &bodyBudget{max: limit, perRequest: perRequest, wait: wait, note: note, users: map[string]*userShare{}}
	if limit > 0 {
		b.sem = semaphore.NewWeighted(limit)
		if perUser >= 0 {
			// Default: a quarter, so that no fewer than four users fill
			// it. A request takes at most the whole of its user's.
			b.perUser = min(limit, cmp.Or(perUser, limit/4))
		}
	}
	return b
}

// acquire takes the share of a body of length n (unknown: negative) for
// user, waiting up to the budget's wait; release gives it back.
func (b *bodyBudget) acquire(ctx context.Context, user string, n int64) (release func(), err error) {
	if n < 0 || n > b.perRequest {
		n = b.perRequest
	}
	n = min(n, b.max)
	if b.sem == nil || n <= 0 {
		return func() {}, nil
	}
	var us *userShare
	if b.perUser > 0 {
		us = b.share(user)
	}
	// One wait for both shares, the user's first: a user past its own
	// takes nothing of the rest.
	var deadline context.Context
	cancel := context.CancelFunc(func() {})
	defer func() { cancel() }()
	take := func(sem *semaphore.Weighted, n int64, what string, mib int64) error {
		if sem.TryAcquire(n) {
			return nil
		}
		if deadline == nil {
			deadline, cancel = context.WithTimeout(ctx, b.wait)
		}
		err := sem.Acquire(deadline, n)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			return errf(ErrSlowDown, "Please reduce your request rate: "+what+" (%d MiB) and none ended within %v", mib, b.wait)
		}
		return err
	}
	userN := min(n, b.perUser)
	if us != nil {
		if err := take(us.sem, userN, "your requests hold the most of request bodies one user may", b.perUser>>20); err != nil {
			b.unshare(user, us)
			return nil, err
		}
	}
	if err := take(b.sem, n, "the gateway holds its most of request bodies", b.max>>20); err != nil {
		if us != nil {
			us.sem.Release(userN)
			b.unshare(user, us)
		}
		return nil, err
	}
	b.add(n)
	return func() {
		b.add(-n)
		b.sem.Release(n)
		if us != nil {
			us.sem.Release(userN)
			b.unshare(user, us)
		}
	}, nil
}

// share is user's share, counted as in use until unshare.
func (b *bodyBudget) share(user string) *userShare {
	b.mu.Lock()
	defer b.mu.Unlock()
	us := b.users[user]
	if us == nil {
		us = &userShare{sem: semaphore.NewWeighted(b.perUser)}
		b.users[user] = us
	}
	us.refs++
	return us
}

// unshare ends a use of user's share, and forgets it with the last.
func (b *bodyBudget) unshare(user string, us *userShare) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if us.refs--; us.refs == 0 {
		delete(b.users, user)
	}
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
