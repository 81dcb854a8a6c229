package mon

import (
	"context"
	"slices"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// S3 key pairs, as radosgw-admin's "key create": an entity's record holds
// its S3 access key ids and secrets, so that an S3 user is an entity and
// its rights are the entity's caps. S3 gateways (profile s3-gateway)
// receive the secrets in their auth table and verify signatures with
// them; every other subscriber gets the table without them.

// maxS3Keys bounds the key pairs of one entity: the table every gateway
// holds grows with them.
const maxS3Keys = 32

// S3GatewayCaps are the caps of an S3 gateway's entity (osprey s3).
var S3GatewayCaps = map[string]string{auth.ServiceMon: "allow profile " + auth.ProfileS3Gateway, auth.ServiceOSD: "allow profile " + auth.ProfileS3Gateway}

// S3KeyEntry is one S3 key pair as the auth commands show it.
type S3KeyEntry struct {
	AccessKey string `json:"access_key"`
	Secret    string `json:"secret"`
}

func s3KeyEntries(ks []*osdpb.S3Key) []S3KeyEntry {
	var out []S3KeyEntry
	for _, k := range ks {
		out = append(out, S3KeyEntry{AccessKey: k.AccessKey, Secret: k.Secret})
	}
	return out
}

// addS3Key gives entity a new random key pair. The access key id must be
// unique in the cluster, so the write compares the whole auth prefix
// with the revision the uniqueness check read: any record written since
// (a key another command added) makes it read and check again.
func (s *authStore) addS3Key(ctx context.Context, entity string, then authThen) (*osdpb.AuthRecord, *osdpb.S3Key, error) {
	for range 3 {
		t, err := s.listTable(ctx)
		if err != nil {
			return nil, nil, err
		}
		rec, rev, err := s.get(ctx, entity)
		if err != nil {
			return nil, nil, err
		}
		if rec == nil {
			return nil, nil, noSuchEntity(entity)
		}
		if len(rec.S3Keys) >= maxS3Keys {
			return nil, nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%s holds %d S3 keys, the most an entity may; remove one with auth s3-key rm", entity, len(rec.S3Keys))
		}
		k := auth.NewS3Key()
		if slices.ContainsFunc(t.Entries, func(e *osdpb.AuthEntry) bool {
			return slices.ContainsFunc(e.S3Keys, func(o *osdpb.S3Key) bool { return o.AccessKey == k.AccessKey })
		}) {
			continue // 100 random bits met an existing id: draw again
		}
		key := &osdpb.S3Key{AccessKey: k.AccessKey, Secret: k.Secret}
		rec.S3Keys = append(rec.S3Keys, key)
		x, err := then.extra(rec, key)
		if err != nil {
			return nil, nil, err
		}
		x.cmps = append(x.cmps, clientv3.Compare(clientv3.ModRevision(s.k.authPrefix()), "<", t.Revision+1).WithPrefix())
		ok, err := s.put(ctx, rec, rev, x)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			return rec, key, nil
		}
	}
	return nil, nil, busy(entity)
}

// removeS3Key removes one of entity's key pairs.
func (s *authStore) removeS3Key(ctx context.Context, entity, accessKey string, then authThen) (*osdpb.AuthRecord, error) {
	return s.update(ctx, entity, func(r *osdpb.AuthRecord) error {
		i := slices.IndexFunc(r.S3Keys, func(k *osdpb.S3Key) bool { return k.AccessKey == accessKey })
		if i < 0 {
			return ops.Errorf(osdpb.Status_NO_SUCH_ENTITY, "%s holds no S3 key %s", entity, accessKey)
		}
		r.S3Keys = slices.Delete(r.S3Keys, i, i+1)
		return nil
	}, then)
}

// mayReadS3Secrets reports whether peer's auth table carries the S3
// secrets: an S3 gateway's, or an administrator's (who can read them
// with auth get anyway). Without auth nobody is authenticated, so nobody
// may.
func (m *Mon) mayReadS3Secrets(peer msgr.EntityName) bool {
	if m.cfg.NoAuth {
		return false
	}
	rec, err := m.keeper.Record(string(peer))
	if err != nil {
		return false
	}
	return rec.Caps.HasProfile(auth.ServiceMon, auth.ProfileS3Gateway) || rec.Caps.Allows(auth.ServiceMon, auth.PermExec, "")
}

// authTableFor is t as conn's peer may see it (see mayReadS3Secrets).
// It is decided again at every push and subscription, so "auth caps"
// that take a gateway's profile away stop its secrets at the next one.
func (m *Mon) authTableFor(conn *msgr.Conn, t *osdpb.AuthTable) *osdpb.AuthTable {
	if conn != nil && m.mayReadS3Secrets(conn.Peer()) {
		return t
	}
	return withoutS3Keys(t)
}

// withoutS3Keys is t with no S3 keys; t itself when it holds none.
func withoutS3Keys(t *osdpb.AuthTable) *osdpb.AuthTable {
	if !slices.ContainsFunc(t.Entries, func(e *osdpb.AuthEntry) bool { return len(e.S3Keys) > 0 }) {
		return t
	}
	out := &osdpb.AuthTable{Revision: t.Revision, Entries: make([]*osdpb.AuthEntry, len(t.Entries))}
	for i, e := range t.Entries {
		out.Entries[i] = &osdpb.AuthEntry{Entity: e.Entity, Caps: e.Caps, Serial: e.Serial}
	}
	return out
}

// S3Key returns entity's first S3 key pair, making one if it has none:
// how `osprey up` gives client.admin the pair it prints, the same one on
// every start of a cluster kept on disk.
func (m *Mon) S3Key(ctx context.Context, entity string) (auth.S3Key, error) {
	rec, _, err := m.auth.get(ctx, entity)
	if err != nil {
		return auth.S3Key{}, err
	}
	if rec == nil {
		return auth.S3Key{}, noSuchEntity(entity)
	}
	if len(rec.S3Keys) > 0 {
		return auth.S3Key{AccessKey: rec.S3Keys[0].AccessKey, Secret: rec.S3Keys[0].Secret}, nil
	}
	_, k, err := m.auth.addS3Key(ctx, entity, nil)
	if err != nil {
		return auth.S3Key{}, err
	}
	if t, err := m.auth.listTable(ctx); err == nil {
		m.adoptAuthTable(t)
	}
	return auth.S3Key{AccessKey: k.AccessKey, Secret: k.Secret}, nil
}
