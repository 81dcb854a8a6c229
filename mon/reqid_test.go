package mon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// replyDropper drops the mon's next n command replies, as a network that
// loses them would: the client hears nothing and sends the command again.
// sent counts the command replies it let through.
type replyDropper struct{ left, sent atomic.Int32 }

func (d *replyDropper) drop(t osdpb.MsgType) bool {
	if t != osdpb.MsgType_MSG_MON_COMMAND_REPLY {
		return false
	}
	for n := d.left.Load(); n > 0; n = d.left.Load() {
		if d.left.CompareAndSwap(n, n-1) {
			return true
		}
	}
	d.sent.Add(1)
	return false
}

// lossyMon is a mon whose command replies d drops on demand, and a client
// that gives up on a reply after 300ms and sends again.
func lossyMon(t *testing.T, cfg Config) (*Mon, *monclient.Client, *replyDropper) {
	t.Helper()
	d := &replyDropper{}
	cfg.dropReply = d.drop
	m := startTestMon(t, cfg)
	return m, impatientClient(t, m.Addr()), d
}

// impatientClient is a client of the mons at addrs that gives up on a
// reply after 300ms and sends again.
func impatientClient(t *testing.T, addrs ...string) *monclient.Client {
	t.Helper()
	c, err := monclient.New(context.Background(), monclient.Options{Addrs: addrs, Name: "client.test",
		Logger: testLogger().With("test", "monclient"), Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// lost runs cmd with its first reply dropped: the client's retry gets
// the answer.
func lost(t *testing.T, c *monclient.Client, d *replyDropper, cmd *osdpb.MonCommand) (*osdpb.MonCommandReply, error) {
	t.Helper()
	d.left.Store(1)
	rep, err := c.Command(ctxFor(t, 20*time.Second), cmd)
	if n := d.left.Load(); n != 0 {
		t.Fatalf("%s: the reply was not dropped (%d drops left)", cmd.Prefix, n)
	}
	return rep, err
}

// monWithUser is a mon (its config as cfg leaves it), a client of it, and
// the entity client.u, made without a request id.
func monWithUser(t *testing.T, cfg func(*Config)) (*Mon, *monclient.Client) {
	t.Helper()
	c := testConfig(startTestEtcd(t), "a")
	if cfg != nil {
		cfg(&c)
	}
	m := startTestMon(t, c)
	if _, err := m.command(ctxFor(t, 10*time.Second), authCmd("auth add", "client.u", nil)); err != nil {
		t.Fatal(err)
	}
	return m, newTestClient(t, nil, m.Addr())
}

func authEntry(t *testing.T, c *monclient.Client, entity string) (AuthEntry, *osdpb.MonCommandReply) {
	t.Helper()
	rep := mustCommand(t, c, authCmd("auth get", entity, nil))
	var e AuthEntry
	if err := json.Unmarshal([]byte(rep.Output), &e); err != nil {
		t.Fatalf("auth get %s: %q: %v", entity, rep.Output, err)
	}
	return e, rep
}

// TestLostReplyAppliedOnce: a command whose reply is lost, and which the
// client therefore sends again, is applied once, and the retry answers
// what the first attempt did: "auth add" creates the entity (not "exists"),
// "auth s3-key add" makes one key (the one it prints), "osd out" makes one
// epoch, "auth rm" removes (not "no such entity").
func TestLostReplyAppliedOnce(t *testing.T) {
	e := startTestEtcd(t)
	m, c, d := lossyMon(t, testConfig(e, "a"))

	rep, err := lost(t, c, d, authCmd("auth add", "client.u", map[string]string{"osd": "allow r"}))
	if err != nil {
		t.Fatalf("auth add with its reply lost: %v", err)
	}
	_, get := authEntry(t, c, "client.u")
	if !bytes.Equal(rep.Keyring, get.Keyring) || len(rep.Keyring) == 0 {
		t.Fatal("auth add's retry answered with another keyring than the one the entity holds")
	}

	rep, err = lost(t, c, d, authCmd("auth s3-key add", "client.u", nil))
	if err != nil {
		t.Fatalf("s3-key add with its reply lost: %v", err)
	}
	var k S3KeyEntry
	if err := json.Unmarshal([]byte(rep.Output), &k); err != nil {
		t.Fatal(err)
	}
	if ent, _ := authEntry(t, c, "client.u"); len(ent.S3Keys) != 1 || ent.S3Keys[0] != k {
		t.Fatalf("after one s3-key add, retried: keys %+v; the reply named %+v", ent.S3Keys, k)
	}

	mustBoot(t, c, bootOf(0))
	before := m.Map().Epoch()
	rep, err = lost(t, c, d, &osdpb.MonCommand{Prefix: "osd out", Ids: []uint32{0}})
	if err != nil {
		t.Fatalf("osd out with its reply lost: %v", err)
	}
	var res commandResult
	if err := json.Unmarshal([]byte(rep.Output), &res); err != nil || len(res.Changed) != 1 || res.Epoch != before+1 {
		t.Fatalf("osd out, retried: %q %v; want osd.0 changed at epoch %d", rep.Output, err, before+1)
	}
	if mp := m.Map(); mp.Epoch() != before+1 || osdOf(t, mp, 0).In {
		t.Fatalf("after one osd out, retried: epoch %d (want %d), in %v", mp.Epoch(), before+1, osdOf(t, mp, 0).In)
	}

	if _, err := lost(t, c, d, authCmd("auth rm", "client.u", nil)); err != nil {
		t.Fatalf("auth rm with its reply lost: %v", err)
	}
}

// TestLostReplyRetriedAtAnotherMon: the retry of a command whose reply
// one mon lost goes to another mon, which answers from the record the
// first one wrote: one key pair, and the reply names it.
func TestLostReplyRetriedAtAnotherMon(t *testing.T) {
	e := startTestEtcd(t)
	da, db := &replyDropper{}, &replyDropper{}
	ca, cb := testConfig(e, "a"), testConfig(e, "b")
	ca.dropReply, cb.dropReply = da.drop, db.drop
	a, b := startTestMon(t, ca), startTestMon(t, cb)
	if _, err := a.command(ctxFor(t, 10*time.Second), authCmd("auth add", "client.u", nil)); err != nil {
		t.Fatal(err)
	}
	c := impatientClient(t, a.Addr(), b.Addr()) // a first: no leader is known yet
	rep, err := lost(t, c, da, authCmd("auth s3-key add", "client.u", nil))
	if err != nil {
		t.Fatalf("s3-key add with its reply lost at mon.a: %v", err)
	}
	if db.sent.Load() == 0 {
		t.Fatal("mon.b did not answer the retry")
	}
	var k S3KeyEntry
	if err := json.Unmarshal([]byte(rep.Output), &k); err != nil {
		t.Fatal(err)
	}
	if ent, _ := authEntry(t, c, "client.u"); len(ent.S3Keys) != 1 || ent.S3Keys[0] != k {
		t.Fatalf("after one s3-key add, retried at mon.b: keys %+v; the reply named %+v", ent.S3Keys, k)
	}
}

// TestRequestIDCopiesRace: copies of one request that the mon serves at
// once apply it once, and every copy answers with the one reply (none
// fails as busy, which would cost the client a retry).
func TestRequestIDCopiesRace(t *testing.T) {
	a, c := monWithUser(t, nil)
	cmd := authCmd("auth s3-key add", "client.u", nil)
	cmd.RequestId = monclient.NewRequestID()
	outs := make([]string, 4)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() {
			rep, err := a.command(ctxFor(t, 20*time.Second), cmd)
			if err != nil {
				t.Errorf("copy %d: %v", i, err)
				return
			}
			outs[i] = rep.Output
		})
	}
	wg.Wait()
	for _, o := range outs[1:] {
		if o != outs[0] {
			t.Fatalf("copies answered differently: %q", outs)
		}
	}
	if ent, _ := authEntry(t, c, "client.u"); len(ent.S3Keys) != 1 {
		t.Fatalf("%d copies of one s3-key add made %d keys", len(outs), len(ent.S3Keys))
	}
}

// TestRequestIDReused: an id the mon recorded for one command is refused
// for another with ErrRequestIDReused, applying nothing; an id that is
// not 16 bytes is refused as invalid.
func TestRequestIDReused(t *testing.T) {
	e := startTestEtcd(t)
	a := startTestMon(t, testConfig(e, "a"))
	c := newTestClient(t, nil, a.Addr())
	id := monclient.NewRequestID()
	first := authCmd("auth add", "client.u", map[string]string{"osd": "allow r"})
	first.RequestId = id
	mustCommand(t, c, first)
	again := mustCommand(t, c, first) // the caller's own retry, same id
	if ent, _ := authEntry(t, c, "client.u"); ent.Serial == "" || again.Keyring == nil {
		t.Fatalf("a repeat of auth add: %+v", again)
	}

	other := authCmd("auth add", "client.v", nil)
	other.RequestId = id
	_, err := c.Command(ctxFor(t, 10*time.Second), other)
	if !errors.Is(err, ops.ErrRequestIDReused) {
		t.Fatalf("another command under a used id: %v, want RequestIdReused", err)
	}
	if _, err := c.Command(ctxFor(t, 10*time.Second), authCmd("auth get", "client.v", nil)); statusOf(err) != osdpb.Status_NO_SUCH_ENTITY {
		t.Fatalf("the refused command was applied: auth get client.v: %v", err)
	}

	bad := authCmd("auth add", "client.w", nil)
	bad.RequestId = []byte{1, 2, 3}
	if _, err := c.Command(ctxFor(t, 10*time.Second), bad); statusOf(err) != osdpb.Status_INVALID_ARGUMENT {
		t.Fatalf("a 3-byte request id: %v, want InvalidArgument", err)
	}
}

// TestRequestRecordsExpire: a request's record lasts RequestTTL; after
// it, the id is free and a resent command is a new one (applied again).
func TestRequestRecordsExpire(t *testing.T) {
	a, c := monWithUser(t, func(cfg *Config) { cfg.RequestTTL = 2 * time.Second })
	cmd := authCmd("auth s3-key add", "client.u", nil)
	cmd.RequestId = monclient.NewRequestID()
	mustCommand(t, c, cmd)
	mustCommand(t, c, cmd)
	if ent, _ := authEntry(t, c, "client.u"); len(ent.S3Keys) != 1 {
		t.Fatalf("a repeat within the TTL made a key: %d keys", len(ent.S3Keys))
	}
	key := a.k.request(cmd.RequestId)
	eventually(t, 30*time.Second, "the request record expires", func() bool {
		resp, err := a.cli.Get(ctxFor(t, 5*time.Second), key)
		return err == nil && len(resp.Kvs) == 0
	})
	mustCommand(t, c, cmd)
	if ent, _ := authEntry(t, c, "client.u"); len(ent.S3Keys) != 2 {
		t.Fatalf("the id after its TTL: %d keys, want 2", len(ent.S3Keys))
	}
}

// TestRequestWithoutID: a command without an id (an older client) is
// applied every time it comes, as before request ids, and leaves no
// record.
func TestRequestWithoutID(t *testing.T) {
	a, c := monWithUser(t, nil)
	records := func() int64 {
		resp, err := a.cli.Get(ctxFor(t, 5*time.Second), a.k.request(nil), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	before := records()
	for range 2 {
		if _, err := a.command(ctxFor(t, 10*time.Second), authCmd("auth s3-key add", "client.u", nil)); err != nil {
			t.Fatal(err)
		}
	}
	if ent, _ := authEntry(t, c, "client.u"); len(ent.S3Keys) != 2 {
		t.Fatalf("two s3-key adds without an id: %d keys", len(ent.S3Keys))
	}
	if n := records(); n != before {
		t.Fatalf("commands without ids left %d request records", n-before)
	}
}

// BenchmarkCommandRequestID: what the request id costs a map-changing
// command at the mon (reading the id's record, a lease, the record in the
// map's transaction), against the same command without one.
func BenchmarkCommandRequestID(b *testing.B) {
	for _, withID := range []bool{false, true} {
		b.Run(map[bool]string{false: "without-id", true: "with-id"}[withID], func(b *testing.B) {
			e := startTestEtcd(b)
			a := startTestMon(b, testConfig(e, "a"))
			mustBoot(b, newTestClient(b, nil, a.Addr()), bootOf(0))
			ctx := context.Background()
			n := 0
			for b.Loop() {
				n++
				cmd := &osdpb.MonCommand{Prefix: "osd reweight", Ids: []uint32{0}, Weight: float64(1 + n%2)}
				if withID {
					cmd.RequestId = monclient.NewRequestID()
				}
				if _, err := a.command(ctx, cmd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRequestWithoutWriteLeavesNoLease: a command with an id that writes
// nothing (refused, or nothing to change) leaves no lease in etcd.
func TestRequestWithoutWriteLeavesNoLease(t *testing.T) {
	a, c := monWithUser(t, nil)
	leases := func() int {
		resp, err := a.cli.Leases(ctxFor(t, 5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Leases)
	}
	before := leases()
	if _, err := c.Command(ctxFor(t, 10*time.Second), authCmd("auth s3-key add", "client.nobody", nil)); statusOf(err) != osdpb.Status_NO_SUCH_ENTITY {
		t.Fatalf("s3-key add to no entity: %v", err)
	}
	mustCommand(t, c, authCmd("auth get-or-create", "client.u", nil)) // exists with these caps: no change
	if n := leases(); n != before {
		t.Fatalf("commands that wrote nothing left %d leases", n-before)
	}
	mustCommand(t, c, authCmd("auth s3-key add", "client.u", nil))
	if n := leases(); n != before+1 {
		t.Fatalf("a command that wrote its record: %d new leases, want 1", n-before)
	}
}

// requestTestTTL is the RequestTTL of tests that look for request
// records' leases: a TTL no other lease here has (sessions: 2s, OSDs: the
// grace), so that those leases are told apart.
const requestTestTTL = 777 * time.Second

// requestLeases are the leases in m's etcd granted for requestTestTTL.
func requestLeases(t *testing.T, m *Mon) []clientv3.LeaseID {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	resp, err := m.cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []clientv3.LeaseID
	for _, l := range resp.Leases {
		ttl, err := m.cli.TimeToLive(ctx, l.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.GrantedTTL == int64(requestTestTTL/time.Second) {
			ids = append(ids, l.ID)
		}
	}
	return ids
}

// recordLease is the lease that request id's record is on; it fails t
// when the id has no record.
func recordLease(t *testing.T, m *Mon, id []byte) clientv3.LeaseID {
	t.Helper()
	resp, err := m.cli.Get(ctxFor(t, 5*time.Second), m.k.request(id))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("request %x has no record", id)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestFailedRequestRevokesLease: a command with an id whose write fails
// after its record's lease was granted (here the fenced map write, once
// the mon's election key is gone) revokes that lease: it holds nothing,
// and a client that keeps failing would otherwise pile them up for
// RequestTTL each.
func TestFailedRequestRevokesLease(t *testing.T) {
	e := startTestEtcd(t)
	cfg := testConfig(e, "a")
	cfg.RequestTTL = requestTestTTL
	m := startTestMon(t, cfg)
	mustBoot(t, newTestClient(t, nil, m.Addr()), bootOf(0))
	ctx := ctxFor(t, 20*time.Second)
	if _, err := m.cli.Delete(ctx, m.k.election(), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	cmd := &osdpb.MonCommand{Prefix: "osd reweight", Ids: []uint32{0}, Weight: 3, RequestId: monclient.NewRequestID()}
	if _, err := m.command(ctx, cmd); statusOf(err) != osdpb.Status_NOT_LEADER {
		t.Fatalf("a write without the election key: %v, want NOT_LEADER", err)
	}
	if ls := requestLeases(t, m); len(ls) != 0 {
		t.Fatalf("the failed request's leases %x are left", ls)
	}
}

// racingMon is monWithUser with RequestTTL requestTestTTL, and race,
// which runs two copies of cmd (it carries a request id) so that the
// second wins: the first, its lease granted, lets the second run to the
// end before its own transaction. race returns the loser's reply and the
// winner's.
func racingMon(t *testing.T) (*Mon, *monclient.Client, func(cmd *osdpb.MonCommand) (lost, won *osdpb.MonCommandReply)) {
	t.Helper()
	ctx := ctxFor(t, 20*time.Second)
	var m *Mon
	var pending atomic.Pointer[osdpb.MonCommand] // the copy to run at the next grant
	var won *osdpb.MonCommandReply
	m, c := monWithUser(t, func(cfg *Config) {
		cfg.RequestTTL = requestTestTTL
		cfg.requestGranted = func() {
			cmd := pending.Swap(nil)
			if cmd == nil {
				return // the winning copy's own grant
			}
			var err error
			if won, err = m.command(ctx, cmd); err != nil {
				t.Errorf("the winning copy of %s: %v", cmd.Prefix, err)
			}
		}
	})
	return m, c, func(cmd *osdpb.MonCommand) (*osdpb.MonCommandReply, *osdpb.MonCommandReply) {
		t.Helper()
		won = nil
		pending.Store(cmd)
		lost, err := m.command(ctx, cmd)
		if err != nil {
			t.Fatalf("the losing copy of %s: %v", cmd.Prefix, err)
		}
		if won == nil {
			t.Fatalf("no second copy of %s ran", cmd.Prefix)
		}
		if lost.Output != won.Output || !bytes.Equal(lost.Keyring, won.Keyring) {
			t.Fatalf("the losing copy of %s answered %q, the winner %q", cmd.Prefix, lost.Output, won.Output)
		}
		return lost, won
	}
}

// onlyRecordLease fails t unless the one request lease left in m's etcd
// is the one request id's record is on.
func onlyRecordLease(t *testing.T, m *Mon, id []byte) {
	t.Helper()
	held := recordLease(t, m, id)
	if ls := requestLeases(t, m); len(ls) != 1 || ls[0] != held {
		t.Fatalf("request leases %x are left; want only the record's, %x", ls, held)
	}
}

// TestRaceLoserRevokesLease: of two copies of a request, the one whose
// transaction loses to the other's answers with the winner's reply and
// revokes the lease it granted (it holds nothing), and the winner's
// record stays on its own lease.
func TestRaceLoserRevokesLease(t *testing.T) {
	m, c, race := racingMon(t)
	cmd := authCmd("auth s3-key add", "client.u", nil)
	cmd.RequestId = monclient.NewRequestID()
	race(cmd)
	if ent, _ := authEntry(t, c, "client.u"); len(ent.S3Keys) != 1 {
		t.Fatalf("two copies of one s3-key add made %d keys", len(ent.S3Keys))
	}
	onlyRecordLease(t, m, cmd.RequestId)
}

// TestRaceLoserOfMapCommand: a map command whose copy won the race finds
// nothing to change when it edits the copy's map, and answers with the
// copy's reply (the OSD changed, at the copy's epoch), not "nothing to
// change"; it revokes its lease; the map changed once.
func TestRaceLoserOfMapCommand(t *testing.T) {
	m, c, race := racingMon(t)
	mustBoot(t, c, bootOf(0))
	before := m.Map().Epoch()
	cmd := &osdpb.MonCommand{Prefix: "osd reweight", Ids: []uint32{0}, Weight: 3, RequestId: monclient.NewRequestID()}
	lost, _ := race(cmd)
	var res commandResult
	if err := json.Unmarshal([]byte(lost.Output), &res); err != nil || len(res.Changed) != 1 || res.Epoch != before+1 {
		t.Fatalf("the losing copy answered %q (%v); want osd.0 changed at epoch %d", lost.Output, err, before+1)
	}
	if mp := m.Map(); mp.Epoch() != before+1 || osdOf(t, mp, 0).Weight != 3 {
		t.Fatalf("after two copies of one reweight: epoch %d (want %d), weight %v", mp.Epoch(), before+1, osdOf(t, mp, 0).Weight)
	}
	onlyRecordLease(t, m, cmd.RequestId)
}

// TestRaceLoserOfGetOrCreate: an "auth get-or-create" whose copy created
// the entity first finds it with the caps asked for, answers as the copy
// (its keyring), and revokes its lease.
func TestRaceLoserOfGetOrCreate(t *testing.T) {
	m, c, race := racingMon(t)
	cmd := authCmd("auth get-or-create", "client.v", map[string]string{"osd": "allow r"})
	cmd.RequestId = monclient.NewRequestID()
	lost, _ := race(cmd)
	if _, get := authEntry(t, c, "client.v"); !bytes.Equal(lost.Keyring, get.Keyring) || len(lost.Keyring) == 0 {
		t.Fatal("the losing copy answered with another keyring than the one the entity holds")
	}
	onlyRecordLease(t, m, cmd.RequestId)
}

// TestFailedRequestKeepsOwnRecord: a command with an id that fails after
// its own transaction wrote its record (etcd applied the commit, its
// answer was lost) answers with that record's reply and keeps the record
// and its lease: revoking would delete the record, and a retry would
// apply the command again.
func TestFailedRequestKeepsOwnRecord(t *testing.T) {
	cmd := authCmd("auth s3-key add", "client.u", nil)
	cmd.RequestId = monclient.NewRequestID()
	var ran *osdpb.MonCommandReply
	m, c := monWithUser(t, func(cfg *Config) {
		cfg.RequestTTL = requestTestTTL
		cfg.requestRan = func(rep *osdpb.MonCommandReply, err error) (*osdpb.MonCommandReply, error) {
			if err != nil {
				t.Errorf("the command: %v", err)
			}
			ran = rep
			return nil, errors.New("etcd's answer to the commit was lost")
		}
	})
	rep, err := m.command(ctxFor(t, 20*time.Second), cmd)
	if err != nil {
		t.Fatalf("a command whose record was written: %v", err)
	}
	if ran == nil || rep.Output != ran.Output {
		t.Fatalf("answered %q; the command's reply was %v", rep.Output, ran)
	}
	onlyRecordLease(t, m, cmd.RequestId)
	if ent, _ := authEntry(t, c, "client.u"); len(ent.S3Keys) != 1 {
		t.Fatalf("one s3-key add made %d keys", len(ent.S3Keys))
	}
}
