package metrics

import (
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
)

type monCollector struct{ m *mon.Mon }

func (monCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{monEpoch, monLeader, monOSDs, monOSDsUp, monOSDsIn, monMapAge, monMapChange} {
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
}

// MonRegistry is a mon's registry: its map's series and its messenger's.
func MonRegistry(m *mon.Mon) *prometheus.Registry {
	reg := NewRegistry()
	reg.MustRegister(monCollector{m}, messengerCollector{{"public", m.Messenger()}})
	return reg
}
