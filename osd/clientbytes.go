package osd

import (
	"slices"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/wire"
)

// defaultClientBytes is Config.ClientMessageBytes without RDMA, as Ceph's
// osd_client_message_size_cap (500 MiB).
const defaultClientBytes = 512 << 20

// clientShare: client messages take at most 1/clientShare of an RDMA
// domain's registered-memory budget. Of the rest, the read cache may lend
// half (rdma: lentShare), copies of payloads being sent a quarter
// (srcShare), and an eighth, at least, stays for what the OSD receives as
// a replica and its links' own buffers. What a replica receives is let go
// once applied, whoever else waits; client bodies wait on the replicas
// that read them; so with that room kept every write ends, where client
// bodies free to take it all could each wait on the other OSD's, for good.
const clientShare = 8

// DefaultClientMessageBytes is the default Config.ClientMessageBytes of an
// OSD whose RDMA domain may register rdmaBudget bytes (0: no RDMA).
func DefaultClientMessageBytes(rdmaBudget int64) int64 {
	if rdmaBudget <= 0 {
		return defaultClientBytes
	}
	return max(min(defaultClientBytes, rdmaBudget/clientShare), 1)
}

// RegisteredBudget is the smallest registered-memory budget
// (wire.RegisteredMemory) of the transports in ts that serve the schemes
// of addrs (an OSD's public and cluster addresses), or 0 if none has
// one: a build with RDMA has RDMA transports whether or not the OSD's
// networks use them.
func RegisteredBudget(ts []wire.Transport, addrs ...string) int64 {
	var least int64
	for _, t := range ts {
		rm, ok := t.(wire.RegisteredMemory)
		if !ok || !slices.ContainsFunc(addrs, func(a string) bool {
			pa, err := msgr.ParseAddr(a)
			return err == nil && pa.Scheme == t.Scheme()
		}) {
			continue
		}
		if b := rm.RegisteredBudget(); b > 0 && (least == 0 || b < least) {
			least = b
		}
	}
	return least
}
