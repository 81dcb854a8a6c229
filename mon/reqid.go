package mon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// Commands that change something are safe to send again. The mon client
// gives each one a request id that it keeps across its retries (after a
// timeout, to another mon), and the mon writes the id with the reply in
// the same etcd transaction as the change itself. A repeat therefore finds
// either no record (nothing was applied: it applies the command) or the
// record (it gets the recorded reply, nothing is applied again), as Ceph's
// mons answer a resent command from their reply cache. Two copies that
// race both try; the guard's comparison (the id's key absent) lets one
// transaction through, and the other answers with what it recorded.

// defaultRequestTTL is Config.RequestTTL's default.
const defaultRequestTTL = 10 * time.Minute

// requestGuard is a command's request id on its way through the command's
// transaction.
type requestGuard struct {
	key    string // keys.request(id)
	digest []byte // requestDigest of the command
	// grant makes the record's lease. It is called at the first extra,
	// so that a command that writes nothing (refused, nothing to change,
	// a standby's NOT_LEADER) leaves no lease behind.
	grant func() (clientv3.LeaseID, error)
	lease clientv3.LeaseID // 0 until granted
	// unwritten: the command succeeded without writing the record, as
	// when it found nothing left to change. A copy of it that won the
	// race may be why (its change came first), and then its record, not
	// our "nothing to change", is the answer.
	unwritten bool
}

// wroteNothing notes that the command succeeds without writing its
// record. A nil guard (a command without an id) notes nothing.
func (g *requestGuard) wroteNothing() {
	if g != nil {
		g.unwritten = true
	}
}

// extra is what the command's transaction adds so that it records rep
// under the id: the id's key must be absent, and is written with rep. A
// nil guard (a command without an id) adds nothing.
func (g *requestGuard) extra(rep *osdpb.MonCommandReply) (txnExtra, error) {
	if g == nil {
		return txnExtra{}, nil
	}
	if g.lease == 0 {
		// An edit may run again after a conflict: the lease is made once.
		id, err := g.grant()
		if err != nil {
			return txnExtra{}, unavailable("etcd", err)
		}
		g.lease = id
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&osdpb.MonRequestRecord{Digest: g.digest, Reply: rep})
	if err != nil {
		return txnExtra{}, err
	}
	return txnExtra{
		cmps: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(g.key), "=", 0)},
		ops:  []clientv3.Op{clientv3.OpPut(g.key, string(b), clientv3.WithLease(g.lease))},
	}, nil
}

// join adds x's comparisons and operations to t's.
func (t txnExtra) join(x txnExtra) txnExtra {
	t.cmps = append(t.cmps, x.cmps...)
	t.ops = append(t.ops, x.ops...)
	t.epochAtLeast = max(t.epochAtLeast, x.epochAtLeast)
	return t
}

// requestDigest identifies what c asks for, its id aside: a repeat has
// the same digest, another command under the same id another.
func requestDigest(c *osdpb.MonCommand) ([]byte, error) {
	bare := proto.CloneOf(c)
	bare.RequestId = nil
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(bare)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return sum[:], nil
}

// checkRequestID refuses an id that is not one a client makes.
func checkRequestID(id []byte) error {
	if len(id) != 0 && len(id) != monclient.RequestIDLen {
		return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "request id is %d bytes; want %d", len(id), monclient.RequestIDLen)
	}
	return nil
}

// commandOnce serves a command that carries a request id: the recorded
// reply if the id has one, else the command, recording its reply.
func (m *Mon) commandOnce(ctx context.Context, c *osdpb.MonCommand) (*osdpb.MonCommandReply, error) {
	digest, err := requestDigest(c)
	if err != nil {
		return nil, err
	}
	key := m.k.request(c.RequestId)
	if rep, _, found, err := m.replay(ctx, key, c.RequestId, digest); found || err != nil {
		return rep, err
	}
	g := &requestGuard{key: key, digest: digest, grant: func() (clientv3.LeaseID, error) {
		resp, err := m.cli.Grant(ctx, int64((m.cfg.RequestTTL+time.Second-1)/time.Second))
		if err != nil {
			return 0, err
		}
		if m.cfg.requestGranted != nil {
			m.cfg.requestGranted()
		}
		return resp.ID, nil
	}}
	rep, err := m.runCommand(ctx, c, g)
	if m.cfg.requestRan != nil {
		rep, err = m.cfg.requestRan(rep, err)
	}
	if err == nil && !g.unwritten {
		return rep, nil // it wrote its record ("osd create" keeps none): no need to look
	}
	// Our transaction's guard fails when a copy of this request (at
	// another mon, or resent here) applied it first: answer as it. An
	// edit run again on the copy's map finds nothing to change and
	// succeeds instead, so a command that wrote nothing looks too.
	recorded, held, found, rerr := m.replay(ctx, key, c.RequestId, digest)
	// Our lease holds nothing unless the record found is on it: the
	// command can fail after its own transaction wrote the record (etcd's
	// answer to the commit lost), and revoking would delete that record.
	// It holds nothing when no record is found or another lease holds the
	// one found (a copy that won); leases that hold nothing would pile up
	// for RequestTTL with a client that keeps failing or racing itself.
	// When etcd could not be read we cannot tell, and keep it.
	if g.lease != 0 && (found && held != g.lease || !found && rerr == nil) {
		m.cli.Revoke(ctx, g.lease)
	}
	if found || rerr != nil {
		return recorded, rerr
	}
	if err == nil {
		return rep, nil // nothing to change, and no copy of ours changed it
	}
	return nil, err
}

// replay answers a repeat of a recorded request: found is false when the
// id has no record (it expired, or the request was never applied). lease
// is the lease the record found is on.
func (m *Mon) replay(ctx context.Context, key string, id, digest []byte) (rep *osdpb.MonCommandReply, lease clientv3.LeaseID, found bool, err error) {
	resp, err := m.cli.Get(ctx, key)
	if err != nil {
		return nil, 0, false, unavailable("etcd", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, false, nil
	}
	lease = clientv3.LeaseID(resp.Kvs[0].Lease)
	var rec osdpb.MonRequestRecord
	if err := proto.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return nil, lease, true, fmt.Errorf("mon: request record %s in etcd: %w", key, err)
	}
	if !bytes.Equal(rec.Digest, digest) {
		return nil, lease, true, ops.Errorf(osdpb.Status_REQUEST_ID_REUSED, "request id %x names another command; every command needs an id of its own", id)
	}
	rep = rec.Reply
	if rep == nil {
		rep = &osdpb.MonCommandReply{}
	}
	rep.Header = m.header(nil)
	rep.Epoch = max(rep.Epoch, m.Map().Epoch())
	return rep, lease, true, nil
}

// commandReply is a command's reply with out as its JSON output; the
// header is set when it is sent.
func commandReply(out any, keyring []byte) (*osdpb.MonCommandReply, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &osdpb.MonCommandReply{Output: string(b), Keyring: keyring}, nil
}
