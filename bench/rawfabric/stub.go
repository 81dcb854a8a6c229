//go:build !rdma

package rawfabric

import "context"

// Built reports whether this binary has the raw libfabric baseline.
const Built = false

// Probe returns ErrNotBuilt.
func Probe(provider string) (Limits, error) { return Limits{}, ErrNotBuilt }

// Pair is a connected client and server; without the rdma tag there is
// none.
type Pair struct{}

// Open returns ErrNotBuilt.
func Open(ctx context.Context, cfg Config) (*Pair, error) { return nil, ErrNotBuilt }

// Limits are the provider's, as probed when the pair was opened.
func (p *Pair) Limits() Limits { return Limits{} }

// Kick does nothing.
func (p *Pair) Kick() {}

// Run returns ErrNotBuilt.
func (p *Pair) Run(ctx context.Context, h Hooks) error { return ErrNotBuilt }

// Close does nothing.
func (p *Pair) Close() error { return nil }
