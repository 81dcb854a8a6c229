package metrics

import (
	"context"
	"time"

	"github.com/ospreystore/osprey/mon"
	"github.com/prometheus/client_golang/prometheus"
)

// The mon's series: the map as this mon holds it. Every mon serves the
// newest map in etcd, so any of them answers for the cluster; leader says
// which one writes.
var (
	monEpoch     = newDesc("osprey_mon_map_epoch", "Epoch of the newest cluster map.")
	monLeader    = newDesc("osprey_mon_leader", "1 if this mon leads (writes the map), else 0.")
	monOSDs      = newDesc("osprey_mon_osds", "OSDs in the map.")
	monOSDsUp    = newDesc("osprey_mon_osds_up", "OSDs marked up.")
	monOSDsIn    = newDesc("osprey_mon_osds_in", "OSDs marked in.")
	monMapAge    = newDesc("osprey_mon_map_age_seconds", "Seconds since this mon adopted the newest map.")
	monMapChange = newDesc("osprey_mon_map_changed_timestamp_seconds", "Unix time at which this mon adopted the newest map.")

	// The cluster's health and PG states, as "status" and "health detail"
	// say them (Ceph's mgr exports ceph_health_status and
	// ceph_health_detail so): from the leading mon only, and only when it
	// read the OSDs' reports from etcd, so that exactly one mon, and no
	// mon cut off from etcd's quorum, speaks for the cluster.
	healthStatus     = newDesc("osprey_health_status", "The cluster's health as the leading mon computes it: 0 HEALTH_OK, 1 HEALTH_WARN, 2 HEALTH_ERR.")
	healthDetail     = newDesc("osprey_health_detail", "1 for each health check in force (name: OSD_DOWN, PG_DEGRADED, ...), with its severity.", "name", "severity")
	clusterPGs       = newDesc("osprey_pgs", "The cluster's PGs by state, stale and unknown ones included, as the leading mon counts them.", "state")
	clusterDegraded  = newDesc("osprey_objects_degraded", "Object copies missing or behind in the cluster.")
	clusterMisplaced = newDesc("osprey_objects_misplaced", "Object copies not where the map wants them.")
	monStatusRead    = newDesc("osprey_mon_status_read", "1 if this mon leads and read the cluster's status from etcd for this scrape, else 0 (no osprey_health_* series from it then).")
)

// statusTimeout bounds a scrape's read of the cluster's status: a mon cut
// off from etcd's quorum fails it and exports no health.
const statusTimeout = 5 * time.Second

// healthLevel is osprey_health_status's value of a health level.
func healthLevel(s string) float64 {
	switch s {
	case mon.HealthOK:
		return 0
	case mon.HealthWarn:
		return 1
	}
	return 2
}

type monCollector struct{ m *mon.Mon }

func (monCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{monEpoch, monLeader, monOSDs, monOSDsUp, monOSDsIn, monMapAge, monMapChange,
		healthStatus, healthDetail, clusterPGs, clusterDegraded, clusterMisplaced, monStatusRead} {
		ch <- d
	}
}

func (c monCollector) Collect(ch chan<- prometheus.Metric) {
	mp := c.m.Map()
	var total, up, in int
	for o := range mp.OSDs() {
		total++
		if o.Up {
			up++
		}
		if o.In {
			in++
		}
	}
	leader := 0.0
	if c.m.IsLeader() {
		leader = 1
	}
	at := c.m.MapChangedAt()
	gauge(ch, monEpoch, float64(mp.Epoch()))
	gauge(ch, monLeader, leader)
	gauge(ch, monOSDs, float64(total))
	gauge(ch, monOSDsUp, float64(up))
	gauge(ch, monOSDsIn, float64(in))
	gauge(ch, monMapAge, time.Since(at).Seconds())
	gauge(ch, monMapChange, float64(at.UnixNano())/1e9)
	read := 0.0
	if leader == 1 {
		ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
		st, err := c.m.StatusDetail(ctx)
		cancel()
		if err == nil {
			read = 1
			gauge(ch, healthStatus, healthLevel(st.Health.Status))
			for _, d := range st.Health.Detail {
				gauge(ch, healthDetail, 1, d.Code, d.Severity)
			}
			for state, n := range st.PGs {
				gauge(ch, clusterPGs, float64(n), state)
			}
			gauge(ch, clusterDegraded, float64(st.DegradedObjects))
			gauge(ch, clusterMisplaced, float64(st.MisplacedObjects))
		}
	}
	gauge(ch, monStatusRead, read)
}

// MonRegistry is a mon's registry: its map's series and its messenger's.
func MonRegistry(m *mon.Mon) *prometheus.Registry {
	reg := NewRegistry()
	reg.MustRegister(monCollector{m}, messengerCollector{{"public", m.Messenger()}})
	return reg
}
