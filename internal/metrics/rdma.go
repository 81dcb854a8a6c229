//go:build rdma

package metrics

import (
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/prometheus/client_golang/prometheus"
)

// The RDMA transport's series, by transport scheme (rdma+verbs, ...):
// one transport serves all of a daemon's messengers.
var (
	rdmaRegistered = newDesc("osprey_rdma_registered_bytes", "Memory registered with the NIC now.", "transport")
	rdmaHighWater  = newDesc("osprey_rdma_registered_high_water_bytes", "The most memory ever registered at once.", "transport")
	rdmaBufsInUse  = newDesc("osprey_rdma_buffers_in_use", "Registered buffers handed out (receive, send, rendezvous).", "transport")
	rdmaRecvs      = newDesc("osprey_rdma_receives_posted", "Receive buffers posted now.", "transport")
	rdmaZeroCopy   = newDesc("osprey_rdma_rendezvous_zero_copy_sends_total", "Rendezvous sends read straight from the caller's registered payload.", "transport")
	rdmaCopied     = newDesc("osprey_rdma_rendezvous_copied_sends_total", "Rendezvous sends that copied their payload into registered memory first.", "transport")
	rdmaReads      = newDesc("osprey_rdma_rendezvous_reads_total", "Rendezvous payloads received by an RDMA read this side posted.", "transport")
	rdmaWrites     = newDesc("osprey_rdma_rendezvous_writes_total", "Rendezvous payloads sent by an RDMA write this side posted.", "transport")
	rdmaPolls      = newDesc("osprey_rdma_cq_polls_total", "Completion queue reads.", "transport")
	rdmaSleeps     = newDesc("osprey_rdma_poller_sleeps_total", "Times the completion poller found nothing and slept.", "transport")
	rdmaSpin       = newDesc("osprey_rdma_spin_budget_seconds", "How long the completion poller spins for a completion before it sleeps now: up to BusyPoll while spinning pays (the largest of the transport's domains).", "transport")
	rdmaBudget     = newDesc("osprey_rdma_registered_budget_bytes", "Registered memory each of the transport's domains (NIC ports) may hold (--rdma-mem-budget); half of it may be lent.", "transport")
	rdmaLentBytes  = newDesc("osprey_rdma_lent_bytes", "Registered memory lent for long-lived use (an OSD's read cache), held or kept for reuse; part of the registered bytes.", "transport")
	rdmaLentRegs   = newDesc("osprey_rdma_lent_regions", "Lent regions held now (an OSD's cached objects in registered memory).", "transport")
	rdmaCQs        = newDesc("osprey_rdma_completion_queues", "Completion queues open: one per domain, more when its links' reservations fill it.", "transport")
	rdmaCQReserved = newDesc("osprey_rdma_cq_reserved_entries", "Completion-queue entries reserved by links: the most completions they can have outstanding.", "transport")
	rdmaMemWaits   = newDesc("osprey_rdma_memory_waits_total", "Rendezvous transfers that found the registered-memory budget spent and waited for memory to come back.", "transport")
	rdmaMemGiveUps = newDesc("osprey_rdma_memory_wait_giveups_total", "Waits for registered memory that gave up after 2 s and failed their link (the session reconnected and replayed): the budget is too small for the load.", "transport")
)

var rdmaDescs = []*prometheus.Desc{rdmaRegistered, rdmaHighWater, rdmaBufsInUse, rdmaRecvs, rdmaZeroCopy, rdmaCopied, rdmaReads, rdmaWrites, rdmaPolls, rdmaSleeps,
	rdmaSpin, rdmaBudget, rdmaLentBytes, rdmaLentRegs, rdmaCQs, rdmaCQReserved, rdmaMemWaits, rdmaMemGiveUps}

// rdmaCollect adds the series of the RDMA transports the messengers
// use, each once.
func rdmaCollect(ch chan<- prometheus.Metric, nets []Network) {
	seen := map[*rdma.Transport]bool{}
	for _, n := range nets {
		if n.Messenger == nil {
			continue
		}
		for _, t := range n.Messenger.Transports() {
			rt, ok := t.(*rdma.Transport)
			if !ok || seen[rt] {
				continue
			}
			seen[rt] = true
			s, l := rt.Stats(), rt.Scheme()
			if s.HighWaterBytes == 0 {
				continue // a provider this daemon never opened
			}
			gauge(ch, rdmaRegistered, float64(s.RegisteredBytes), l)
			gauge(ch, rdmaHighWater, float64(s.HighWaterBytes), l)
			gauge(ch, rdmaBufsInUse, float64(s.BuffersInUse), l)
			gauge(ch, rdmaRecvs, float64(s.RecvsPosted), l)
			counter(ch, rdmaZeroCopy, s.ZeroCopySends, l)
			counter(ch, rdmaCopied, s.CopiedSends, l)
			counter(ch, rdmaReads, s.RendezvousReads, l)
			counter(ch, rdmaWrites, s.RendezvousWrites, l)
			counter(ch, rdmaPolls, s.CQPolls, l)
			counter(ch, rdmaSleeps, s.PollerSleeps, l)
			gauge(ch, rdmaSpin, s.SpinBudget.Seconds(), l)
			gauge(ch, rdmaBudget, float64(rt.Config().MemBudget), l)
			gauge(ch, rdmaLentBytes, float64(s.LentBytes), l)
			gauge(ch, rdmaLentRegs, float64(s.LentRegions), l)
			gauge(ch, rdmaCQs, float64(s.CQs), l)
			gauge(ch, rdmaCQReserved, float64(s.CQReserved), l)
			counter(ch, rdmaMemWaits, s.MemWaits, l)
			counter(ch, rdmaMemGiveUps, s.MemGiveUps, l)
		}
	}
}
