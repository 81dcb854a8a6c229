package osd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ospreystore/osprey/internal/ops"
)

// TestOpErrorPeerTimeoutRetriable: a peer that did not answer a call in
// time (the OSD stopped, SIGSTOP) reaches the client as ServiceUnavailable,
// which it retries, not as an InternalError, which ends its op.
func TestOpErrorPeerTimeoutRetriable(t *testing.T) {
	err := opError(fmt.Errorf("osd.1: no reply to MSG_HEAD_OBJECT: %w", context.DeadlineExceeded))
	var oe *ops.Error
	if !errors.As(err, &oe) || !errors.Is(err, ops.ErrServiceUnavailable) || !oe.Retriable() {
		t.Fatalf("a peer call's timeout: %v, want ServiceUnavailable", err)
	}
}
