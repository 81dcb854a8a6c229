// Package msgr is Osprey's asynchronous messenger, in the spirit of
// Ceph's msgr2: every byte between Osprey's daemons and clients moves
// through it, over TCP or RDMA, with one session and credit protocol above
// both (docs/protocol.md is its normative description; docs/messenger.md
// the guide for users).
//
// A Messenger has a name (an entity, "osd.3", "client.admin"), listens on
// addresses and connects to peers. A Conn is one session with one peer:
// Send queues a Message (a type, a protobuf front and an optional data
// payload) without blocking on the network, and delivery is in order. The
// Policy for the peer's entity type says what a fault does: a lossless
// session delivers every message exactly once across reconnects (sequence
// numbers, acks, replay); a lossy one ends and tells its owner. A
// Dispatcher receives messages and connection events.
//
// Flow control is credit-based, the same on every transport: a peer may
// send only what the receiver granted, in messages and bytes, so a slow
// receiver pushes back instead of filling memory, and on RDMA no send ever
// meets a receiver without a posted buffer. The decisions (what to write
// next, when to ack, grant or keep alive) are one pure state machine, the
// engine (engine.go), which the Conn feeds and obeys, and which the tests
// drive directly. The build tag invariants makes it assert the protocol's
// promises as it runs.
//
// The package imports no transport: a Transport (msgr/wire) is handed in
// through Options.Transports, and msgr/transports gives the build's
// defaults (tcp, and rdma+verbs, rdma+tcp and rdma+sockets with
// -tags rdma). With Options.Auth every session is authenticated both ways
// at the handshake, by TLS 1.3 with certificates of the cluster's CA
// (msgr/auth), and a peer's name is the one its certificate carries.
package msgr
