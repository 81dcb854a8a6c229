package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrNoRecord: an entity the mon has no record of (never created, or
// removed by "auth rm").
var ErrNoRecord = errors.New("auth: no such entity")

// Record is what a daemon knows of an entity: its capabilities and the
// serial of the one certificate it may show (see Serial).
type Record struct {
	Caps   Caps
	Serial string
}

// Table is the mon's auth records at one etcd revision, as daemons hold
// them to check their peers and their ops without asking the mon each
// time. It holds no keys.
type Table struct {
	Revision int64
	records  map[string]Record
}

// NewTable makes a table of records by entity name.
func NewTable(revision int64, records map[string]Record) *Table {
	return &Table{Revision: revision, records: records}
}

// Lookup returns entity's record.
func (t *Table) Lookup(entity string) (Record, bool) {
	r, ok := t.records[entity]
	return r, ok
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

	cur       atomic.Pointer[Table]
	refreshMu sync.Mutex
}

// Note adopts t if it is newer than the table held.
func (k *Keeper) Note(t *Table) {
	for {
		cur := k.cur.Load()
		if cur != nil && cur.Revision >= t.Revision {
			return
		}
		if k.cur.CompareAndSwap(cur, t) {
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
	k.refreshMu.Lock()
	if k.cur.Load() == held { // nobody refreshed while we waited
		t, rerr := k.Refresh(ctx)
		if rerr != nil {
			k.refreshMu.Unlock()
			return Record{}, fmt.Errorf("%w (and the mon's newer table could not be fetched: %v)", err, rerr)
		}
		k.Note(t)
	}
	k.refreshMu.Unlock()
	return k.check(peer, cert)
}

func (k *Keeper) check(peer string, cert *x509.Certificate) (Record, error) {
	r, err := k.Record(peer)
	if err != nil {
		return Record{}, err
	}
	if s := Serial(cert); r.Serial != s {
		return Record{}, fmt.Errorf("%w: %s showed certificate %s, but its current one is %s (reissued or removed)", ErrBadCredential, peer, s, r.Serial)
	}
	return r, nil
}
