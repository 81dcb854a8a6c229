package msgrtest

import (
	"context"
	"testing"

	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
)

// Serve starts a messenger named name on loopback TCP that hands each
// message to handle, then releases it, and returns its address; it stops
// with the test. Clients get StatelessServer sessions, as from a mon. It
// stands in for a server where a test needs answers a real one gives
// only under failures, or none at all.
func Serve(t testing.TB, name msgr.EntityName, handle func(*msgr.Message)) string {
	t.Helper()
	ms, err := msgr.New(msgr.Options{
		Name: name, Logger: Logger(t), Transports: []wire.Transport{tcp.Transport{}},
		Policies: map[string]msgr.Policy{"client": msgr.StatelessServer},
		Dispatcher: msgr.DispatchFunc(func(m *msgr.Message) {
			defer m.Release()
			handle(m)
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ms.Kill)
	addr, err := ms.Listen(context.Background(), "tcp://127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
