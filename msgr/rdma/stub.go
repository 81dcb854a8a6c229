//go:build !rdma

package rdma

import (
	"strings"

	"github.com/ospreystore/osprey/msgr/wire"
)

// Built reports whether this binary has the RDMA transport.
const Built = false

// Transports returns the RDMA transports built into this binary: none.
func Transports() []wire.Transport { return nil }

// Hint explains a missing rdma+ transport.
func Hint(scheme string) string {
	if strings.HasPrefix(scheme, "rdma+") {
		return "this binary was built without RDMA support; rebuild with `go build -tags rdma` (needs cgo and Debian's libfabric-dev)"
	}
	return ""
}
