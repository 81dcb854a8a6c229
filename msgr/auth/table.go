package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNoRecord: an entity the mon has no record of (never created, or
// removed by "auth rm").
var ErrNoRecord = errors.New("auth: no such entity")

// ErrNoS3Key: an S3 access key no entity holds (never made, or removed
// by "auth s3-key rm" or with its entity).
var ErrNoS3Key = errors.New("auth: no such S3 access key")

// ErrTableUnavailable: what was asked for is not in the table held, and
// the mon's newer table could not be fetched (the mons out of reach, or
// refusing this entity), so there is no telling whether it exists.
var ErrTableUnavailable = errors.New("auth: the mon's newer auth table could not be fetched")

// Record is what a daemon knows of an entity: its capabilities, the
// serial of the one certificate it may show (see Serial) and, in an S3
// gateway's table only, its S3 key pairs.
type Record struct {
	Caps   Caps
	Serial string
	S3Keys []S3Key
}

// S3Key is an S3-style access key pair of an entity: a request signed
// with it acts as the entity, with the entity's caps.
type S3Key struct {
	AccessKey, Secret string
}

// S3Identity is who an S3 access key is: its secret, and its entity with
// the entity's caps as of the table it was found in.
type S3Identity struct {
	Entity string
	Secret string
	Caps   Caps
}

// Table is the mon's auth records at one etcd revision, as daemons hold
// them to check their peers and their ops without asking the mon each
// time. It holds no keyrings; S3 secrets only in a gateway's.
type Table struct {
	Revision int64
	records  map[string]Record
	s3       map[string]string // access key -> entity
}

// NewTable makes a table of records by entity name.
func NewTable(revision int64, records map[string]Record) *Table {
	t := &Table{Revision: revision, records: records}
	for entity, r := range records {
		for _, k := range r.S3Keys {
			if t.s3 == nil {
				t.s3 = map[string]string{}
			}
			t.s3[k.AccessKey] = entity
		}
	}
	return t
}

// LookupS3 finds the entity that holds accessKey.
func (t *Table) LookupS3(accessKey string) (S3Identity, bool) {
	entity, ok := t.s3[accessKey]
	if !ok {
		return S3Identity{}, false
	}
	r := t.records[entity]
	for _, k := range r.S3Keys {
		if k.AccessKey == accessKey {
			return S3Identity{Entity: entity, Secret: k.Secret, Caps: r.Caps}, true
		}
	}
	return S3Identity{}, false
}

// Lookup returns entity's record.
func (t *Table) Lookup(entity string) (Record, bool) {
	r, ok := t.records[entity]
	return r, ok
}

// Revoked lists the entities of prev whose sessions next ends: those it
// has no record of, or whose certificate it names another (reissued, as by
// auth rotate), so that a session authenticated with the old certificate
// does not outlive it. With capsToo, also those whose caps changed: a
// daemon that checks some caps only when a session starts (the mon's map
// subscriptions) checks them again on the new session.
func Revoked(prev, next *Table, capsToo bool) []string {
	if prev == nil || next == nil {
		return nil
	}
	var out []string
	for e, r := range prev.records {
		n, ok := next.records[e]
		if !ok || n.Serial != r.Serial || capsToo && !maps.Equal(n.Caps.Strings(), r.Caps.Strings()) {
			out = append(out, e)
		}
	}
	return out
}

// Len is the number of entities.
func (t *Table) Len() int { return len(t.records) }

// Keeper holds the newest table a daemon has and answers its messengers'
// Authorize and its op checks from it. Safe for concurrent use.
type Keeper struct {
	// Refresh, if set, fetches the mon's current table. Authenticate calls
	// it when a peer has no record, or shows another certificate, in the
	// table held: an entity created (or a keyring reissued) a moment ago
	// reaches the daemons by a push that may not have come yet, and
	// refusing it would be final (the dialer does not redial after an
	// authentication failure). Concurrent misses share one call.
	Refresh func(ctx context.Context) (*Table, error)

	// MinRefreshInterval spaces the refreshes S3Key makes on a miss, so
	// that a stream of requests with unknown keys asks the mon at most
	// once per interval: a miss within it of the last refresh waits for
	// the interval's end and then refreshes (a key made a moment ago
	// still works, a little later). Zero: no spacing.
	MinRefreshInterval time.Duration

	// OnChange, if set, is called with the table held and the newer one
	// each time Note adopts one (a push or a refresh), in the goroutine
	// that noted it; every change is seen once. Set it before the first
	// Note.
	OnChange func(prev, next *Table)

	cur         atomic.Pointer[Table]
	refreshMu   sync.Mutex
	lastRefresh time.Time // under refreshMu
}

// Note adopts t if it is newer than the table held.
func (k *Keeper) Note(t *Table) {
	for {
		cur := k.cur.Load()
		if cur != nil && cur.Revision >= t.Revision {
			return
		}
		if k.cur.CompareAndSwap(cur, t) {
			if k.OnChange != nil {
				k.OnChange(cur, t)
			}
			return
		}
	}
}

// Table is the newest table held; nil before any.
func (k *Keeper) Table() *Table { return k.cur.Load() }

// Record returns entity's record in the table held, or an error wrapping
// ErrNoRecord that says why there is none.
func (k *Keeper) Record(entity string) (Record, error) {
	t := k.cur.Load()
	if t == nil {
		return Record{}, fmt.Errorf("%w: %s: no auth table from the mon yet", ErrNoRecord, entity)
	}
	r, ok := t.Lookup(entity)
	if !ok {
		return Record{}, fmt.Errorf("%w: %s has no auth record (removed, or never created: osprey auth get-or-create)", ErrNoRecord, entity)
	}
	return r, nil
}

// Authenticate is the session check: peer, authenticated with cert, must
// have a record naming cert's serial, so that "auth rm" and a reissued
// keyring lock an old certificate out from the next session on. On a
// miss it refreshes the table once (see Refresh) before refusing.
func (k *Keeper) Authenticate(ctx context.Context, peer string, cert *x509.Certificate) (Record, error) {
	held := k.cur.Load()
	r, err := k.check(peer, cert)
	if err == nil || k.Refresh == nil {
		return r, err
	}
	if err := k.refresh(ctx, held, 0, err); err != nil {
		return Record{}, err
	}
	return k.check(peer, cert)
}

// S3Key finds the entity that holds accessKey, with its secret and caps.
// On a miss it refreshes the table (see Refresh and MinRefreshInterval)
// before answering an error wrapping ErrNoS3Key: a key made a moment ago
// works at once, before the mon's push of it arrives. When the refresh
// fails the error wraps ErrTableUnavailable instead: a gateway whose
// entity was removed holds a table without the secrets, and must not
// tell its users that their keys are gone.
func (k *Keeper) S3Key(ctx context.Context, accessKey string) (S3Identity, error) {
	held := k.cur.Load()
	if held != nil {
		if id, ok := held.LookupS3(accessKey); ok {
			return id, nil
		}
	}
	miss := fmt.Errorf("%w: %q", ErrNoS3Key, accessKey)
	if k.Refresh == nil {
		return S3Identity{}, miss
	}
	if err := k.refresh(ctx, held, k.MinRefreshInterval, nil); err != nil {
		return S3Identity{}, fmt.Errorf("access key %q: not in the auth table held, and %w", accessKey, err)
	}
	if id, ok := k.cur.Load().LookupS3(accessKey); ok {
		return id, nil
	}
	return S3Identity{}, miss
}

// refresh fetches the mon's table unless another caller did since held
// was read (concurrent misses share one call), at least spacing after
// the last refresh. miss is the error to wrap when the fetch fails; nil:
// ErrTableUnavailable, which a failed fetch wraps whatever miss is.
func (k *Keeper) refresh(ctx context.Context, held *Table, spacing time.Duration, miss error) error {
	unavailable := func(err error) error {
		if miss == nil {
			return fmt.Errorf("%w: %w", ErrTableUnavailable, err)
		}
		return fmt.Errorf("%w (and %w: %w)", miss, ErrTableUnavailable, err)
	}
	k.refreshMu.Lock()
	defer k.refreshMu.Unlock()
	if k.cur.Load() != held { // somebody refreshed while we waited
		return nil
	}
	if wait := time.Until(k.lastRefresh.Add(spacing)); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return unavailable(fmt.Errorf("waiting to ask the mon again: %w", ctx.Err()))
		}
	}
	k.lastRefresh = time.Now()
	t, err := k.Refresh(ctx)
	if err != nil {
		return unavailable(err)
	}
	k.Note(t)
	return nil
}

func (k *Keeper) check(peer string, cert *x509.Certificate) (Record, error) {
	r, err := k.Record(peer)
	if err != nil {
		return Record{}, err
	}
	if s := Serial(cert); r.Serial != s {
		// The current serial is not said: the refusal goes to the peer,
		// whose certificate is the one that no longer counts.
		return Record{}, fmt.Errorf("%w: %s showed certificate %s, which is not its current one (reissued or removed; `osprey auth get %s -o FILE` writes the current keyring)", ErrBadCredential, peer, s, peer)
	}
	return r, nil
}
