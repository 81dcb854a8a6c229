package mon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// The mon is the cluster's auth authority, as Ceph's AuthMonitor: it
// holds the CA and every entity's record (caps, keyring, certificate
// serial) in etcd, and issues keyrings. Every write is one transaction
// that compares what it read, so two mons (or two commands) never issue
// two keyrings for one entity or lose a caps change. Any mon serves auth
// commands: etcd orders them, not the leader.

// authCommands are the MonCommand prefixes authCommand serves.
var authCommands = []string{"auth add", "auth get-or-create", "auth get", "auth ls", "auth rm", "auth caps", "auth rotate", "auth s3-key add", "auth s3-key rm"}

// AuthEntry is one entity as "auth ls" and "auth get" show it.
type AuthEntry struct {
	Entity string            `json:"entity"`
	Caps   map[string]string `json:"caps"`
	Serial string            `json:"serial"` // its certificate's serial
	// S3Keys are its S3 key pairs with their secrets: every auth command
	// needs mon 'allow *' (x), which may read them.
	S3Keys []S3KeyEntry `json:"s3_keys,omitempty"`
}

// authStore reads and writes auth records in etcd.
type authStore struct {
	cli  *clientv3.Client
	k    keys
	fsid string
	// keepAdmins: some entity must keep the power to run auth commands
	// (keepAnAdmin). Not without auth, where no command is checked.
	keepAdmins bool
}

// ca returns the cluster's CA, making it on first use: the create is a
// transaction that succeeds only where none exists, so concurrent first
// uses agree on one.
func (s *authStore) ca(ctx context.Context) (*auth.CA, error) {
	for range 3 {
		resp, err := s.cli.Get(ctx, s.k.authCA())
		if err != nil {
			return nil, unavailable("etcd", err)
		}
		if len(resp.Kvs) > 0 {
			ca, err := auth.ParseCA(resp.Kvs[0].Value)
			if err != nil {
				return nil, fmt.Errorf("mon: the cluster CA in etcd: %w", err)
			}
			return ca, nil
		}
		ca, err := auth.NewCA(s.fsid)
		if err != nil {
			return nil, err
		}
		b, err := ca.MarshalPEM()
		if err != nil {
			return nil, err
		}
		tx, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(s.k.authCA()), "=", 0)).
			Then(clientv3.OpPut(s.k.authCA(), string(b))).Commit()
		if err != nil {
			return nil, unavailable("etcd", err)
		}
		if tx.Succeeded {
			return ca, nil
		}
	}
	return nil, ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "mon: the cluster CA is being created; try again")
}

// get reads entity's record and the revision it was written at (nil, 0
// when it has none).
func (s *authStore) get(ctx context.Context, entity string) (*osdpb.AuthRecord, int64, error) {
	resp, err := s.cli.Get(ctx, s.k.auth(entity))
	if err != nil {
		return nil, 0, unavailable("etcd", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	rec := &osdpb.AuthRecord{}
	if err := proto.Unmarshal(resp.Kvs[0].Value, rec); err != nil {
		return nil, 0, fmt.Errorf("mon: auth record of %s in etcd: %w", entity, err)
	}
	return rec, resp.Kvs[0].ModRevision, nil
}

// put writes rec if the entity's record is still at rev (0: absent) and
// x's comparisons hold, with x's operations.
func (s *authStore) put(ctx context.Context, rec *osdpb.AuthRecord, rev int64, x txnExtra) (bool, error) {
	b, err := marshalRecord(rec)
	if err != nil {
		return false, err
	}
	return s.commit(ctx, rec.Entity, rev, clientv3.OpPut(s.k.auth(rec.Entity), string(b)), x)
}

// commit runs op on entity's record if the record is still at rev and
// x's comparisons hold, with x's operations, in one transaction.
func (s *authStore) commit(ctx context.Context, entity string, rev int64, op clientv3.Op, x txnExtra) (bool, error) {
	cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.k.auth(entity)), "=", rev)}, x.cmps...)
	tx, err := s.cli.Txn(ctx).If(cmps...).Then(append([]clientv3.Op{op}, x.ops...)...).Commit()
	if err != nil {
		return false, unavailable("etcd", err)
	}
	return tx.Succeeded, nil
}

// authThen is what an auth command's transaction adds, given the record
// it writes (nil: it removes it) and the S3 key pair it adds, if any:
// the command's request record (reqid.go). A nil authThen adds nothing.
type authThen func(rec *osdpb.AuthRecord, key *osdpb.S3Key) (txnExtra, error)

func (then authThen) extra(rec *osdpb.AuthRecord, key *osdpb.S3Key) (txnExtra, error) {
	if then == nil {
		return txnExtra{}, nil
	}
	return then(rec, key)
}

func marshalRecord(rec *osdpb.AuthRecord) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(rec)
}

// create issues entity a keyring and writes its record with caps, unless
// it has one: then it returns the existing record and false.
func (s *authStore) create(ctx context.Context, entity string, caps auth.Caps, then authThen) (*osdpb.AuthRecord, bool, error) {
	ca, err := s.ca(ctx)
	if err != nil {
		return nil, false, err
	}
	for range 3 {
		rec, _, err := s.get(ctx, entity)
		if err != nil || rec != nil {
			return rec, false, err
		}
		k, err := ca.Issue(entity)
		if err != nil {
			return nil, false, err
		}
		pem, err := k.MarshalPEM()
		if err != nil {
			return nil, false, err
		}
		rec = &osdpb.AuthRecord{Entity: entity, Caps: caps.Strings(), Keyring: pem, Serial: auth.Serial(k.Cert)}
		x, err := then.extra(rec, nil)
		if err != nil {
			return nil, false, err
		}
		ok, err := s.put(ctx, rec, 0, x)
		if err != nil || ok {
			return rec, ok, err
		}
	}
	return nil, false, busy(entity)
}

// remove deletes entity's record.
func (s *authStore) remove(ctx context.Context, entity string, then authThen) error {
	for range 3 {
		rec, rev, err := s.get(ctx, entity)
		if err != nil {
			return err
		}
		if rec == nil {
			return noSuchEntity(entity)
		}
		x, err := then.extra(nil, nil)
		if err != nil {
			return err
		}
		if err := s.keepAnAdmin(ctx, rec, nil, &x); err != nil {
			return err
		}
		ok, err := s.commit(ctx, entity, rev, clientv3.OpDelete(s.k.auth(entity)), x)
		if err != nil || ok {
			return err
		}
	}
	return busy(entity)
}

// update applies change to entity's record in a compared write, read
// again and retried when another command got there first.
func (s *authStore) update(ctx context.Context, entity string, change func(*osdpb.AuthRecord) error, then authThen) (*osdpb.AuthRecord, error) {
	for range 3 {
		rec, rev, err := s.get(ctx, entity)
		if err != nil {
			return nil, err
		}
		if rec == nil {
			return nil, noSuchEntity(entity)
		}
		was := maps.Clone(rec.Caps)
		if err := change(rec); err != nil {
			return nil, err
		}
		x, err := then.extra(rec, nil)
		if err != nil {
			return nil, err
		}
		if err := s.keepAnAdmin(ctx, &osdpb.AuthRecord{Entity: entity, Caps: was}, rec, &x); err != nil {
			return nil, err
		}
		ok, err := s.put(ctx, rec, rev, x)
		if err != nil || ok {
			return rec, err
		}
	}
	return nil, busy(entity)
}

// runsAuth reports whether caps (a record's) let their holder run the
// auth commands: mon 'allow *'.
func runsAuth(caps map[string]string) bool {
	c, err := auth.ParseCaps(caps)
	return err == nil && c.Allows(auth.ServiceMon, auth.PermExec, "")
}

// keepAnAdmin refuses a change of before's record to after (nil: its
// removal) that takes away the last power to run auth commands: some
// other entity must keep it, the mons' own aside (only etcd holds their
// keys). x gains the comparison that the other one's record is unchanged,
// so that two commands that each take one of the last two away cannot
// both pass.
func (s *authStore) keepAnAdmin(ctx context.Context, before, after *osdpb.AuthRecord, x *txnExtra) error {
	if !s.keepAdmins || !runsAuth(before.Caps) || after != nil && runsAuth(after.Caps) || strings.HasPrefix(before.Entity, "mon.") {
		return nil
	}
	resp, err := s.cli.Get(ctx, s.k.authPrefix(), clientv3.WithPrefix())
	if err != nil {
		return unavailable("etcd", err)
	}
	for _, kv := range resp.Kvs {
		entity := strings.TrimPrefix(string(kv.Key), s.k.authPrefix())
		if entity == before.Entity || strings.HasPrefix(entity, "mon.") {
			continue
		}
		var r osdpb.AuthRecord
		if proto.Unmarshal(kv.Value, &r) != nil || !runsAuth(r.Caps) {
			continue
		}
		x.cmps = append(x.cmps, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
		return nil
	}
	return ops.Errorf(osdpb.Status_PRECONDITION_FAILED, "%s is the last entity that may run auth commands (mon 'allow *'), the mons' own aside: "+
		"give another one those caps first, or no one can change auth again", before.Entity)
}

// setCaps replaces entity's caps.
func (s *authStore) setCaps(ctx context.Context, entity string, caps auth.Caps, then authThen) (*osdpb.AuthRecord, error) {
	return s.update(ctx, entity, func(r *osdpb.AuthRecord) error {
		r.Caps = caps.Strings()
		return nil
	}, then)
}

// rotate issues entity a new keyring, caps unchanged; its record then
// names the new certificate, so the old keyring is refused from the next
// session on.
func (s *authStore) rotate(ctx context.Context, entity string, then authThen) (*osdpb.AuthRecord, error) {
	ca, err := s.ca(ctx)
	if err != nil {
		return nil, err
	}
	return s.update(ctx, entity, func(r *osdpb.AuthRecord) error {
		k, err := ca.Issue(entity)
		if err != nil {
			return err
		}
		if r.Keyring, err = k.MarshalPEM(); err != nil {
			return err
		}
		r.Serial = auth.Serial(k.Cert)
		return nil
	}, then)
}

// busy: three reads and compared writes of entity's record all lost to
// other commands.
func busy(entity string) error {
	return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "mon: %s is being changed by another command; try again", entity)
}

func noSuchEntity(entity string) error {
	return ops.Errorf(osdpb.Status_NO_SUCH_ENTITY, "no entity %s", entity)
}

// authCommand serves the auth commands, as Ceph's "ceph auth":
//
//	auth add ENTITY CAPS           create; ENTITY_EXISTS if it exists
//	auth get-or-create ENTITY CAPS create unless it exists with those caps
//	auth get ENTITY                the entity's caps and keyring
//	auth ls                        every entity, its caps and S3 keys (no keyrings)
//	auth rm ENTITY                 remove it: its certificate stops working
//	auth caps ENTITY CAPS          replace its caps
//	auth rotate ENTITY             a new keyring, caps unchanged
//	auth s3-key add ENTITY         a new S3 key pair, its secret shown once (s3keys.go)
//	auth s3-key rm ENTITY KEY      remove one
//
// A change also records its reply under g's request id (g nil: none).
func (m *Mon) authCommand(ctx context.Context, c *osdpb.MonCommand, rep *osdpb.MonCommandReply, g *requestGuard) (any, error) {
	if c.Prefix == "auth ls" {
		t, err := m.auth.listTable(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]AuthEntry, len(t.Entries))
		for i, e := range t.Entries {
			out[i] = AuthEntry{Entity: e.Entity, Caps: e.Caps, Serial: e.Serial, S3Keys: s3KeyEntries(e.S3Keys)}
		}
		return out, nil
	}
	if err := auth.ValidateEntity(c.Entity); err != nil {
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%v", err)
	}
	var caps auth.Caps
	if c.Prefix == "auth add" || c.Prefix == "auth get-or-create" || c.Prefix == "auth caps" {
		var err error
		if caps, err = auth.ParseCaps(c.Caps); err != nil {
			return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%v", err)
		}
	}
	if c.Prefix != "auth get" {
		// This mon's checks see its own change at once, not when its watch
		// catches up: an "auth rm" refuses the entity's next session here
		// from the moment the command answers.
		defer func() {
			if t, err := m.auth.listTable(ctx); err == nil {
				m.adoptAuthTable(t)
			}
		}()
	}
	var then authThen
	if g != nil {
		then = func(rec *osdpb.AuthRecord, key *osdpb.S3Key) (txnExtra, error) {
			r, err := commandReply(authOutput(c, rec, key))
			if err != nil {
				return txnExtra{}, err
			}
			return g.extra(r)
		}
	}
	var rec *osdpb.AuthRecord
	var key *osdpb.S3Key
	switch c.Prefix {
	case "auth add", "auth get-or-create":
		r, created, err := m.auth.create(ctx, c.Entity, caps, then)
		if err != nil {
			return nil, err
		}
		if !created {
			if c.Prefix == "auth add" {
				return nil, ops.Errorf(osdpb.Status_ENTITY_EXISTS, "entity %s exists", c.Entity)
			}
			if !maps.Equal(r.Caps, caps.Strings()) { // records hold canonical caps
				return nil, ops.Errorf(osdpb.Status_ENTITY_EXISTS, "entity %s exists with caps %s, not %s; change them with auth caps", c.Entity, auth.FormatCaps(r.Caps), caps)
			}
			g.wroteNothing()
		}
		rec = r
	case "auth get":
		r, _, err := m.auth.get(ctx, c.Entity)
		if err != nil {
			return nil, err
		}
		if r == nil {
			return nil, noSuchEntity(c.Entity)
		}
		rec = r
	case "auth rm":
		if err := m.auth.remove(ctx, c.Entity, then); err != nil {
			return nil, err
		}
	case "auth caps":
		r, err := m.auth.setCaps(ctx, c.Entity, caps, then)
		if err != nil {
			return nil, err
		}
		rec = r
	case "auth rotate":
		r, err := m.auth.rotate(ctx, c.Entity, then)
		if err != nil {
			return nil, err
		}
		rec = r
	case "auth s3-key add":
		r, k, err := m.auth.addS3Key(ctx, c.Entity, then)
		if err != nil {
			return nil, err
		}
		rec, key = r, k
	case "auth s3-key rm":
		if err := auth.ValidateS3AccessKey(c.AccessKey); err != nil {
			return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%v", err)
		}
		r, err := m.auth.removeS3Key(ctx, c.Entity, c.AccessKey, then)
		if err != nil {
			return nil, err
		}
		rec = r
	default:
		return nil, fmt.Errorf("mon: %q is not an auth command", c.Prefix)
	}
	out, keyring := authOutput(c, rec, key)
	rep.Keyring = keyring
	return out, nil
}

// authOutput is an auth command's output and the keyring its reply
// carries, given the record it read or wrote (nil after "auth rm") and
// the S3 key pair "auth s3-key add" made: one function for the reply sent
// and the reply recorded for repeats.
func authOutput(c *osdpb.MonCommand, rec *osdpb.AuthRecord, key *osdpb.S3Key) (any, []byte) {
	switch c.Prefix {
	case "auth rm":
		return map[string]string{"removed": c.Entity}, nil
	case "auth s3-key add":
		return struct {
			Entity string `json:"entity"`
			S3KeyEntry
		}{c.Entity, S3KeyEntry{AccessKey: key.AccessKey, Secret: key.Secret}}, nil
	case "auth caps", "auth s3-key rm":
		return entryOf(rec), nil
	}
	return entryOf(rec), rec.Keyring
}

func entryOf(r *osdpb.AuthRecord) AuthEntry {
	return AuthEntry{Entity: r.Entity, Caps: r.Caps, Serial: r.Serial, S3Keys: s3KeyEntries(r.S3Keys)}
}

// GetOrCreateKeyring is "auth get-or-create" for a program that embeds
// the mon: `osprey up` makes client.admin's keyring so. It returns the
// keyring file's bytes.
func (m *Mon) GetOrCreateKeyring(ctx context.Context, entity string, caps map[string]string) ([]byte, error) {
	rep := &osdpb.MonCommandReply{}
	if _, err := m.authCommand(ctx, &osdpb.MonCommand{Prefix: "auth get-or-create", Entity: entity, Caps: caps}, rep, nil); err != nil {
		return nil, err
	}
	return rep.Keyring, nil
}

// WriteKeyring is GetOrCreateKeyring that also writes the keyring file
// (mode 0600) to path: how "osprey mon" and "osprey up" hand out
// client.admin's and client.bootstrap-osd's keys.
//
// An entity that exists with other caps (an operator narrowed them with
// auth caps) is handed out as it is, with a warning: refusing it would
// keep the mon from ever starting again, and "auth caps" needs a mon.
func (m *Mon) WriteKeyring(ctx context.Context, path, entity string, caps map[string]string) (*auth.Keyring, error) {
	pem, err := m.GetOrCreateKeyring(ctx, entity, caps)
	if errors.Is(err, ops.ErrEntityExists) {
		m.log.Warn("an entity the mon hands out at its start has caps other than its defaults; handing it out as it is", "entity", entity, "err", err)
		rep := &osdpb.MonCommandReply{}
		if _, err = m.authCommand(ctx, &osdpb.MonCommand{Prefix: "auth get", Entity: entity}, rep, nil); err == nil {
			pem = rep.Keyring
		}
	}
	if err != nil {
		return nil, fmt.Errorf("making %s: %w", entity, err)
	}
	if err := auth.WriteKeyringFile(path, pem); err != nil {
		return nil, err
	}
	return auth.ParseKeyring(pem)
}

// Keyrings are the two keyrings a cluster hands out at its start, as
// Ceph's ceph.client.admin.keyring and bootstrap-osd/ceph.keyring.
type Keyrings struct {
	Admin, BootstrapOSD         *auth.Keyring
	AdminPath, BootstrapOSDPath string
}

// KeyringPath is where an entity's keyring lies in a directory of
// keyrings: DIR/ENTITY.keyring, as WriteKeyrings writes them.
func KeyringPath(dir, entity string) string { return filepath.Join(dir, entity+".keyring") }

// WriteKeyrings writes client.admin's keyring and client.bootstrap-osd's
// (what a new OSD starts with) into dir as ENTITY.keyring, creating the
// entities if they are missing: what "osprey mon --keyring-dir" and
// "osprey up" leave for the operator.
func (m *Mon) WriteKeyrings(ctx context.Context, dir string) (*Keyrings, error) {
	k := &Keyrings{
		AdminPath:        KeyringPath(dir, "client.admin"),
		BootstrapOSDPath: KeyringPath(dir, "client.bootstrap-osd"),
	}
	// Keyrings hold secrets: a directory made for them is the owner's.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var err error
	if k.Admin, err = m.WriteKeyring(ctx, k.AdminPath, "client.admin", AdminCaps); err != nil {
		return nil, err
	}
	if k.BootstrapOSD, err = m.WriteKeyring(ctx, k.BootstrapOSDPath, "client.bootstrap-osd", BootstrapOSDCaps); err != nil {
		return nil, err
	}
	m.keyrings.mu.Lock()
	m.keyrings.dir = dir
	m.keyrings.serial = map[string]string{"client.admin": auth.Serial(k.Admin.Cert), "client.bootstrap-osd": auth.Serial(k.BootstrapOSD.Cert)}
	m.keyrings.mu.Unlock()
	if t := m.authTable.Load(); t != nil {
		m.refreshKeyrings(t)
	}
	return k, nil
}

// keyringFiles are the keyrings WriteKeyrings wrote: their directory and
// the serial of each file's certificate. When one of those entities is
// given a new key ("auth rotate", on any mon), every mon writes its file
// again (refreshKeyrings), so that the copies an operator takes from a
// mon's directory work, as the flag's help says they do.
type keyringFiles struct {
	mu     sync.Mutex
	dir    string
	serial map[string]string
}

// refreshKeyrings writes again the keyring files whose entity's serial in
// t is not the file's. An entity removed keeps its file: it no longer
// works, and the mon does not make the entity again by itself.
func (m *Mon) refreshKeyrings(t *osdpb.AuthTable) {
	kf := &m.keyrings
	kf.mu.Lock()
	defer kf.mu.Unlock()
	if kf.dir == "" {
		return
	}
	for _, e := range t.Entries {
		old, ok := kf.serial[e.Entity]
		if !ok || old == e.Serial {
			continue
		}
		rep := &osdpb.MonCommandReply{}
		path := KeyringPath(kf.dir, e.Entity)
		ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
		_, err := m.authCommand(ctx, &osdpb.MonCommand{Prefix: "auth get", Entity: e.Entity}, rep, nil)
		cancel()
		if err == nil {
			err = auth.WriteKeyringFile(path, rep.Keyring)
		}
		if err != nil {
			m.log.Warn("writing a rotated keyring", "entity", e.Entity, "path", path, "err", err)
			continue
		}
		kf.serial[e.Entity] = e.Serial
		m.log.Info("wrote the rotated keyring", "entity", e.Entity, "path", path)
	}
}

// The auth table: every entity's caps, certificate serial and S3 keys,
// no keyrings; the S3 secrets go only to S3 gateways (authTableFor).
// Daemons subscribe to it (MonSubscribe.auth) to check their peers and
// their ops without asking the mon each time; every mon watches etcd's
// auth records and pushes a new table (MSG_MON_AUTH) on every change, so
// "auth rm" and "auth caps" reach the daemons within a round trip, from
// whichever mon ran the command.

// listTable reads the table from etcd, as of one revision.
func (s *authStore) listTable(ctx context.Context) (*osdpb.AuthTable, error) {
	resp, err := s.cli.Get(ctx, s.k.authPrefix(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, unavailable("etcd", err)
	}
	t := &osdpb.AuthTable{Revision: resp.Header.Revision}
	for _, kv := range resp.Kvs {
		rec := &osdpb.AuthRecord{}
		if err := proto.Unmarshal(kv.Value, rec); err != nil {
			return nil, fmt.Errorf("mon: auth record %s in etcd: %w", kv.Key, err)
		}
		t.Entries = append(t.Entries, &osdpb.AuthEntry{Entity: rec.Entity, Caps: rec.Caps, Serial: rec.Serial, S3Keys: rec.S3Keys})
	}
	return t, nil
}

// currentAuthTable is the table the watch last read, or a fresh read
// before the watch has one.
func (m *Mon) currentAuthTable(ctx context.Context) (*osdpb.AuthTable, error) {
	if t := m.authTable.Load(); t != nil {
		return t, nil
	}
	t, err := m.auth.listTable(ctx)
	if err != nil {
		return nil, err
	}
	m.adoptAuthTable(t)
	return m.authTable.Load(), nil
}

// adoptAuthTable keeps t if it is newer than the one held, and pushes it
// to the auth subscribers.
func (m *Mon) adoptAuthTable(t *osdpb.AuthTable) {
	for {
		cur := m.authTable.Load()
		if cur != nil && cur.Revision >= t.Revision {
			return
		}
		if m.authTable.CompareAndSwap(cur, t) {
			break
		}
	}
	m.keeper.Note(monclient.AuthTable(t))
	full, public := &osdpb.MonAuth{Table: t}, &osdpb.MonAuth{Table: withoutS3Keys(t)}
	m.pushTo(true, osdpb.MsgType_MSG_MON_AUTH, func(c *msgr.Conn) proto.Message {
		if m.mayReadS3Secrets(c.Peer()) {
			return full
		}
		return public
	})
	m.refreshKeyrings(t) // after the push, which its etcd read must not delay
}

// watchAuth follows the auth records in etcd, reading the table again
// after every change, until the mon closes.
func (m *Mon) watchAuth() {
	backoff := newBackoff()
	for m.ctx.Err() == nil {
		t, err := m.auth.listTable(m.ctx)
		if err != nil {
			m.log.Warn("reading the auth table from etcd", "err", err)
			backoff.wait(m.ctx)
			continue
		}
		m.adoptAuthTable(t)
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(m.ctx))
		wch := m.cli.Watch(wctx, m.k.authPrefix(), clientv3.WithPrefix(), clientv3.WithRev(t.Revision+1))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				m.log.Debug("auth watch ended", "err", err)
				break
			}
			if len(wr.Events) == 0 {
				continue
			}
			t, err := m.auth.listTable(m.ctx)
			if err != nil {
				m.log.Warn("reading the auth table from etcd", "err", err)
				break
			}
			m.adoptAuthTable(t)
			backoff.reset()
		}
		wcancel()
		backoff.wait(m.ctx)
	}
}
