package mon

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// The etcd layout. Everything lives under one prefix, so one etcd cluster
// could serve several Osprey clusters under different prefixes (tests use
// one prefix).
//
//	fsid                  the cluster's id, written once with map epoch 1
//	map                   the current ClusterMap (protobuf)
//	maps/<epoch, 20 digits>  history: the last historyKeep maps
//	alive/<id, 10 digits>    an OSD's liveness key, on its lease; value: uuid
//	stats/<id, 10 digits>    an OSD's last beacon (JSON), kept after it dies
//	mons/<name>           a mon's msgr address, on the mon's session lease
//	election/             concurrency.Election; values are msgr addresses
//	auth-ca               the cluster's CA, its key included (PEM; auth.go)
//	auth/<entity>         an entity's AuthRecord (protobuf): caps, keyring, serial
//	reqs/<id, hex>        a mon command's MonRequestRecord, on a lease of Config.RequestTTL
//	relay/<id>            a beacon a standby relayed (RelayedBeacon), on the OSD's lease
//	relayfail/<reporter>/<target>  a relayed failure report, on the reporter's lease
//	relaydown/<id>        a relayed mark-me-down, on the OSD's lease
//	relayboot/<nonce>     a relayed boot (RelayedBoot), on the standby's lease
//	relaybootrep/<nonce>  the leader's MonBootReply to it, on the same lease
const (
	defaultPrefix = "/osprey/"
	// historyKeep is how many maps "get map" can still return, as Ceph's
	// mon_min_osdmap_epochs (500).
	historyKeep = 500
)

type keys struct{ pfx string }

func (k keys) fsid() string                { return k.pfx + "fsid" }
func (k keys) current() string             { return k.pfx + "map" }
func (k keys) history(epoch uint64) string { return fmt.Sprintf("%smaps/%020d", k.pfx, epoch) }
func (k keys) historyPrefix() string       { return k.pfx + "maps/" }
func (k keys) alive(id uint32) string      { return fmt.Sprintf("%salive/%010d", k.pfx, id) }
func (k keys) alivePrefix() string         { return k.pfx + "alive/" }
func (k keys) stats(id uint32) string      { return fmt.Sprintf("%sstats/%010d", k.pfx, id) }
func (k keys) statsPrefix() string         { return k.pfx + "stats/" }
func (k keys) relay(id uint32) string      { return fmt.Sprintf("%srelay/%010d", k.pfx, id) }
func (k keys) relayPrefix() string         { return k.pfx + "relay/" }
func (k keys) relayFailure(reporter, target uint32) string {
	return fmt.Sprintf("%s%010d/%010d", k.relayFailurePrefix(), reporter, target)
}
func (k keys) relayFailurePrefix() string { return k.pfx + "relayfail/" }
func (k keys) relayMarkMeDown(id uint32) string {
	return fmt.Sprintf("%s%010d", k.relayMarkMeDownPrefix(), id)
}
func (k keys) relayMarkMeDownPrefix() string { return k.pfx + "relaydown/" }
func (k keys) relayBoot(nonce string) string { return k.relayBootPrefix() + nonce }
func (k keys) relayBootPrefix() string       { return k.pfx + "relayboot/" }
func (k keys) relayBootReply(nonce string) string {
	return k.pfx + "relaybootrep/" + nonce
}

// parseRelayFailure is relayFailure's inverse.
func (k keys) parseRelayFailure(key string) (reporter, target uint32, ok bool) {
	rest, ok := strings.CutPrefix(key, k.relayFailurePrefix())
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, false
	}
	r, err1 := strconv.ParseUint(a, 10, 32)
	t, err2 := strconv.ParseUint(b, 10, 32)
	return uint32(r), uint32(t), err1 == nil && err2 == nil
}
func (k keys) mon(name string) string { return k.pfx + "mons/" + name }
func (k keys) monsPrefix() string     { return k.pfx + "mons/" }

// knownMon is mon name's address, kept after it stops (no lease): the mons
// the cluster has, against which status counts those down (MON_DOWN),
// until "mon rm" forgets one.
func (k keys) knownMon(name string) string { return k.pfx + "monsknown/" + name }
func (k keys) knownMonsPrefix() string     { return k.pfx + "monsknown/" }

// monVersion is the build mon name runs (buildinfo.Version), on its
// session's lease as its mon key: what `osprey versions` counts.
func (k keys) monVersion(name string) string { return k.pfx + "monsversion/" + name }
func (k keys) monVersionsPrefix() string     { return k.pfx + "monsversion/" }

func (k keys) election() string          { return k.pfx + "election/" }
func (k keys) authCA() string            { return k.pfx + "auth-ca" }
func (k keys) auth(entity string) string { return k.pfx + "auth/" + entity }
func (k keys) authPrefix() string        { return k.pfx + "auth/" }
func (k keys) request(id []byte) string  { return k.pfx + "reqs/" + hex.EncodeToString(id) }

// idOf parses the OSD id at the end of an alive/ or stats/ key.
func idOf(key, prefix string) (uint32, bool) {
	s, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

// errNoChange is what an edit returns when the map already says what the
// edit wants: no new epoch is written.
var errNoChange = errors.New("mon: no change")

// errNotLeader: a fenced write found that this mon no longer leads.
var errNotLeader = ops.Errorf(osdpb.Status_NOT_LEADER, "this mon lost the leadership")

// mapStore reads and writes the cluster map in etcd. It holds no map
// itself: every update reads the current one and writes the next in one
// transaction that compares the current one's revision, so two writers
// (two mons that both believe they lead, or two goroutines) can never
// write two maps of one epoch; the loser re-reads and edits again.
type mapStore struct {
	cli  *clientv3.Client
	k    keys
	keep uint64 // history entries kept; 0 means historyKeep
}

// marshalMap encodes a map for etcd. Deterministic, so equal maps are
// equal bytes.
func marshalMap(pb *osdpb.ClusterMap) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(pb)
}

func unmarshalMap(b []byte) (*placement.Map, error) {
	var pb osdpb.ClusterMap
	if err := proto.Unmarshal(b, &pb); err != nil {
		return nil, fmt.Errorf("mon: stored map: %w", err)
	}
	return placement.FromProto(&pb)
}

// create makes the cluster, once: the fsid and the epoch-1 map pb (a
// pool and the full ratios, no OSDs). If the cluster exists it is left alone and its
// current map returned, so every mon can call create at start.
func (s *mapStore) create(ctx context.Context, pb *osdpb.ClusterMap) (*placement.Map, int64, error) {
	first, err := placement.FromProto(pb)
	if err != nil {
		return nil, 0, err
	}
	b, err := marshalMap(first.Proto())
	if err != nil {
		return nil, 0, err
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(s.k.fsid()), "=", 0)).
		Then(clientv3.OpPut(s.k.fsid(), pb.Fsid), clientv3.OpPut(s.k.current(), string(b)), clientv3.OpPut(s.k.history(1), string(b))).
		Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("mon: creating the cluster in etcd: %w", err)
	}
	if resp.Succeeded {
		return first, resp.Header.Revision, nil
	}
	return s.current(ctx)
}

// current reads the current map and the revision it was written at.
func (s *mapStore) current(ctx context.Context) (*placement.Map, int64, error) {
	resp, err := s.cli.Get(ctx, s.k.current())
	if err != nil {
		return nil, 0, fmt.Errorf("mon: reading the map from etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, errors.New("mon: etcd holds no cluster map")
	}
	mp, err := unmarshalMap(resp.Kvs[0].Value)
	if err != nil {
		return nil, 0, err
	}
	return mp, resp.Kvs[0].ModRevision, nil
}

// edit changes a copy of the current map (at the epoch it was read at;
// the new map gets the next). It returns more operations for the same
// transaction (an OSD's liveness key) and comparisons that must hold
// (the liveness key is still absent), errNoChange to write nothing, or
// another error to give up. It may be called several times, once per
// conflict, so it must not have effects of its own.
type edit func(pb *osdpb.ClusterMap) (txn txnExtra, err error)

// txnExtra is what an edit adds to the map's transaction.
type txnExtra struct {
	cmps []clientv3.Cmp
	ops  []clientv3.Op
	// epochAtLeast, when past the next epoch, is the epoch the map is
	// written at instead (leadership.catchUp).
	epochAtLeast uint64
}

// update applies e to the current map and writes the result as the next
// epoch, with its history entry, in one transaction that compares the
// current map's revision and, when fence is set, that this mon still
// holds the leader key. It retries on conflicts until ctx ends. It returns
// the new map, or the current one when e returned errNoChange.
func (s *mapStore) update(ctx context.Context, fence *clientv3.Cmp, e edit) (*placement.Map, error) {
	cur, rev, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	for {
		var extra txnExtra
		var editErr error
		next, err := cur.With(func(pb *osdpb.ClusterMap) {
			if extra, editErr = e(pb); editErr == nil {
				tidyPGTemp(pb)
			}
		})
		switch {
		case errors.Is(editErr, errNoChange):
			return cur, nil
		case editErr != nil:
			return nil, editErr
		case err != nil:
			// The edit made an invalid map: a bad request (an address
			// that is not one), not a fault of the store.
			return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%v", err)
		}
		if next, err = primePGTemp(cur, next); err != nil {
			return nil, fmt.Errorf("mon: keeping acting sets in pg_temp at epoch %d: %w", cur.Epoch()+1, err)
		}
		if extra.epochAtLeast > next.Epoch() {
			pb := next.Proto()
			pb.Epoch = extra.epochAtLeast
			if next, err = placement.FromProto(pb); err != nil {
				return nil, err
			}
		}
		b, err := marshalMap(next.Proto())
		if err != nil {
			return nil, err
		}
		cmps := append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.k.current()), "=", rev)}, extra.cmps...)
		if fence != nil {
			cmps = append(cmps, *fence)
		}
		then := append([]clientv3.Op{
			clientv3.OpPut(s.k.current(), string(b)),
			clientv3.OpPut(s.k.history(next.Epoch()), string(b)),
		}, extra.ops...)
		keep := cmp.Or(s.keep, historyKeep)
		if base := cur.Epoch() + 1; base > keep {
			// Trim the history to the last keep maps. A range, so that
			// entries a crash left behind go too. Counted from the epoch
			// the map would have had: one written past it (catchUp)
			// keeps the maps before the jump.
			then = append(then, clientv3.OpDelete(s.k.history(0), clientv3.WithRange(s.k.history(base-keep+1))))
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(then...).Else(clientv3.OpGet(s.k.current())).Commit()
		if err != nil {
			return nil, fmt.Errorf("mon: writing map epoch %d to etcd: %w", next.Epoch(), err)
		}
		if resp.Succeeded {
			return next, nil
		}
		// Someone else wrote a map, the fence fell, or an extra
		// comparison failed. Re-read the map from the Else branch.
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return nil, errors.New("mon: the cluster map vanished from etcd")
		}
		if kvs[0].ModRevision == rev {
			// The map did not move: a fence or an edit's comparison
			// failed.
			if fence != nil && !s.holds(ctx, *fence) {
				return nil, errNotLeader
			}
			return nil, errConflict
		}
		if cur, err = unmarshalMap(kvs[0].Value); err != nil {
			return nil, err
		}
		rev = kvs[0].ModRevision
	}
}

// errConflict: an edit's own comparison failed while the map stayed the
// same (an OSD's liveness key came back while we were marking it down).
var errConflict = errors.New("mon: a condition of the map change no longer holds")

// holds evaluates one comparison by itself.
func (s *mapStore) holds(ctx context.Context, c clientv3.Cmp) bool {
	resp, err := s.cli.Txn(ctx).If(c).Commit()
	return err == nil && resp.Succeeded
}

// get returns the map of one epoch from the history; 0 is the newest.
func (s *mapStore) get(ctx context.Context, epoch uint64) (*placement.Map, error) {
	if epoch == 0 {
		mp, _, err := s.current(ctx)
		return mp, err
	}
	resp, err := s.cli.Get(ctx, s.k.history(epoch))
	if err != nil {
		return nil, fmt.Errorf("mon: reading map epoch %d: %w", epoch, err)
	}
	if len(resp.Kvs) == 0 {
		oldest, _ := s.cli.Get(ctx, s.k.historyPrefix(), clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		kept := "none"
		if oldest != nil && len(oldest.Kvs) > 0 {
			kept = strings.TrimLeft(strings.TrimPrefix(string(oldest.Kvs[0].Key), s.k.historyPrefix()), "0")
		}
		return nil, ops.Errorf(osdpb.Status_NO_SUCH_KEY, "map epoch %d is not kept (trimmed or not yet written; oldest kept: %s)", epoch, kept)
	}
	return unmarshalMap(resp.Kvs[0].Value)
}
