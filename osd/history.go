package osd

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// historyKeep is how many map epochs an OSD keeps (the mon keeps as many):
// peering replays the epochs since a PG last went active, and a PG whose
// LastEpochStarted is older than the oldest kept map may end up incomplete.
const historyKeep = 500

// history is the maps this OSD adopted or fetched, by epoch, kept in the
// store too so that a restart can replay them without the mon.
type history struct {
	mu   sync.Mutex
	maps map[uint64]*placement.Map
}

// loadHistory reads the stored maps of our cluster; it returns the newest
// (nil when none), which a restart prefers to an older map file.
func (o *OSD) loadHistory(ctx context.Context) (*placement.Map, error) {
	o.hist.maps = map[uint64]*placement.Map{}
	stored, err := o.st.Maps(ctx)
	if err != nil {
		return nil, err
	}
	var newest *placement.Map
	for e, b := range stored {
		var pb osdpb.ClusterMap
		if err := proto.Unmarshal(b, &pb); err != nil || pb.Epoch != e {
			o.log.Warn("skipping a stored map that does not decode", "epoch", e, "err", err)
			continue
		}
		m, err := placement.FromProto(&pb)
		if err != nil || m.FSID() != o.cfg.Map.FSID() {
			continue // of another cluster, or invalid: fetched again if needed
		}
		o.hist.maps[e] = m
		if newest == nil || e > newest.Epoch() {
			newest = m
		}
	}
	return newest, nil
}

// remember adds m to the history (memory and store) and forgets the maps
// historyKeep epochs older than the newest.
func (o *OSD) remember(m *placement.Map) {
	o.hist.mu.Lock()
	if _, ok := o.hist.maps[m.Epoch()]; ok {
		o.hist.mu.Unlock()
		return
	}
	o.hist.maps[m.Epoch()] = m
	var trim uint64
	if m.Epoch() > historyKeep {
		trim = m.Epoch() - historyKeep + 1
		for e := range o.hist.maps {
			if e < trim {
				delete(o.hist.maps, e)
			}
		}
	}
	o.hist.mu.Unlock()
	b, err := proto.Marshal(m.Proto())
	if err == nil {
		err = o.st.PutMap(o.ctx, m.Epoch(), b)
	}
	if err == nil && trim > 0 && m.Epoch()%64 == 0 {
		err = o.st.TrimMaps(o.ctx, trim)
	}
	if err != nil && o.ctx.Err() == nil {
		o.log.Warn("storing a map", "epoch", m.Epoch(), "err", err)
	}
}

// mapAt returns the map of epoch e from the history.
func (o *OSD) mapAt(e uint64) (*placement.Map, bool) {
	o.hist.mu.Lock()
	defer o.hist.mu.Unlock()
	m, ok := o.hist.maps[e]
	return m, ok
}

// oldestWith returns the oldest epoch in the history, not before from, at
// which pool exists (the meta PG's "pool" always does): where a PG's
// machine starts when nothing narrower is known. 0 when none.
func (o *OSD) oldestWith(from uint64, pool uint32, meta bool) uint64 {
	o.hist.mu.Lock()
	defer o.hist.mu.Unlock()
	var oldest uint64
	for e, m := range o.hist.maps {
		if e < from || (oldest != 0 && e >= oldest) {
			continue
		}
		if _, ok := m.Pool(pool); ok || meta {
			oldest = e
		}
	}
	return oldest
}

// fillHistory fetches the epochs in [lo, hi) the history lacks, newest
// first, from the mon when there is one, else from the OSDs that are up in
// via. It stops at the first epoch nobody has: older ones are trimmed too.
// Bounded by ctx; what it could not get stays missing, and peering takes a
// missing epoch as one that changed nothing.
func (o *OSD) fillHistory(ctx context.Context, lo, hi uint64, via *placement.Map) {
	for e := hi - 1; e >= max(lo, 1) && e < hi; e-- {
		if _, ok := o.mapAt(e); ok {
			continue
		}
		m, err := o.fetchMap(ctx, e, via)
		if err != nil {
			if ctx.Err() == nil && o.ctx.Err() == nil {
				o.log.Warn("map history: an epoch is not available; peering takes it as unchanged", "epoch", e, "err", err)
			}
			return
		}
		o.remember(m)
	}
}

// fetchMap gets the map of epoch e from the mon, or else from the first
// OSD up in via that has it.
func (o *OSD) fetchMap(ctx context.Context, e uint64, via *placement.Map) (*placement.Map, error) {
	var pb *osdpb.ClusterMap
	err := errors.New("no mon, and no other OSD up to ask")
	if o.mon != nil {
		var rep *osdpb.MonCommandReply
		if rep, err = o.mon.Command(ctx, &osdpb.MonCommand{Prefix: "get map", Epoch: e}); err == nil {
			pb = rep.Map
		}
	} else if via != nil {
		for info := range via.OSDs() {
			if !info.Up || info.Id == o.id {
				continue
			}
			var rep osdpb.GetMapReply
			err = o.call(ctx, info.Id, osdpb.MsgType_MSG_GET_MAP, &osdpb.GetMap{Epoch: e}, &rep, nil)
			if err == nil {
				err = ops.FromReply(rep.Header)
			}
			if err == nil {
				pb = rep.Map
				break
			}
		}
	}
	if err != nil {
		return nil, err
	}
	m, err := placement.FromProto(pb)
	if err != nil {
		return nil, err
	}
	if m.Epoch() != e || m.FSID() != o.Map().FSID() {
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "asked for map epoch %d of %s, got epoch %d of %s", e, o.Map().FSID(), m.Epoch(), m.FSID())
	}
	return m, nil
}

// fillHistoryFromMon runs at boot with a mon: a new OSD (or one that was
// down for a while) fetches the epochs it lacks, so that its PGs' machines
// know who held them before it.
func (o *OSD) fillHistoryFromMon() {
	newest := o.Map().Epoch()
	ctx, cancel := context.WithTimeout(o.ctx, 30*time.Second)
	defer cancel()
	o.fillHistory(ctx, newest-min(newest, historyKeep-1), newest, nil)
}
