// Package rdma is the messenger's RDMA transport over libfabric: connected
// MSG endpoints with FI_MSG and FI_RMA, one frame per send, one credit per
// posted receive, large payloads pulled by RDMA read (rendezvous).
//
// It is compiled only with the build tag rdma (cgo and libfabric-dev);
// without it the package is empty, and msgr/transports stands in for it
// with an error that says how to build it in. The same code must run on
// the software providers (tcp, sockets) used in tests here and on verbs
// NICs: it always requests and honours the memory-registration modes verbs
// needs. It must never post a send without a credit the core granted, never
// block a goroutine others wait on in a libfabric call, and never let the
// environment choose what an address names (FI_PROVIDER is checked, not
// followed).
package rdma
