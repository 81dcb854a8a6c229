package msgr_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/ospreystore/osprey/msgr"
)

// TestConnErrorText names the peer when the connection knows it, and only
// the address when it does not (a mon, dialled before its name is known),
// and unwraps to the cause.
func TestConnErrorText(t *testing.T) {
	for _, c := range []struct {
		err  *msgr.ConnError
		want string
	}{
		{&msgr.ConnError{Peer: "osd.3", Addr: "tcp://10.0.0.1:6800", Op: "dial", Err: syscall.ECONNREFUSED},
			"msgr: dial osd.3 (tcp://10.0.0.1:6800): connection refused"},
		{&msgr.ConnError{Addr: "tcp://10.0.0.1:3300", Op: "dial", Err: syscall.ECONNREFUSED},
			"msgr: dial tcp://10.0.0.1:3300: connection refused"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("%q, want %q", got, c.want)
		}
		if !errors.Is(c.err, syscall.ECONNREFUSED) {
			t.Errorf("%v does not unwrap to its cause", c.err)
		}
	}
}
