package metrics

import (
	"github.com/ospreystore/osprey/msgr"
	"github.com/prometheus/client_golang/prometheus"
)

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The messenger's series, by network (public, cluster) and transport
// scheme (tcp, rdma+verbs, ...).
var (
	msgrLabels = []string{"network", "transport"}

	msgrSessions      = newDesc("osprey_msgr_sessions", "Sessions open.", msgrLabels...)
	msgrMsgsSent      = newDesc("osprey_msgr_sent_messages_total", "Messages sent (first sends, not replays).", msgrLabels...)
	msgrMsgsRecv      = newDesc("osprey_msgr_received_messages_total", "Messages received and delivered.", msgrLabels...)
	msgrBytesSent     = newDesc("osprey_msgr_sent_bytes_total", "Bytes of messages sent (front and data).", msgrLabels...)
	msgrBytesRecv     = newDesc("osprey_msgr_received_bytes_total", "Bytes of messages received (front and data).", msgrLabels...)
	msgrCreditStalls  = newDesc("osprey_msgr_credit_stalls_total", "Times sending stopped for lack of the peer's credit.", msgrLabels...)
	msgrGrantsSent    = newDesc("osprey_msgr_credit_grants_sent_total", "Explicit credit grant frames sent.", msgrLabels...)
	msgrGrantsRecv    = newDesc("osprey_msgr_credit_grants_received_total", "Frames received that raised the send limit.", msgrLabels...)
	msgrSendCredits   = newDesc("osprey_msgr_send_credit_messages", "Messages the open sessions may still send before they stall, summed.", msgrLabels...)
	msgrSendCreditB   = newDesc("osprey_msgr_send_credit_bytes", "Bytes the open sessions may still send before they stall, summed.", msgrLabels...)
	msgrRecvWindow    = newDesc("osprey_msgr_receive_window_messages", "Receive windows of the open sessions, summed.", msgrLabels...)
	msgrQueuedMsgs    = newDesc("osprey_msgr_queued_messages", "Messages queued or unacknowledged in the open sessions.", msgrLabels...)
	msgrQueuedBytes   = newDesc("osprey_msgr_queued_bytes", "Bytes queued or unacknowledged in the open sessions.", msgrLabels...)
	msgrFaults        = newDesc("osprey_msgr_faults_total", "Links lost under a session.", msgrLabels...)
	msgrReconnects    = newDesc("osprey_msgr_reconnects_total", "Sessions resumed on a new link.", msgrLabels...)
	msgrReplayed      = newDesc("osprey_msgr_replayed_messages_total", "Messages sent again after a reconnect.", msgrLabels...)
	msgrWithdrawn     = newDesc("osprey_msgr_withdrawn_messages_total", "Messages withdrawn by their senders before any link carried them.", msgrLabels...)
	msgrDuplicates    = newDesc("osprey_msgr_duplicate_messages_total", "Duplicate messages received and dropped.", msgrLabels...)
	msgrSourceCRC     = newDesc("osprey_msgr_source_crc_mismatches_total", "Messages received whose data did not match the CRC32C their sender's source recorded (a get of an OSD copy that is damaged; the client reads it again, checked).", msgrLabels...)
	msgrWaits         = newDesc("osprey_msgr_connect_waits_total", "WAIT answers in simultaneous connects: sent to the peer's dials, or received by ours.", "network", "transport", "direction")
	msgrHandshakeFail = newDesc("osprey_msgr_handshake_failures_total", "Handshakes that failed, dialed or accepted, by reason.", "network", "reason")
	msgrInbound       = newDesc("osprey_msgr_inbound_connections", "Accepted connections open (handshaking or not).", "network")
	msgrUnauth        = newDesc("osprey_msgr_inbound_unauthenticated_connections", "Accepted connections whose peer has not yet authenticated (banner or handshake).", "network")
	msgrRefused       = newDesc("osprey_msgr_inbound_refused_total", "Connections refused over the connection limit or the per-host bound on unauthenticated connections.", "network")
	msgrRefusedHost   = newDesc("osprey_msgr_inbound_refused_per_host_total", "Connections refused because their host already held MaxUnauthPerHost unauthenticated connections (in osprey_msgr_inbound_refused_total too).", "network")
	msgrAcceptErrors  = newDesc("osprey_msgr_accept_errors_total", "Failed accepts.", "network")
	msgrRecvBudget    = newDesc("osprey_msgr_receive_budget_bytes", "Bytes of received messages held now, against the receive budget.", "network")
	msgrBudgetStalls  = newDesc("osprey_msgr_receive_budget_stalls_total", "Times a link stopped reading to wait for the receive budget.", "network")
	msgrReaped        = newDesc("osprey_msgr_sessions_reaped_total", "Sessions closed after waiting too long for their peer.", "network")
)

// Network is one of a daemon's messengers and the network it serves.
type Network struct {
	Name      string // "public", "cluster"
	Messenger *msgr.Messenger
}

// messengerCollector reads messengers' counters at scrape time.
type messengerCollector []Network

func (messengerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		msgrSessions, msgrMsgsSent, msgrMsgsRecv, msgrBytesSent, msgrBytesRecv, msgrCreditStalls, msgrGrantsSent,
		msgrGrantsRecv, msgrSendCredits, msgrSendCreditB, msgrRecvWindow, msgrQueuedMsgs, msgrQueuedBytes, msgrFaults,
		msgrReconnects, msgrReplayed, msgrWithdrawn, msgrDuplicates, msgrSourceCRC, msgrWaits, msgrHandshakeFail, msgrInbound, msgrUnauth, msgrRefused, msgrRefusedHost, msgrAcceptErrors,
		msgrRecvBudget, msgrBudgetStalls, msgrReaped,
	} {
		ch <- d
	}
	for _, d := range rdmaDescs {
		ch <- d
	}
}

func (c messengerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c {
		if n.Messenger == nil {
			continue
		}
		for scheme, ts := range n.Messenger.TransportStats() {
			l := []string{n.Name, scheme}
			counter(ch, msgrMsgsSent, ts.MsgsSent, l...)
			counter(ch, msgrMsgsRecv, ts.MsgsReceived, l...)
			counter(ch, msgrBytesSent, ts.BytesSent, l...)
			counter(ch, msgrBytesRecv, ts.BytesReceived, l...)
			counter(ch, msgrCreditStalls, ts.CreditStalls, l...)
			counter(ch, msgrGrantsSent, ts.GrantsSent, l...)
			counter(ch, msgrGrantsRecv, ts.GrantsReceived, l...)
			counter(ch, msgrFaults, ts.Faults, l...)
			counter(ch, msgrReconnects, ts.Reconnects, l...)
			counter(ch, msgrReplayed, ts.Replayed, l...)
			counter(ch, msgrWithdrawn, ts.Withdrawn, l...)
			counter(ch, msgrDuplicates, ts.DuplicatesDropped, l...)
			counter(ch, msgrSourceCRC, ts.SourceCRCMismatches, l...)
			counter(ch, msgrWaits, ts.WaitsSent, n.Name, scheme, "sent")
			counter(ch, msgrWaits, ts.WaitsReceived, n.Name, scheme, "received")
			gauge(ch, msgrSessions, float64(ts.Sessions), l...)
			gauge(ch, msgrSendCredits, float64(ts.SendCredits), l...)
			gauge(ch, msgrSendCreditB, float64(ts.SendBytesCredit), l...)
			gauge(ch, msgrRecvWindow, float64(ts.RecvWindowMsgs), l...)
			gauge(ch, msgrQueuedMsgs, float64(ts.QueuedMsgs), l...)
			gauge(ch, msgrQueuedBytes, float64(ts.QueuedBytes), l...)
		}
		st := n.Messenger.Stats()
		for r, v := range st.HandshakeFailures {
			counter(ch, msgrHandshakeFail, v, n.Name, msgr.HandshakeReason(r).String())
		}
		gauge(ch, msgrInbound, float64(st.Inbound.Open), n.Name)
		gauge(ch, msgrUnauth, float64(st.Inbound.Early), n.Name)
		counter(ch, msgrRefused, st.Inbound.Refused, n.Name)
		counter(ch, msgrRefusedHost, st.Inbound.RefusedPerHost, n.Name)
		counter(ch, msgrAcceptErrors, st.Inbound.AcceptErrors, n.Name)
		gauge(ch, msgrRecvBudget, float64(st.Recv.InFlight), n.Name)
		counter(ch, msgrBudgetStalls, st.Recv.Stalls, n.Name)
		counter(ch, msgrReaped, st.SessionsReaped, n.Name)
	}
	rdmaCollect(ch, c)
}

type number interface {
	~int | ~int32 | ~int64 | ~uint64
}

func counter[T number](ch chan<- prometheus.Metric, d *prometheus.Desc, v T, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}
