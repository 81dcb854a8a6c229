package msgr

import (
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// tcpOnly is the transports of tests that build messengers by hand on
// loopback: package msgr links no transport of its own.
var tcpOnly = []wire.Transport{tcp.Transport{}}

// TCPOnly is tcpOnly for the external tests (package msgr_test).
var TCPOnly = tcpOnly
