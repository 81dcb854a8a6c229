//go:build !rdma

package transports

import "github.com/ospreystore/osprey/msgr/wire"

const rdmaBuilt = false

// rdmaTransports are stand-ins that fail with ErrRDMANotBuilt: this build
// has no libfabric transport.
func rdmaTransports(Config) ([]wire.Transport, error) {
	var ts []wire.Transport
	for _, prov := range rdmaProviders {
		ts = append(ts, wire.MissingTransport{Name: "rdma+" + prov, Err: ErrRDMANotBuilt})
	}
	return ts, nil
}
