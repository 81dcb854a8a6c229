// Package transports gives messengers the transports this build has: tcp
// always, and rdma+tcp, rdma+sockets and rdma+verbs when built with -tags
// rdma. Without the tag the rdma+ schemes are stand-ins whose addresses
// fail with ErrRDMANotBuilt, so that a user learns how to get them rather
// than that the scheme is unknown. Package msgr imports no transport;
// programs and tests that want the build's set take it from here.
//
// The transports are values handed to msgr.Options.Transports, not
// registered by an import's side effect as database/sql drivers are. A
// transport is state with an owner: an RDMA transport holds registered
// memory, libfabric domains and a completion poller until it is closed, and
// two messengers of one process may want differently tuned ones. A global
// registry filled by init would share one configuration across the process
// and hide who must close what. So Default returns fresh values, the caller
// gives them to one messenger and closes them once it has shut down; the
// build tag alone decides which are real, as a driver's import would.
//
// This package is also the edge where a binary's environment reaches the
// transports: Default reads OSPREY_RDMA_RENDEZVOUS, OSPREY_RDMA_WRITE_CHUNK
// and OSPREY_RDMA_MEM_BUDGET (New reads nothing). No constructor reads the
// environment, and FI_PROVIDER never picks a provider: an rdma+PROVIDER
// address runs on PROVIDER, and one that FI_PROVIDER leaves out fails its
// Listen and Dial (rdma.ProviderConflictError). This package must never
// import msgr: the core and its transports meet only in msgr/wire.
package transports

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/dustin/go-humanize"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// ErrRDMANotBuilt is the error of an rdma+ address in a binary built
// without -tags rdma. The messenger wraps it in msgr.ErrNoTransport, so
// errors.Is matches both.
var ErrRDMANotBuilt = errors.New("rdma transport not built in (build with -tags rdma)")

// RDMABuilt reports whether this binary has the RDMA transport.
const RDMABuilt = rdmaBuilt

// rdmaProviders are the libfabric providers with an rdma+ scheme of their
// own: the ones with connected (FI_EP_MSG) endpoints the transport runs on.
var rdmaProviders = []string{"tcp", "sockets", "verbs"}

// Config tunes the transports New builds. The zero value is each
// transport's defaults. The RDMA fields are ignored without -tags rdma.
type Config struct {
	// RDMARendezvous is rdma.Config.Rendezvous by name: "read", "write",
	// or "auto" ("" too).
	RDMARendezvous string
	// RDMAWriteChunk is rdma.Config.WriteChunk: bytes, 0 for the
	// provider's default, negative for one write per payload.
	RDMAWriteChunk int
	// RDMAMemBudget is rdma.Config.MemBudget: the registered memory each
	// RDMA domain (NIC port) may hold, in bytes; 0 for the default,
	// 1 GiB. Half of it may be lent for long-lived use (an OSD's read
	// cache), the rest is for links. Else at least MinRDMAMemBudget.
	RDMAMemBudget int64
	// RDMACQEntries is rdma.Config.CQEntries: the entries of each
	// completion queue of an RDMA domain, which its links share (more
	// CQs open as links fill them); 0 for the default.
	RDMACQEntries int
}

// MinRDMAMemBudget is the smallest RDMAMemBudget New takes: with the
// default buffers one link registers about 5 MiB (docs/rdma.md,
// "Tuning"), so a smaller budget could not hold three links, and a
// daemon would fail its sessions rather than serve.
const MinRDMAMemBudget = 16 << 20

// BadRDMAMemBudgetError is the error of an RDMA memory budget that does
// not parse or is out of range.
type BadRDMAMemBudgetError struct {
	Value  string // as given
	Reason string
}

func (e *BadRDMAMemBudgetError) Error() string {
	return fmt.Sprintf("RDMA memory budget %q: %s", e.Value, e.Reason)
}

// ParseRDMAMemBudget reads an RDMA memory budget in bytes, with or
// without a unit ("1073741824", "512MiB", "4GiB"; "MB" and "GB" are
// powers of ten, as go-humanize reads them): 0 for the default, else at
// least MinRDMAMemBudget. Anything else is a *BadRDMAMemBudgetError,
// never the default: a budget misspelt in a flag or the environment must
// not quietly run with 1 GiB.
func ParseRDMAMemBudget(s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil {
		return 0, &BadRDMAMemBudgetError{Value: s, Reason: "want bytes, with or without a unit (512MiB, 4GiB)"}
	}
	if n > math.MaxInt64 {
		return 0, &BadRDMAMemBudgetError{Value: s, Reason: "too large"}
	}
	if err := checkRDMAMemBudget(int64(n)); err != nil {
		return 0, &BadRDMAMemBudgetError{Value: s, Reason: err.Error()}
	}
	return int64(n), nil
}

// checkRDMAMemBudget says why n cannot be Config.RDMAMemBudget, if it
// cannot.
func checkRDMAMemBudget(n int64) error {
	if n != 0 && n < MinRDMAMemBudget {
		return fmt.Errorf("want 0 (the default, 1 GiB) or at least %s: one link registers about 5 MiB", humanize.IBytes(MinRDMAMemBudget))
	}
	return nil
}

// ConfigFromEnv reads the transports' environment variables:
// OSPREY_RDMA_RENDEZVOUS into RDMARendezvous, OSPREY_RDMA_WRITE_CHUNK
// into RDMAWriteChunk and OSPREY_RDMA_MEM_BUDGET (ParseRDMAMemBudget) into
// RDMAMemBudget. A value that does not parse is an error, not the
// default.
func ConfigFromEnv() (Config, error) {
	cfg := Config{RDMARendezvous: os.Getenv("OSPREY_RDMA_RENDEZVOUS")}
	if s := os.Getenv("OSPREY_RDMA_WRITE_CHUNK"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return Config{}, fmt.Errorf("transports: OSPREY_RDMA_WRITE_CHUNK=%q: want a number of bytes", s)
		}
		cfg.RDMAWriteChunk = n
	}
	if s := os.Getenv("OSPREY_RDMA_MEM_BUDGET"); s != "" {
		n, err := ParseRDMAMemBudget(s)
		if err != nil {
			return Config{}, fmt.Errorf("transports: OSPREY_RDMA_MEM_BUDGET: %w", err)
		}
		cfg.RDMAMemBudget = n
	}
	return cfg, nil
}

// Set is a messenger's transports, as msgr.Options.Transports takes them.
type Set []wire.Transport

// Close closes the transports that hold resources (RDMA's registered
// memory and pollers). Call it after the messengers using them have shut
// down; it ends whatever links they still have.
func (s Set) Close() error {
	var errs []error
	for _, t := range s {
		if c, ok := t.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// New returns fresh instances of the build's transports, tuned by cfg.
// A cfg field out of range is an error (cfg.RDMAMemBudget: a
// *BadRDMAMemBudgetError).
func New(cfg Config) (Set, error) {
	if err := checkRDMAMemBudget(cfg.RDMAMemBudget); err != nil {
		return nil, fmt.Errorf("transports: %w", &BadRDMAMemBudgetError{Value: strconv.FormatInt(cfg.RDMAMemBudget, 10), Reason: err.Error()})
	}
	rdma, err := rdmaTransports(cfg)
	if err != nil {
		return nil, err
	}
	return append(Set{tcp.Transport{}}, rdma...), nil
}

// Default is New with the configuration of the environment
// (ConfigFromEnv): what the osprey binary, its daemons and the tests run.
func Default() (Set, error) {
	cfg, err := ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// OrDefault is for components that take transports as an option and fall
// back to the build's: given when it is not empty (its owner closes it;
// release does nothing), else Default's set with its Close as release.
func OrDefault(given []wire.Transport) (ts []wire.Transport, release func(), err error) {
	if len(given) > 0 {
		return given, func() {}, nil
	}
	set, err := Default()
	if err != nil {
		return nil, nil, err
	}
	return set, func() { set.Close() }, nil
}
