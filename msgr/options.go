package msgr

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ospreystore/osprey/msgr/wire"
)

// Policy says what a session does when its link fails, as Ceph's
// Messenger::Policy. Policies are chosen per peer entity type.
type Policy struct {
	// Lossy: a fault ends the session; queued messages are dropped and the
	// owner hears a Reset. Otherwise the session survives faults and
	// delivers every message exactly once, in order.
	Lossy bool
	// Server: never dial the peer to restore a session; wait for it to
	// reconnect. A lossless server keeps the session for the peer's return.
	Server bool
}

// Policy presets.
var (
	// LosslessPeer: daemons talking to daemons; either side reconnects and
	// replays.
	LosslessPeer = Policy{}
	// LossyClient: a client's connection to a daemon; faults surface to
	// the client, which retries its requests (idempotently) itself.
	LossyClient = Policy{Lossy: true}
	// StatelessServer: a daemon's end of a lossy client connection.
	StatelessServer = Policy{Lossy: true, Server: true}
)

func (p Policy) String() string {
	switch p {
	case LosslessPeer:
		return "lossless-peer"
	case LossyClient:
		return "lossy-client"
	case StatelessServer:
		return "stateless-server"
	}
	return fmt.Sprintf("policy{lossy:%v server:%v}", p.Lossy, p.Server)
}

// FaultInjection makes links fail on purpose, like Ceph's
// ms_inject_socket_failures: for tests and for users who want to see their
// system survive faults. The zero value injects nothing.
type FaultInjection struct {
	// EveryNFrames drops the link after about this many frames (read or
	// written) on it; 0 disables. The exact point is jittered by Seed.
	EveryNFrames int
	// Probability drops the link on each frame with this probability.
	Probability float64
	// Seed makes the faults reproducible.
	Seed int64
	// Delay is added before every batch of writes.
	Delay time.Duration
}

func (f FaultInjection) enabled() bool {
	return f.EveryNFrames > 0 || f.Probability > 0 || f.Delay > 0
}

// Backoff bounds the delay between reconnect attempts, which doubles from
// Min up to Max with jitter.
type Backoff struct {
	Min, Max time.Duration
}

// Options configure a Messenger. Zero fields take the defaults noted.
type Options struct {
	// Name is this messenger's entity name, e.g. "osd.3". Required.
	Name EntityName
	// Dispatcher receives messages and events. Required.
	Dispatcher Dispatcher
	// DefaultPolicy applies to peers whose entity type has no entry in
	// Policies. Zero is LosslessPeer.
	DefaultPolicy Policy
	Policies      map[string]Policy
	// Logger gets connection events and faults. Default slog.Default().
	Logger *slog.Logger

	// MaxMessageSize bounds front plus data of one message, both ways.
	// Default 64 MiB.
	MaxMessageSize int
	// RecvWindowMsgs and RecvWindowBytes are the credits each session
	// grants its peer: how many messages and bytes may sit in our
	// dispatch queue. Defaults 1024 and 64 MiB. A transport that posts
	// receives caps the message window of each of its links at what it
	// can post (RDMA: 256 by default and at most the provider's receive
	// queue; one posted receive per credit).
	RecvWindowMsgs  int
	RecvWindowBytes int64
	// SendQueueMsgs and SendQueueBytes bound what a Conn holds for its
	// peer (queued plus sent but unacked); Send blocks beyond them. A single
	// message larger than SendQueueBytes is allowed into an empty queue.
	// Defaults 4096 and 128 MiB.
	SendQueueMsgs  int
	SendQueueBytes int64

	// Keepalive is the interval of keepalive frames, which measure RTT
	// and keep idle links alive. Default 5s.
	Keepalive time.Duration
	// IdleTimeout ends a link on which nothing arrived for this long.
	// Default 60s. It must exceed Keepalive.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds a dial's banner exchange and handshake, and
	// an accepted link's handshake. Default 10s. An accepted link's banner
	// comes before the messenger sees the link: the transport bounds it
	// (tcp.BannerTimeout, 10s; RDMA allows 10s for the connection request).
	HandshakeTimeout time.Duration
	// Reconnect bounds the backoff of lossless reconnects.
	// Default 5ms to 2s.
	Reconnect Backoff

	// DisableDataCRC sends data segments without a CRC (Ceph's
	// ms_crc_data=false) when the peer agrees. Preamble and front CRCs
	// are always on.
	DisableDataCRC bool
	// NoControlSlots leaves CONTROL_SLOTS (wire.FeatureControlSlots) out
	// of this messenger's banners, so its links keep the rules of a peer
	// that lacks it: KEEPALIVE, KEEPALIVE_ACK and CLOSE cost credit, and
	// the idle timeout spares a link whose peer has at most one credit
	// left. For interoperability tests.
	NoControlSlots bool
	// DataChunkCRC, when positive, has the links compute the CRC32C of
	// each DataChunkCRC-byte chunk of a received data segment as its bytes
	// arrive, whether or not the sender sent a data CRC
	// (wire.LinkOptions.DataChunk), and the messages hand them over
	// (Message.DataChunkCRCs): a store that keeps chunks of that size
	// checks a body against them instead of reading it again. Transports
	// that cannot hand them up check a data CRC as before. Sealed
	// (secure) sessions carry no data CRC and hand up none. 0: off.
	DataChunkCRC int
	// Faults injects link failures.
	Faults FaultInjection
	// Transports are the transports Listen and Connect use, by address
	// scheme (Transport.Scheme); a later one replaces an earlier one of the
	// same scheme. None is built in, so that a program links only the
	// transports it names: package msgr/transports gives the build's
	// defaults (tcp, and rdma with -tags rdma). An address whose scheme
	// has none fails with ErrNoTransport. The messenger never closes them:
	// close them after Shutdown or Kill (transports.Set.Close).
	Transports []wire.Transport
	// MaxConns bounds the connections this messenger's listeners have
	// accepted and not yet closed, over all its listeners, counting those
	// still in their banner or handshake. A connection over it is closed at
	// accept, counted (InboundStats) and logged, rate-limited. Outgoing
	// connections do not count. Default 4096; negative means no bound.
	MaxConns int
	// MaxUnauthPerHost bounds the accepted connections from one source
	// address (an IP) whose peer has not yet authenticated (still in the
	// banner, or in the handshake before its authentication step ends;
	// with Auth nil, before the dialer's AUTH_REQUEST is taken) while
	// more than half of MaxConns are open. A connection over it is closed
	// at accept, like one over MaxConns, so that one host holding
	// connections that never say who they are cannot take every MaxConns
	// slot, while a burst from one address (many clients behind a NAT
	// starting at once) costs nothing while slots are plentiful. Sessions
	// that authenticated do not count. With a negative MaxConns it
	// applies always. A source whose address is not an IP (an InfiniBand
	// address) is not bounded by it. Default 256; negative means no bound.
	MaxUnauthPerHost int
	// MaxRecvBytes bounds the bytes (front plus data) of received messages
	// held at once over all sessions, as Ceph's
	// osd_client_message_size_cap: from when a link starts reading a
	// message until the dispatcher releases it. Over it, links stop reading
	// their sockets until messages are released (back-pressure on every
	// sender) instead of allocating; a message larger than the whole budget
	// is read when nothing else is held. Default 512 MiB; negative means no
	// bound.
	MaxRecvBytes int64
	// StandbyTimeout bounds how long a lossless session without a link
	// waits for its peer to come back when this side will not dial it (a
	// session the peer dialed, or a Server policy): after it, the session
	// is closed (EventReset with ErrSessionExpired) and counted in
	// Stats().SessionsReaped, so peers that never return do not pile up.
	// A peer that returns later gets a fresh session (EventRemoteReset on
	// its side). Default 5 minutes; negative means for ever.
	StandbyTimeout time.Duration
	// Auth, if set, authenticates every session (method "tls13",
	// docs/protocol.md 6.3): both sides prove an identity the cluster's CA
	// signed, and a peer's entity name is the one its certificate carries.
	// Nil: method "none", and a peer is whoever its HELLO claims, which is
	// for tests and closed networks only.
	Auth *AuthOptions
	// OnDialError, if set, hears of every failed dial of a session we
	// initiated, before its reconnect backoff. An OSD uses it to report
	// a peer whose connections are refused (the process is gone) at once,
	// as Ceph's osd_fast_fail_on_connection_refused. It runs on the
	// connect loop's goroutine and must not block.
	OnDialError func(c *Conn, err error)
	// AcceptLossySide lets a peer whose policy is lossless also open lossy
	// side sessions (Messenger.ConnectPolicy), which get StatelessServer
	// and never touch the peer's lossless session. Without it such a
	// dialer is refused as a policy mismatch.
	AcceptLossySide bool
}

const (
	defaultMaxMessage = 64 << 20
	// maxFront bounds the front segment separately: ops are small and a
	// peer should not make us buffer a huge protobuf.
	defaultMaxFront = 16 << 20
	// defaultMaxConns bounds accepted connections, as NATS's max_connections.
	defaultMaxConns = 4096
	// defaultMaxUnauthPerHost leaves a host a sixteenth of defaultMaxConns
	// before its peers authenticate: well above what one host's honest
	// messengers open at once (a session per peer), far below the whole.
	defaultMaxUnauthPerHost = 256
	// defaultMaxRecvBytes is the receive budget, as Ceph's
	// osd_client_message_size_cap (500 MiB).
	defaultMaxRecvBytes = 512 << 20
	// defaultStandbyTimeout: Ceph closes idle connections after 15
	// minutes (ms_connection_idle_timeout); a session whose peer has been
	// gone this long is as good as lost.
	defaultStandbyTimeout = 5 * time.Minute
)

func (o *Options) setDefaults() error {
	if err := o.Name.Validate(); err != nil {
		return err
	}
	if o.Dispatcher == nil {
		return fmt.Errorf("msgr: Options.Dispatcher is required")
	}
	if o.Auth != nil {
		if err := o.Auth.check(o.Name); err != nil {
			return err
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = defaultMaxMessage
	}
	if o.MaxMessageSize > 1<<31 {
		return fmt.Errorf("msgr: MaxMessageSize %d above the wire limit of 2 GiB", o.MaxMessageSize)
	}
	if o.RecvWindowMsgs <= 0 {
		o.RecvWindowMsgs = 1024
	}
	if o.RecvWindowMsgs < 4 {
		o.RecvWindowMsgs = 4 // room for data plus the reserved grant credit
	}
	if o.RecvWindowBytes <= 0 {
		o.RecvWindowBytes = 64 << 20
	}
	if o.SendQueueMsgs <= 0 {
		o.SendQueueMsgs = 4096
	}
	if o.SendQueueBytes <= 0 {
		o.SendQueueBytes = 128 << 20
	}
	if o.Keepalive <= 0 {
		o.Keepalive = 5 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 60 * time.Second
	}
	if o.IdleTimeout <= o.Keepalive {
		return fmt.Errorf("msgr: IdleTimeout %v must exceed Keepalive %v", o.IdleTimeout, o.Keepalive)
	}
	if o.MaxConns == 0 {
		o.MaxConns = defaultMaxConns
	}
	if o.MaxUnauthPerHost == 0 {
		o.MaxUnauthPerHost = defaultMaxUnauthPerHost
	}
	if o.MaxRecvBytes == 0 {
		o.MaxRecvBytes = defaultMaxRecvBytes
	}
	if o.StandbyTimeout == 0 {
		o.StandbyTimeout = defaultStandbyTimeout
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.Reconnect.Min <= 0 {
		o.Reconnect.Min = 5 * time.Millisecond
	}
	if o.Reconnect.Max < o.Reconnect.Min {
		o.Reconnect.Max = max(2*time.Second, o.Reconnect.Min)
	}
	return nil
}

func (o *Options) policyFor(peer EntityName) Policy {
	if p, ok := o.Policies[peer.Type()]; ok {
		return p
	}
	return o.DefaultPolicy
}

func (o *Options) limits() wire.Limits {
	return wire.Limits{MaxFront: uint32(min(o.MaxMessageSize, defaultMaxFront)), MaxData: uint32(o.MaxMessageSize)}
}
