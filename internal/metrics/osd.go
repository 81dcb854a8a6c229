package metrics

import (
	"fmt"
	"github.com/ospreystore/osprey/osd"
	"github.com/prometheus/client_golang/prometheus"
)

// The OSD's series.
var (
	osdOpDuration = newDesc("osprey_osd_op_duration_seconds", "Client ops from their dispatch to their reply, by op.", "op")
	osdWALFsync   = newDesc("osprey_osd_wal_fsync_duration_seconds", "The store's WAL syncs, which every synced write waits for: a slow disk shows here first (Ceph's osd perf commit latency).")
	osdInFlight   = newDesc("osprey_osd_ops_in_flight", "Client ops dispatched and not yet answered.")
	osdPGs        = newDesc("osprey_osd_pgs", "PGs this OSD is primary of, by state, as of its last beacon.", "state")
	osdInfo       = newDesc("osprey_osd_info", "1, with this OSD's id (osd=\"osd.3\"): join it on instance to name the OSD an alert is about.", "osd")
	osdBeaconAge  = newDesc("osprey_osd_beacon_age_seconds", "Seconds since the mon last took this OSD's beacon (its PG states): an OSD cut off from the mons reports old ones.")
	osdLaggy      = newDesc("osprey_osd_laggy_pgs", "PGs this OSD leads whose reads wait for a read lease (laggy: a member has not answered its pings) or for a predecessor's to run out (wait).")
	osdSlowOps    = newDesc("osprey_osd_slow_ops", "Client ops in flight at this OSD for longer than its op complaint time (Ceph's slow ops; the status warns SLOW_OPS).")
	osdOldestOp   = newDesc("osprey_osd_oldest_slow_op_seconds", "How long the oldest slow op has been in flight; 0 with none.")
	osdRepTimeout = newDesc("osprey_osd_rep_timeouts_total", "Writes this OSD led that failed because a replica did not ack within the rep timeout, counted once per replica that did not.")
	osdDegraded   = newDesc("osprey_osd_degraded_objects", "Object copies missing from the PGs this OSD leads.")
	osdMisplaced  = newDesc("osprey_osd_misplaced_objects", "Object copies on OSDs outside their PG's acting set, in the PGs this OSD leads.")
	osdRecovery   = newDesc("osprey_osd_recovery_bytes_total", "Bytes this OSD fetched from peers to recover or backfill its PGs.")
	osdObjects    = newDesc("osprey_osd_objects", "Objects held in the store, every PG.")
	osdLogical    = newDesc("osprey_osd_object_bytes", "Logical size of the objects held.")
	osdStoreBytes = newDesc("osprey_osd_store_bytes", "Bytes the store takes on disk (Pebble's files and the data files).")
	osdDiskTotal  = newDesc("osprey_osd_disk_size_bytes", "Size of the data disk's filesystem.")
	osdDiskAvail  = newDesc("osprey_osd_disk_available_bytes", "Bytes of the data disk still available.")
	osdPuts       = newDesc("osprey_osd_store_puts_total", "Puts the store applied (client writes, replicas and recovery).")
	osdDeletes    = newDesc("osprey_osd_store_deletes_total", "Deletes the store applied.")
	osdWritten    = newDesc("osprey_osd_store_written_bytes_total", "Object bytes the store wrote.")
	osdRead       = newDesc("osprey_osd_store_read_bytes_total", "Object bytes the store read.")
	osdCorrupt    = newDesc("osprey_osd_store_corruptions_total", "Corrupt records, chunks or data files the store detected.")
	osdReadCRC    = newDesc("osprey_osd_store_read_checked_bytes_total", "Bytes of data files the store read and checked against their chunk CRC32Cs (gets of clients that do not check them, a client's second read after a mismatch, recovery, scrub).")
	osdReadNoCRC  = newDesc("osprey_osd_store_read_unchecked_bytes_total", "Bytes of data files the store read for gets without checking them: the client checks them against the CRC32C the store recorded.")
	osdKept       = newDesc("osprey_osd_store_kept_bytes", "Bytes of replaced objects' data files kept for gets that began on them and read on in windows (store.Options.KeepReplacedFor).")
	osdPartsHeld  = newDesc("osprey_osd_part_drops_held", "Deletes of replaced multipart objects' parts this primary defers now, as gets that began on those objects read on (docs/osd.md, Reads).")
	osdKeepRefuse = newDesc("osprey_osd_store_keep_refused_total", "Replaced data files not kept for their readers, as more than store.Options.KeepReplacedBytes would have been kept: those readers are told to read again.")
	osdRepairs    = newDesc("osprey_osd_read_repairs_total", "Objects a get found damaged in this OSD's store (checksum or I/O error) and that were replaced with a replica's intact copy.")
	osdRepairFail = newDesc("osprey_osd_read_repair_failures_total", "Damaged objects a get found that no replica could repair (the get failed).")
	osdScrubObj   = newDesc("osprey_osd_scrub_objects_total", "Objects this OSD's deep scrubs read back and checked.")
	osdScrubBytes = newDesc("osprey_osd_scrub_bytes_total", "Bytes this OSD's deep scrubs read back and checked.")
	osdScrubDmg   = newDesc("osprey_osd_scrub_damaged_total", "Damaged objects (checksum or I/O error) this OSD's deep scrubs found.")
	osdScrubFixed = newDesc("osprey_osd_scrub_repaired_total", "Damaged objects this OSD's deep scrubs replaced with another member's intact copy.")
	osdScrubErrs  = newDesc("osprey_osd_scrub_errors", "Damaged objects the last deep scrubs of this OSD's PG copies could not repair (Ceph's OSD_SCRUB_ERRORS).")
	osdScrubIncon = newDesc("osprey_osd_scrub_inconsistent_objects", "Objects whose copies differ, as the last deep scrubs of the PGs this OSD leads compared them (Ceph's PG_DAMAGED); osprey pg list-inconsistent names them.")
	osdStrays     = newDesc("osprey_osd_stray_pgs_removed_total", "Copies of PGs this OSD left (stray copies) that it removed once their PG was clean elsewhere.")

	// The read cache of checked whole objects (store.ReadCacheStats).
	readCacheBytes   = newDesc("osprey_osd_read_cache_bytes", "Memory the read cache holds, in its objects' allocations (against --read-cache-mib).")
	readCacheLimit   = newDesc("osprey_osd_read_cache_limit_bytes", "The read cache's bound, --read-cache-mib (0: off).")
	readCacheObjects = newDesc("osprey_osd_read_cache_objects", "Whole objects in the read cache.")
	readCacheHits    = newDesc("osprey_osd_read_cache_hits_total", "Gets of objects in data files served from the read cache.")
	readCacheMisses  = newDesc("osprey_osd_read_cache_misses_total", "Gets of objects in data files the read cache did not hold (read from disk, then cached).")
	readCacheEvicted = newDesc("osprey_osd_read_cache_evictions_total", "Objects the read cache let go to make room for others (a working set larger than --read-cache-mib).")
	readCacheNoReg   = newDesc("osprey_osd_read_cache_alloc_failures_total",
		"Objects the read cache kept in ordinary memory because registered memory could not be had (RDMA: the lent half of the budget spent, or registration failed); gets of them copy.")
	readCacheReclaimed = newDesc("osprey_osd_read_cache_reclaimed_total",
		"Objects the read cache let go because an RDMA transfer found the registered memory spent and asked for its memory back.")

	pebbleCompactions = newDesc("osprey_pebble_compactions_total", "Pebble compactions.")
	pebbleFlushes     = newDesc("osprey_pebble_flushes_total", "Pebble memtable flushes.")
	pebbleWALWritten  = newDesc("osprey_pebble_wal_written_bytes_total", "Bytes Pebble wrote to its write-ahead log.")
	pebbleWAL         = newDesc("osprey_pebble_wal_bytes", "Size of Pebble's live write-ahead log.")
	pebbleReadAmp     = newDesc("osprey_pebble_read_amplification", "Pebble's read amplification: sublevels of L0 plus the non-empty levels below.")
	pebbleL0Files     = newDesc("osprey_pebble_l0_files", "Tables in Pebble's L0.")
	pebbleDebt        = newDesc("osprey_pebble_compaction_debt_bytes", "Bytes Pebble estimates it must compact to reach a stable shape.")
	pebbleMemTable    = newDesc("osprey_pebble_memtable_bytes", "Bytes of Pebble's memtables.")
	pebbleCache       = newDesc("osprey_pebble_block_cache_bytes", "Bytes in Pebble's block cache.")
	pebbleCacheHits   = newDesc("osprey_pebble_block_cache_hits_total", "Pebble block cache hits.")
	pebbleCacheMisses = newDesc("osprey_pebble_block_cache_misses_total", "Pebble block cache misses.")
)

type osdCollector struct{ o *osd.OSD }

func (osdCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		osdOpDuration, osdWALFsync, osdInFlight, osdInfo, osdPGs, osdBeaconAge, osdLaggy, osdSlowOps, osdOldestOp, osdRepTimeout, osdDegraded, osdMisplaced, osdRecovery, osdObjects, osdLogical, osdStoreBytes,
		osdDiskTotal, osdDiskAvail, osdPuts, osdDeletes, osdWritten, osdRead, osdCorrupt, osdReadCRC, osdReadNoCRC, osdKept, osdPartsHeld, osdKeepRefuse, osdRepairs, osdRepairFail, osdStrays,
		osdScrubObj, osdScrubBytes, osdScrubDmg, osdScrubFixed, osdScrubErrs, osdScrubIncon,
		readCacheBytes, readCacheLimit, readCacheObjects, readCacheHits, readCacheMisses, readCacheEvicted, readCacheNoReg, readCacheReclaimed,
		pebbleCompactions, pebbleFlushes, pebbleWALWritten, pebbleWAL, pebbleReadAmp, pebbleL0Files, pebbleDebt,
		pebbleMemTable, pebbleCache, pebbleCacheHits, pebbleCacheMisses,
	} {
		ch <- d
	}
}

// opBounds are osd.OpBucketBounds in seconds.
var opBounds = func() []float64 {
	b := make([]float64, len(osd.OpBucketBounds))
	for i, d := range osd.OpBucketBounds {
		b[i] = d.Seconds()
	}
	return b
}()

// histogram sends a histogram of count observations summing to sum,
// cumulative[i] of them at most bounds[i].
func histogram(ch chan<- prometheus.Metric, desc *prometheus.Desc, count uint64, sum float64, bounds []float64, cumulative []uint64, labels ...string) {
	buckets := make(map[float64]uint64, len(bounds))
	for i, le := range bounds {
		buckets[le] = cumulative[i]
	}
	ch <- prometheus.MustNewConstHistogram(desc, count, sum, buckets, labels...)
}

func (c osdCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.o.Stats()
	for _, op := range st.Ops {
		histogram(ch, osdOpDuration, op.Count, op.Sum.Seconds(), opBounds, op.Buckets, op.Op)
	}
	if w := st.Store.WALFsync; len(w.Bounds) > 0 {
		histogram(ch, osdWALFsync, w.Count, w.Sum, w.Bounds, w.Cumulative)
	}
	gauge(ch, osdInfo, 1, fmt.Sprintf("osd.%d", c.o.ID()))
	gauge(ch, osdInFlight, float64(st.OpsInFlight))
	for state, n := range st.PGs {
		gauge(ch, osdPGs, float64(n), state)
	}
	if st.BeaconAge >= 0 {
		gauge(ch, osdBeaconAge, st.BeaconAge.Seconds())
	}
	gauge(ch, osdLaggy, float64(st.LaggyPGs))
	gauge(ch, osdSlowOps, float64(st.SlowOps))
	gauge(ch, osdOldestOp, st.OldestSlowOp.Seconds())
	counter(ch, osdRepTimeout, st.RepTimeouts)
	gauge(ch, osdDegraded, float64(st.DegradedObjects))
	gauge(ch, osdMisplaced, float64(st.MisplacedObjects))
	counter(ch, osdRecovery, st.RecoveryBytes)
	s := st.Store
	gauge(ch, osdObjects, float64(s.Objects))
	gauge(ch, osdLogical, float64(s.Bytes))
	gauge(ch, osdStoreBytes, float64(s.DiskBytes))
	gauge(ch, osdDiskTotal, float64(st.Space.Total))
	gauge(ch, osdDiskAvail, float64(st.Space.Avail))
	counter(ch, osdPuts, s.Puts)
	counter(ch, osdDeletes, s.Deletes)
	counter(ch, osdWritten, s.WrittenBytes)
	counter(ch, osdRead, s.ReadBytes)
	counter(ch, osdCorrupt, s.Corruptions)
	counter(ch, osdReadCRC, s.ReadCRCBytes)
	counter(ch, osdReadNoCRC, s.UncheckedReadBytes)
	gauge(ch, osdKept, float64(s.KeptBytes))
	counter(ch, osdKeepRefuse, s.KeepRefused)
	gauge(ch, osdPartsHeld, float64(st.PartDropsHeld))
	counter(ch, osdRepairs, st.ReadRepairs)
	counter(ch, osdRepairFail, st.ReadRepairFailures)
	counter(ch, osdStrays, s.PGsRemoved)
	counter(ch, osdScrubObj, st.ScrubbedObjects)
	counter(ch, osdScrubBytes, st.ScrubbedBytes)
	counter(ch, osdScrubDmg, st.ScrubDamaged)
	counter(ch, osdScrubFixed, st.ScrubRepaired)
	gauge(ch, osdScrubErrs, float64(st.ScrubErrors))
	gauge(ch, osdScrubIncon, float64(st.ScrubInconsistent))
	rc := c.o.Store().ReadCacheStats()
	gauge(ch, readCacheBytes, float64(rc.Bytes))
	gauge(ch, readCacheLimit, float64(rc.Limit))
	gauge(ch, readCacheObjects, float64(rc.Extents))
	counter(ch, readCacheHits, rc.Hits)
	counter(ch, readCacheMisses, rc.Misses)
	counter(ch, readCacheEvicted, rc.Evictions)
	counter(ch, readCacheNoReg, rc.AllocFailures)
	counter(ch, readCacheReclaimed, rc.Reclaimed)
	counter(ch, pebbleCompactions, s.Compactions)
	counter(ch, pebbleFlushes, s.Flushes)
	counter(ch, pebbleWALWritten, s.WALBytesWritten)
	gauge(ch, pebbleWAL, float64(s.WALBytes))
	gauge(ch, pebbleReadAmp, float64(s.ReadAmp))
	gauge(ch, pebbleL0Files, float64(s.L0Files))
	gauge(ch, pebbleDebt, float64(s.CompactionDebt))
	gauge(ch, pebbleMemTable, float64(s.MemTableBytes))
	gauge(ch, pebbleCache, float64(s.BlockCacheBytes))
	counter(ch, pebbleCacheHits, s.BlockCacheHits)
	counter(ch, pebbleCacheMisses, s.BlockCacheMisses)
}

// OSDRegistry is an OSD's registry: its own series, both messengers'
// and the RDMA transport's.
func OSDRegistry(o *osd.OSD) *prometheus.Registry {
	reg := NewRegistry()
	pub, clu := o.Messengers()
	reg.MustRegister(osdCollector{o}, messengerCollector{{"public", pub}, {"cluster", clu}})
	return reg
}
