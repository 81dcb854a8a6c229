package dashboard

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ospreystore/osprey/mon"
)

// Source is what the dashboard samples; *mon.Mon is one.
type Source interface {
	Report(ctx context.Context) (*mon.Report, error)
}

// Options configure a Dashboard.
type Options struct {
	// Source is the mon to sample. Required.
	Source Source
	// Interval is how often it is sampled. Default 2s.
	Interval time.Duration
	// History is how far back the throughput graphs go: each OSD's ring
	// and the cluster's hold History/Interval points. Default 10m.
	History time.Duration
	// Events is how many recent events are kept. Default 200.
	Events int
	// Poll is how often the page asks for news. Default 1s.
	Poll   time.Duration
	Logger *slog.Logger
}

func (o *Options) setDefaults() error {
	if o.Source == nil {
		return errors.New("dashboard: no Source to sample")
	}
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	if o.History <= 0 {
		o.History = 10 * time.Minute
	}
	if o.Events <= 0 {
		o.Events = 200
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// sampleTimeout bounds one Report: a mon whose etcd is slow makes the
// page say the data is stale rather than hang the sampler.
const sampleTimeout = 5 * time.Second

// Dashboard samples a mon and serves what it saw (Handler).
type Dashboard struct {
	opts   Options
	points int // per ring

	mu      sync.Mutex
	last    *mon.Report
	lastAt  time.Time
	lastErr error
	errAt   time.Time
	cluster *ring
	osds    map[uint32]*ring
	events  []Event // the last opts.Events, oldest first
	seq     uint64
	// recovering: PGs have missed copies since the last all-clean sample.
	recovering bool
}

// New makes a Dashboard; Run samples.
func New(opts Options) (*Dashboard, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	n := int(opts.History / opts.Interval)
	return &Dashboard{opts: opts, points: n, cluster: newRing(n), osds: map[uint32]*ring{}}, nil
}

// Run samples the source every Interval, the first time at once, until
// ctx ends.
func (d *Dashboard) Run(ctx context.Context) {
	t := time.NewTicker(d.opts.Interval)
	defer t.Stop()
	for {
		d.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Dashboard) sample(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	r, err := d.opts.Source.Report(sctx)
	cancel()
	now := time.Now()
	if err != nil {
		if ctx.Err() == nil {
			d.opts.Logger.Warn("dashboard: sampling the mon", "err", err)
		}
		d.mu.Lock()
		d.lastErr, d.errAt = err, now
		d.mu.Unlock()
		return
	}
	d.observe(r, now)
}

// observe takes one report taken at now: the rings get a point and the
// differences from the previous report become events.
func (d *Dashboard) observe(r *mon.Report, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	evs, recovering := changes(d.last, r, d.recovering)
	d.recovering = recovering
	for _, e := range evs {
		d.seq++
		e.Seq, e.At = d.seq, now
		d.events = append(d.events, e)
	}
	if over := len(d.events) - d.opts.Events; over > 0 {
		d.events = slices.Delete(d.events, 0, over)
	}
	ms := now.UnixMilli()
	st := r.Status
	d.cluster.add(Point{At: ms, Ops: st.OpsPerSec, ReadBytes: st.ReadBytesPerSec, WriteBytes: st.WriteBytesPerSec, RecoveryBps: st.RecoveryBytesPerSec})
	seen := make(map[uint32]bool, len(r.OSDs))
	for _, o := range r.OSDs {
		seen[o.ID] = true
		rg := d.osds[o.ID]
		if rg == nil {
			rg = newRing(d.points)
			d.osds[o.ID] = rg
		}
		rg.add(Point{At: ms, Ops: o.OpsPerSec, ReadBytes: o.ReadBytesPerSec, WriteBytes: o.WriteBytesPerSec, RecoveryBps: o.RecoveryBytesPerSec})
	}
	// An OSD removed from the map takes its history with it: the rings
	// are bounded by the map, not by every id ever seen.
	for id := range d.osds {
		if !seen[id] {
			delete(d.osds, id)
		}
	}
	d.last, d.lastAt, d.lastErr = r, now, nil
}

// View is what /api/status returns: the last sample, the recent events
// and how fresh it all is.
type View struct {
	// SampledAt is when the report was taken; Error says why the last
	// try failed, when it did (the rest is then older than it looks).
	SampledAt  time.Time `json:"sampled_at"`
	Error      string    `json:"error,omitempty"`
	IntervalMS int64     `json:"interval_ms"`
	PollMS     int64     `json:"poll_ms"`

	FSID   string          `json:"fsid"`
	Epoch  uint64          `json:"epoch"`
	Health mon.Health      `json:"health"`
	Mons   []mon.MonStatus `json:"mons"`
	Counts mon.OSDCounts   `json:"osd_counts"`
	// PGs by state, the most common first.
	PGs              []PGCount       `json:"pgs"`
	PGTotal          int             `json:"pg_total"`
	Objects          uint64          `json:"objects"`
	DegradedObjects  uint64          `json:"degraded_objects"`
	MisplacedObjects uint64          `json:"misplaced_objects"`
	UsedBytes        uint64          `json:"used_bytes"`
	AvailBytes       uint64          `json:"avail_bytes"`
	Now              Point           `json:"now"`
	OSDs             []mon.OSDReport `json:"osds"`
	// Events are the recent ones, newest first.
	Events []Event `json:"events"`
}

// PGCount is how many PGs are in one state.
type PGCount struct {
	State string `json:"state"`
	Count int    `json:"count"`
}

// errNoSample is the view's error before any sample worked.
var errNoSample = errors.New("no sample of the mon yet")

// view is the current View; errNoSample before the first sample.
func (d *Dashboard) view() (*View, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		if d.lastErr != nil {
			return nil, errors.Join(errNoSample, d.lastErr)
		}
		return nil, errNoSample
	}
	st := d.last.Status
	v := &View{
		SampledAt: d.lastAt, IntervalMS: d.opts.Interval.Milliseconds(), PollMS: d.opts.Poll.Milliseconds(),
		FSID: st.FSID, Epoch: st.Epoch, Health: st.Health, Mons: st.Mons, Counts: st.OSDs,
		PGTotal: st.PGTotal, Objects: st.Objects, DegradedObjects: st.DegradedObjects, MisplacedObjects: st.MisplacedObjects,
		UsedBytes: st.UsedBytes, AvailBytes: st.AvailBytes,
		Now:  Point{At: d.lastAt.UnixMilli(), Ops: st.OpsPerSec, ReadBytes: st.ReadBytesPerSec, WriteBytes: st.WriteBytesPerSec, RecoveryBps: st.RecoveryBytesPerSec},
		OSDs: d.last.OSDs, PGs: []PGCount{}, Events: make([]Event, 0, len(d.events)),
	}
	if v.Health.Checks == nil {
		v.Health.Checks = []string{}
	}
	if d.lastErr != nil {
		v.Error = d.lastErr.Error()
	}
	for s, n := range st.PGs {
		v.PGs = append(v.PGs, PGCount{State: s, Count: n})
	}
	slices.SortFunc(v.PGs, func(a, b PGCount) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.State, b.State)) })
	for i := len(d.events) - 1; i >= 0; i-- {
		v.Events = append(v.Events, d.events[i])
	}
	return v, nil
}

// history is the cluster's points (all: osd < 0) or one OSD's after
// since (Unix ms); ok is false for an OSD the map does not hold.
func (d *Dashboard) history(osd int64, since int64) (pts []Point, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if osd < 0 {
		return d.cluster.since(since), true
	}
	if osd > int64(^uint32(0)) {
		return nil, false
	}
	rg := d.osds[uint32(osd)]
	if rg == nil {
		return nil, false
	}
	return rg.since(since), true
}

// eventsAfter is the kept events with Seq > seq, oldest first.
func (d *Dashboard) eventsAfter(seq uint64) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []Event{}
	for _, e := range d.events {
		if e.Seq > seq {
			out = append(out, e)
		}
	}
	return out
}
