package osd

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ospreystore/osprey/internal/buildinfo"
	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// identity is what an OSD keeps in its data directory across restarts, as
// Ceph's OSD keeps whoami, fsid and its uuid: the mon gives the id once, by
// uuid, and refuses a boot that claims it with another uuid.
type identity struct {
	UUID string `json:"uuid"`
	ID   *int64 `json:"id,omitempty"`
	FSID string `json:"fsid,omitempty"`
}

const identityFile = "identity.json"

func loadIdentity(dir string) (identity, error) {
	var id identity
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return id, err
	default:
		if err := json.Unmarshal(b, &id); err != nil || id.UUID == "" {
			return id, fmt.Errorf("osd: %s: not an OSD identity (%v)", filepath.Join(dir, identityFile), err)
		}
		return id, nil
	}
	var u [16]byte
	rand.Read(u[:])
	u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80
	id.UUID = fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
	return id, saveIdentity(dir, id)
}

// saveIdentity writes the file atomically: a crash leaves the old or the
// new one, never half of it.
func saveIdentity(dir string, id identity) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(id, "", "  ")
	tmp := filepath.Join(dir, identityFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, identityFile)); err != nil {
		return err
	}
	return auth.SyncDir(dir) // the id, with the keyring, survives a power cut
}

// canListen checks that a TCP address (tcp://HOST:PORT) can be listened
// on now (its port free), so that a new OSD fails before it takes an id
// rather than after, leaving a never-booted entry in the map. Other
// transports are found out when the messenger listens.
func canListen(addr string) error {
	hostport, ok := strings.CutPrefix(addr, "tcp://")
	if !ok {
		return nil
	}
	ln, err := net.Listen("tcp", hostport)
	if err != nil {
		return err
	}
	return ln.Close()
}

// keyringFile is the OSD's own keyring in its data directory, as Ceph's
// /var/lib/ceph/osd/ceph-N/keyring.
const keyringFile = "keyring"

// joinCluster runs before Start builds anything with the OSD's name: it
// finds (or gets from the mon) the OSD's id and, unless NoAuth, its own
// keyring, and returns the monclient the OSD keeps, subscribed to the
// auth table for authz.
func joinCluster(ctx context.Context, cfg *Config, authz *authTables, onMap func(*placement.Map)) (*monclient.Client, identity, *auth.Keyring, error) {
	ident, err := loadIdentity(cfg.DataDir)
	if err != nil {
		return nil, ident, nil, err
	}
	if ident.ID == nil && (cfg.PublicListen == "" || cfg.ClusterListen == "") {
		// Before the mon gives an id: an OSD that cannot start for want
		// of addresses must not leave one behind, never booted.
		return nil, ident, nil, fmt.Errorf("osd: %s holds no OSD yet: a new OSD needs addresses to listen on (--public and --cluster)", cfg.DataDir)
	}
	if ident.ID == nil {
		for _, a := range []string{cfg.PublicListen, cfg.ClusterListen} {
			if err := canListen(a); err != nil {
				return nil, ident, nil, fmt.Errorf("osd: a new OSD cannot listen on %s (before the mon gives it an id): %w", a, err)
			}
		}
	}
	opts := monclient.Options{Addrs: cfg.Mon, Name: msgr.EntityName("client.osd-" + ident.UUID[:8]),
		Transports: cfg.Transports, Logger: cfg.Logger, OnMap: onMap}
	var own *auth.Keyring
	if cfg.NoAuth {
		cfg.Logger.Warn("authentication is off (NoAuth): this OSD believes any name a peer claims; for tests and closed networks only")
	} else {
		if own, err = ownKeyring(cfg, ident); err != nil {
			return nil, ident, nil, err
		}
		if own == nil {
			if own, err = createOSD(ctx, cfg, &ident); err != nil {
				return nil, ident, nil, err
			}
		}
		opts.Name, opts.Keyring, opts.OnAuth, opts.Modes = "", own, authz.note, cfg.ClusterModes
	}
	mc, err := monclient.New(ctx, opts)
	if err != nil {
		return nil, ident, nil, err
	}
	if own != nil {
		authz.Refresh = mc.FetchAuth
	}
	if ident.ID == nil {
		rep, err := mc.Command(ctx, &osdpb.MonCommand{Prefix: "osd create", Uuid: ident.UUID, Fsid: ident.FSID})
		if err == nil && len(rep.Ids) != 1 {
			err = fmt.Errorf("osd create: the mon gave %d ids", len(rep.Ids))
		}
		if err != nil {
			mc.Close()
			return nil, ident, nil, fmt.Errorf("osd: getting an id from the mon: %w", err)
		}
		n := int64(rep.Ids[0])
		ident.ID = &n
		if err := saveIdentity(cfg.DataDir, ident); err != nil {
			mc.Close()
			return nil, ident, nil, err
		}
	}
	cfg.ID = uint32(*ident.ID)
	return mc, ident, own, nil
}

// ownKeyring is the OSD's own keyring: DataDir/keyring, or Config.Keyring
// if that is an OSD's; nil for a new OSD that has only a bootstrap key.
func ownKeyring(cfg *Config, ident identity) (*auth.Keyring, error) {
	path := filepath.Join(cfg.DataDir, keyringFile)
	k, err := auth.LoadKeyring(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if cfg.Keyring != nil && strings.HasPrefix(cfg.Keyring.Entity, "osd.") {
			k = cfg.Keyring
		}
	case err != nil:
		return nil, fmt.Errorf("osd: %w", err)
	}
	if k == nil {
		if cfg.Keyring == nil {
			return nil, errors.New("osd: authentication needs a keyring: a bootstrap key (osprey osd --keyring client.bootstrap-osd.keyring) for a new OSD, or the OSD's own in DATA/keyring; or turn authentication off (--auth none)")
		}
		return nil, nil
	}
	if ident.ID == nil {
		return nil, fmt.Errorf("osd: %s's keyring, but %s has no OSD id yet: start a new OSD with a bootstrap key", k.Entity, cfg.DataDir)
	}
	if want := ops.OSDName(uint32(*ident.ID)); k.Entity != want {
		return nil, fmt.Errorf("osd: the keyring is %s's, but this is %s (%s)", k.Entity, want, cfg.DataDir)
	}
	return k, nil
}

// createOSD gets a new OSD's id and keyring from the mon with the
// bootstrap key (or an admin's) in Config.Keyring, as Ceph's "osd new"
// with client.bootstrap-osd: the keyring is kept as DataDir/keyring, then
// the id, so a crash between the two gets the same id and keyring again
// (the mon answers a repeated create of one uuid with the same id, and
// get-or-create with the same keyring).
func createOSD(ctx context.Context, cfg *Config, ident *identity) (*auth.Keyring, error) {
	mc, err := monclient.New(ctx, monclient.Options{Addrs: cfg.Mon, Keyring: cfg.Keyring, Modes: cfg.ClusterModes,
		Transports: cfg.Transports, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	defer mc.Close()
	rep, err := mc.Command(ctx, &osdpb.MonCommand{Prefix: "osd create", Uuid: ident.UUID, Fsid: ident.FSID})
	if err == nil && len(rep.Ids) != 1 {
		err = fmt.Errorf("osd create: the mon gave %d ids", len(rep.Ids))
	}
	if err != nil {
		return nil, fmt.Errorf("osd: creating the OSD at the mon as %s: %w", cfg.Keyring.Entity, err)
	}
	k, err := auth.ParseKeyring(rep.Keyring)
	if err != nil {
		return nil, fmt.Errorf("osd: the keyring osd create gave: %w", err)
	}
	if want := ops.OSDName(rep.Ids[0]); k.Entity != want {
		return nil, fmt.Errorf("osd: osd create gave id %d but %s's keyring", rep.Ids[0], k.Entity)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, err
	}
	if err := auth.WriteKeyringFile(filepath.Join(cfg.DataDir, keyringFile), rep.Keyring); err != nil {
		return nil, err
	}
	n := int64(rep.Ids[0])
	ident.ID = &n
	return k, saveIdentity(cfg.DataDir, *ident)
}

// boot tells the mon we are up, at the addresses we listen on, and adopts
// the map that says so.
func (o *OSD) boot(ctx context.Context) error {
	pub, clu := o.advertised()
	rep, err := o.mon.Boot(ctx, &osdpb.MonBoot{Fsid: o.ident.FSID, HasId: true, Id: o.id, Uuid: o.ident.UUID, Features: placement.Features, Version: buildinfo.Version(),
		PublicAddr: pub, ClusterAddr: clu, Weight: o.cfg.Weight, Host: o.cfg.Host, Fullness: o.checkSpace(),
		FreshStore: o.freshStore.Load()})
	if err != nil {
		return fmt.Errorf("osd.%d: boot: %w", o.id, err)
	}
	if o.freshStore.Load() {
		if err := o.st.SetFreshMark(ctx, false); err != nil {
			return err
		}
	}
	if o.ident.FSID == "" {
		o.ident.FSID = rep.Fsid
		if err := saveIdentity(o.cfg.DataDir, o.ident); err != nil {
			return err
		}
	}
	o.setReadLease(time.Duration(rep.HeartbeatGraceNanos))
	if rep.Map != nil {
		o.bootEpoch.Store(rep.Map.GetEpoch())
		if err := o.adoptMap(rep.Map); err != nil {
			return err
		}
	}
	// Only now does our map say when our store was made (born), which
	// our answers to PG queries carry.
	o.freshStore.Store(false)
	if rep.RelayedBy != "" {
		o.log.Info("booted through a standby mon: the leader is out of our reach", "epoch", o.Map().Epoch(), "fsid", o.ident.FSID, "via", "mon."+rep.RelayedBy)
	} else {
		o.log.Info("booted", "epoch", o.Map().Epoch(), "fsid", o.ident.FSID)
	}
	return nil
}

// advertised are the addresses peers and clients reach us at: the bound
// ones, unless Config gives others (a wildcard bind).
func (o *OSD) advertised() (pub, clu string) {
	pub, clu = o.pubAddr, o.cluAddr
	if o.cfg.PublicAddr != "" {
		pub = o.cfg.PublicAddr
	}
	if o.cfg.ClusterAddr != "" {
		clu = o.cfg.ClusterAddr
	}
	return pub, clu
}

// monLoop beacons to the mon (which keeps our lease in etcd alive) and
// boots again when a map says we are down while we are not, as Ceph's
// "wrongly marked me down".
func (o *OSD) monLoop() {
	t := time.NewTicker(o.cfg.BeaconInterval)
	defer t.Stop()
	// The first beacon goes at once, not an interval after the boot: the
	// mon's rates take their base from it, so a backfill that starts with
	// the boot (a new OSD's) shows in them, and the PGs we lead show their
	// states a beacon sooner.
	for first := true; ; first = false {
		if !first {
			select {
			case <-o.monCtx.Done():
				return
			case <-o.rebootCh:
				o.rebootIfDown()
				continue
			case <-t.C:
			}
		}
		o.checkDiskStall()
		ctx, cancel := context.WithTimeout(o.monCtx, o.cfg.BeaconInterval*2)
		err := o.mon.Beacon(ctx, o.beacon())
		cancel()
		if err == nil {
			o.beaconTaken.Store(time.Now().UnixNano())
		}
		var oe *ops.Error
		if errors.As(err, &oe) && oe.Status == osdpb.Status_SERVICE_UNAVAILABLE {
			o.rebootIfDown()
		} else if err != nil && o.monCtx.Err() == nil {
			o.log.Warn("beacon to the mon", "err", err)
		}
	}
}

func (o *OSD) rebootIfDown() {
	if info, ok := o.Map().OSD(o.id); ok && info.Up || o.diskStalled.Load() {
		return
	}
	if !o.mayBootAgain(time.Now()) {
		return
	}
	o.log.Warn("the map has us down; booting again", "epoch", o.Map().Epoch())
	ctx, cancel := context.WithTimeout(o.monCtx, 30*time.Second)
	defer cancel()
	if err := o.boot(ctx); err != nil {
		if o.monCtx.Err() == nil {
			o.log.Warn("boot", "err", err)
		}
		return
	}
	if o.stallMarked.Swap(false) {
		// A new incarnation: our PGs peer again and leases are granted
		// anew, so the promise the stalled one made (no reads while its
		// successors, not waiting for its leases, serve) is kept.
		o.noReads.Store(false)
	}
}

// mayBootAgain says whether an OSD found marked down at now boots again:
// not if it was marked down more than Config.MaxMarkdownCount times within
// MaxMarkdownPeriod, until that period since the first of them has passed
// (logged once, at the start of the hold). A markdown counts once, however
// many boots it takes to come back up (a boot the mon could not take is
// tried again at each beacon): one per boot that succeeded (bootEpoch), as
// Ceph counts the map's up-to-down changes. monLoop's goroutine only.
func (o *OSD) mayBootAgain(now time.Time) bool {
	if until := o.heldDown.Load(); until != 0 {
		if now.UnixNano() < until {
			return false
		}
		o.heldDown.Store(0)
		o.log.Info("the markdown period has passed; booting again")
		return true // its markdown is counted
	}
	booted := o.bootEpoch.Load()
	if o.stallMarked.Load() {
		// Our own markdown for a stuck disk (checkDiskStall): not the
		// flapping the bound is for, whose advice (the cluster network)
		// would mislead.
		o.markdownOf = booted
		return true
	}
	if o.cfg.MaxMarkdownCount < 0 || booted == o.markdownOf {
		return true // no bound, or a boot of this markdown tried again
	}
	o.markdownOf = booted
	o.markdowns = append(slices.DeleteFunc(o.markdowns, func(t time.Time) bool { return now.Sub(t) >= o.cfg.MaxMarkdownPeriod }), now)
	if len(o.markdowns) <= o.cfg.MaxMarkdownCount {
		return true
	}
	until := o.markdowns[0].Add(o.cfg.MaxMarkdownPeriod)
	o.heldMarkdowns.Store(int32(len(o.markdowns)))
	o.heldDown.Store(until.UnixNano())
	o.log.Error("marked down too often: staying down (check this OSD's cluster network: its peers report it unreachable while the mon hears it; restart the OSD to boot at once)",
		"markdowns", len(o.markdowns), "period", o.cfg.MaxMarkdownPeriod, "until", until.Format(time.RFC3339))
	return false
}

// HeldDownUntil is until when this OSD stays down for having been marked
// down too often (Config.MaxMarkdownCount); zero while it is not held.
func (o *OSD) HeldDownUntil() time.Time {
	if n := o.heldDown.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// checkDiskStall gives up our PGs while the data disk is stuck: past
// DiskStallTimeout we serve no more reads (a successor need not wait out
// our read leases: we are dead to the map) and ask the mon to mark us
// down, again at each beacon while the map has us up; once the disk
// answers the next beacon boots us, and reads come back with the boot.
// An OSD whose disk hangs would otherwise stay up, its heartbeats
// answered, every op on its PGs stuck behind the disk and every write it
// replicates failing after RepTimeout. monLoop's goroutine only, so no
// boot of ours races the request.
func (o *OSD) checkDiskStall() {
	if o.cfg.DiskStallTimeout < 0 {
		return
	}
	d, what := o.st.DiskStall()
	switch {
	case d > o.cfg.DiskStallTimeout:
		if !o.diskStalled.Swap(true) {
			o.log.Error("the data disk is stuck: serving no more reads, asking to be marked down until it answers",
				"op", what, "for", d.Round(time.Second), "disk_stall_timeout", o.cfg.DiskStallTimeout)
		}
		o.noReads.Store(true)
		o.stallMarked.Store(true)
		o.markMeDown(o.monCtx)
	case d == 0 && o.stallMarked.Load():
		// Reads stay off until we boot again (rebootIfDown): we asked to
		// be marked dead, so successors may be serving without waiting
		// for our leases. An ask that has not taken effect (our map still
		// has us up) is made again at each beacon, so that we come back
		// through a boot; markMeDown asks nothing once we are down.
		if o.diskStalled.Swap(false) {
			o.log.Warn("the data disk answers again: booting once marked down")
		}
		o.markMeDown(o.monCtx)
	}
}

// markDownWait bounds how long a stopping OSD waits for the mon to mark
// it down: many round trips to a live mon, and little delay to a stop
// that finds no mon answering (the grace then marks it down, as after a
// crash).
const markDownWait = time.Second

// markMeDown asks the mon to mark us down now, as a Ceph OSD sends
// MOSDMarkMeDown when it stops: clients and peers then turn to the PGs'
// new acting sets at once instead of sending to an OSD that is gone
// until the mon's heartbeat grace passes. We still serve meanwhile, so
// nothing sent before the new map arrives is refused. Best effort, for at
// most markDownWait. REQUIRES: monLoop has returned, or this is its
// goroutine, so no boot of ours comes after the request and marks us up
// again.
func (o *OSD) markMeDown(ctx context.Context) {
	mp := o.Map()
	if info, ok := mp.OSD(o.id); !ok || !info.Up {
		return // down already: nothing to ask
	}
	ctx, cancel := context.WithTimeout(ctx, markDownWait)
	defer cancel()
	start := time.Now()
	epoch, err := o.mon.MarkMeDown(ctx, &osdpb.MonMarkMeDown{Fsid: mp.FSID(), Id: o.id, Uuid: o.ident.UUID, Epoch: mp.Epoch()})
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		o.log.Warn("the mon did not mark us down; its heartbeat grace or our peers' reports will", "waited", took, "err", err)
		return
	}
	if epoch == 0 {
		o.log.Info("a standby mon relays our mark-down to the leader, which we cannot reach", "took", took)
		return
	}
	o.log.Info("the mon marked us down", "epoch", epoch, "took", took)
}

// onMonMap adopts a map the mon pushed.
func (o *OSD) onMonMap(m *placement.Map) {
	if info, ok := m.OSD(o.id); ok && info.Up && o.bootEpoch.Load() != 0 && info.UpFrom > o.bootEpoch.Load() {
		if pub, clu := o.advertised(); info.PublicAddr != pub || info.ClusterAddr != clu {
			// Another daemon booted as us since we did (a copy of our
			// data directory started elsewhere): two of us would share
			// our peers' sessions and keep the id up after either dies.
			// The newer one stands, as a Ceph OSD stops once its map
			// shows it at another address.
			o.fatal(fmt.Errorf("another daemon booted as osd.%d at %s (epoch %d, up from %d; we booted at %d at %s)",
				o.id, info.PublicAddr, m.Epoch(), info.UpFrom, o.bootEpoch.Load(), pub))
			return
		}
	}
	if err := o.adoptMap(m.Proto()); err != nil {
		o.log.Warn("map from the mon", "epoch", m.Epoch(), "err", err)
		return
	}
	if info, ok := m.OSD(o.id); ok && !info.Up {
		select {
		case o.rebootCh <- struct{}{}:
		default:
		}
	}
}

// beacon says what our PGs are doing: one PGStat per PG we lead.
func (o *OSD) beacon() *osdpb.MonBeacon {
	mp := o.Map()
	b := &osdpb.MonBeacon{Fsid: o.ident.FSID, Id: o.id, Uuid: o.ident.UUID, Epoch: mp.Epoch(),
		RecoveryBytes: o.recoveredBytes.Load(), Ops: o.opsServed.Load(), Fullness: o.checkSpace(),
		ClientReadBytes: o.clientReadBytes.Load(), ClientWriteBytes: o.clientWriteBytes.Load(),
		ScrubErrors: o.scrub.unrepaired()}
	w := o.st.WALFsync()
	b.WalSyncs, b.WalSyncNanos = w.Count, uint64(w.Sum*1e9)
	if sp := o.space.Load(); sp != nil {
		b.UsedBytes, b.AvailBytes = sp.Used(), sp.Avail
	}
	for p := range mp.Pools() {
		for pg, role := range mp.PGsOf(p.Id, o.id) {
			if role.IsPrimary() {
				b.Pgs = append(b.Pgs, o.pgStat(mp, p, pg))
			}
		}
	}
	// Counted at every beacon: one seek per PG held, and a count kept
	// from before would not see copies made since ("osd safe-to-destroy"
	// must not take an old nothing for now's).
	if held, err := o.st.HeldPGs(o.ctx); err == nil {
		n := uint32(len(held))
		if slices.Contains(held, placement.MetaPG) {
			n-- // every OSD holds the bucket records; they are not data
		}
		b.PgsHeld = &n
	}
	o.noteSlow(b)
	o.lastBeacon.Store(b)
	return b
}

// pgStat is the state of a PG we lead, in Ceph's words, from what we know
// of it: our own log and objects, and where each replica said its log
// ends. A replica we have not heard from since we started, or that is
// behind us, is recovering (backfilling when it has nothing yet); its
// missing copies count as degraded objects, as do the copies of members
// the map lacks (undersized).
func (o *OSD) pgStat(mp *placement.Map, pool *osdpb.Pool, pg uint32) *osdpb.PGStat {
	st := &osdpb.PGStat{Pool: pool.Id, Pg: pg, Epoch: mp.Epoch()}
	acting := mp.ActingSet(pool.Id, pg)
	sid := storePG(pool.Id, pg)
	ps, err := o.pgOf(sid)
	if err != nil {
		st.State = "unknown"
		return st
	}
	last, _, err := o.st.PGInfo(o.ctx, sid)
	if err != nil {
		st.State = "unknown"
		return st
	}
	st.Last = last
	st.Inconsistent = o.inconsistentIn(sid)
	// Before the early returns: a remapped PG whose old members went
	// down (peered) may be filled too, and then its up set must act.
	st.UpFilled = ps.upFilledAt.Load() == mp.Epoch()
	if bf := ps.backfilling.Load(); bf != nil {
		st.Filling = *bf
	}
	objects := uint64(0)
	if c, err := o.st.PGStats(o.ctx, sid); err == nil && c.Objects > 0 {
		objects = uint64(c.Objects)
		st.Bytes = uint64(max(c.Bytes, 0))
	}
	st.Objects = objects
	if name := pgStateName(ps); name != "" {
		// Peering, down or incomplete, as its machine says; or peering
		// while the machine is still being brought to the new map.
		st.State = name
		return st
	}
	if ps.peering.Load() {
		st.State = "peering"
		return st
	}
	missing := int(pool.Size) - len(acting)
	st.Degraded = uint64(max(missing, 0)) * objects
	if len(acting) < placement.MinSize(pool) {
		st.State = "undersized+degraded+peered"
		return st
	}
	// Enough members, but fewer than min_size with a whole copy: the
	// others are being backfilled, and the machine takes no writes until
	// one is done (Ceph's "backfilling+peered").
	peered := machinePeered(ps)
	tokens := []string{"active"}
	if peered {
		tokens = nil
	}
	recovering, backfilling, recoveryFull, backfillFull := false, peered, false, false
	degraded := peered // an acting member behind, or being backfilled
	// With a pg_temp entry in force, the up set's other members are
	// filled too: what they lack is misplaced (the acting set holds it),
	// not degraded.
	for _, id := range mp.Members(pool.Id, pg)[1:] {
		filling := !slices.Contains(acting, id)
		at, known := ps.peerAt(id)
		if last.GetSeq() == 0 || (known && (versionLE(last, at) || ps.inFlightTo(id, at, last))) {
			continue // caught up, or short only of writes on their way to it
		}
		// Ask it where it is (and make it catch up): its answer is what
		// turns this PG clean. A replica that came back while we were
		// not looking would otherwise stay "behind" until the next write.
		o.sendSync(mp.Epoch(), id, pool.Id, pg, last)
		behind := objects
		lvl := o.peerFullness(mp, id)
		if known && at.GetSeq() > 0 {
			recovering = true
			recoveryFull = recoveryFull || lvl >= osdpb.Fullness_FULLNESS_FULL
			behind = min(objects, last.GetSeq()-min(at.GetSeq(), last.GetSeq()))
		} else {
			backfilling = true
			backfillFull = backfillFull || lvl >= osdpb.Fullness_FULLNESS_BACKFILLFULL
		}
		if filling {
			st.Misplaced += behind
		} else {
			st.Degraded += behind
			degraded = true
		}
	}
	// Ceph's words: a copy that waits for room on a full replica is
	// backfill_toofull or recovery_toofull, not backfilling or recovering.
	switch {
	case backfillFull:
		tokens = append(tokens, "backfill_toofull")
	case backfilling:
		tokens = append(tokens, "backfilling")
	case recoveryFull:
		tokens = append(tokens, "recovery_toofull")
	case recovering:
		tokens = append(tokens, "recovering")
	}
	if missing > 0 {
		tokens = append(tokens, "undersized")
	}
	switch {
	case degraded || missing > 0:
		tokens = append(tokens, "degraded")
	case !recovering && !backfilling:
		tokens = append(tokens, "clean")
	}
	if mp.Remapped(pool.Id, pg) {
		tokens = append(tokens, "remapped")
	}
	if st.Inconsistent > 0 {
		tokens = append(tokens, "inconsistent")
	}
	if peered {
		tokens = append(tokens, "peered")
	}
	tokens = append(tokens, o.leaseTokens(ps, mp)...)
	st.State = strings.Join(tokens, "+")
	return st
}

// reportFailure tells the mon we cannot reach OSD id; immediate when its
// connections are refused.
func (o *OSD) reportFailure(id uint32, silent time.Duration, immediate, alive bool) {
	if o.mon == nil {
		return
	}
	// One report of each kind per peer in flight: while the mon is away
	// the heartbeats would start one every interval per dead peer, each
	// waiting out its timeout. The next one after it carries what is new.
	key := reportKey{id, alive, immediate}
	o.reporting.mu.Lock()
	if o.reporting.inFlight[key] {
		o.reporting.mu.Unlock()
		return
	}
	if o.reporting.inFlight == nil {
		o.reporting.inFlight = map[reportKey]bool{}
	}
	o.reporting.inFlight[key] = true
	o.reporting.mu.Unlock()
	o.wg.Go(func() {
		defer func() {
			o.reporting.mu.Lock()
			delete(o.reporting.inFlight, key)
			o.reporting.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(o.ctx, 5*time.Second)
		defer cancel()
		// The map's fsid, not ident's: a new OSD's boot writes that
		// while a refused dial may already report.
		mp := o.Map()
		err := o.mon.ReportFailure(ctx, &osdpb.MonFailure{Fsid: mp.FSID(), Reporter: o.id, Target: id,
			Epoch: mp.Epoch(), FailedForNanos: int64(silent), Immediate: immediate, Alive: alive})
		if err != nil && o.ctx.Err() == nil {
			// Once per interval for all peers, with the count held back.
			o.ratelog.Log(o.log, slog.LevelWarn, "failure report", "reporting a failure to the mon", "peer", id, "err", err)
		}
	})
}

// reportKey names the failure reports of one kind about one peer:
// failed, failed at once (its connections refused: the mon marks it down
// now, which a slow report in flight must not hold back), alive again.
type reportKey struct {
	peer             uint32
	alive, immediate bool
}

// failureReports are the failure reports in flight to the mon.
type failureReports struct {
	mu       sync.Mutex
	inFlight map[reportKey]bool
}

// refusedPeers rate-limits the fast-fail reports: one per peer per second.
type refusedPeers struct {
	mu   sync.Mutex
	last map[uint32]time.Time
}

// onDialError is the cluster messenger's hook: a peer whose connections
// are refused is gone (its process died; a hung one would time out
// instead), so the writes waiting for it fail at once and the mon hears
// of it now, as with Ceph's osd_fast_fail_on_connection_refused.
func (o *OSD) onDialError(c *msgr.Conn, err error) {
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return
	}
	id, ok := osdID(c)
	if !ok {
		return
	}
	o.refused.mu.Lock()
	if o.refused.last == nil {
		o.refused.last = map[uint32]time.Time{}
	}
	recent := time.Since(o.refused.last[id]) < time.Second
	if !recent {
		o.refused.last[id] = time.Now()
	}
	o.refused.mu.Unlock()
	if recent {
		return
	}
	o.failPeer(id, "refuses connections")
	// A peer we never heard from may simply not listen yet (the cluster
	// is starting): only one that was alive and now refuses is gone.
	o.peerMu.Lock()
	ps := o.peers[id]
	seen := ps != nil && ps.lastSeen.After(o.started)
	o.peerMu.Unlock()
	if !seen {
		return
	}
	o.markPeerDown(id, "connection refused")
	if info, ok := o.Map().OSD(id); ok && info.Up {
		o.reportFailure(id, 0, true, false)
	}
}
