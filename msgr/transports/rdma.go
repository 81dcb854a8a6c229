//go:build rdma

package transports

import (
	"github.com/ospreystore/osprey/msgr/rdma"
	"github.com/ospreystore/osprey/msgr/wire"
)

const rdmaBuilt = true

// rdmaTransports are one libfabric transport per provider.
func rdmaTransports(cfg Config) ([]wire.Transport, error) {
	mode, err := rdma.ParseRendezvousMode(cfg.RDMARendezvous)
	if err != nil {
		return nil, err
	}
	var ts []wire.Transport
	for _, prov := range rdmaProviders {
		ts = append(ts, rdma.NewTransport(prov, rdma.Config{Rendezvous: mode, WriteChunk: cfg.RDMAWriteChunk, MemBudget: cfg.RDMAMemBudget, CQEntries: cfg.RDMACQEntries}))
	}
	return ts, nil
}
