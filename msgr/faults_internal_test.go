package msgr

import (
	"io"
	"log/slog"
	"testing"
)

// Fault points follow from the seed and the messenger's own count of
// links: a messenger that makes its links in the same order fails them at
// the same frames, however many links other messengers of the process
// make in between.
func TestFaultPointsPerMessenger(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	newM := func(name string) *Messenger {
		m, err := New(Options{Name: EntityName(name), Transports: tcpOnly, Logger: quiet,
			Dispatcher: DispatchFunc(func(m *Message) { m.Release() }),
			Faults:     FaultInjection{EveryNFrames: 1000, Seed: 7}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Shutdown(t.Context()) })
		return m
	}
	points := func(m *Messenger, other *Messenger, between int) []int {
		var got []int
		for range 5 {
			for range between {
				other.newLinkRun(nil, nil)
			}
			got = append(got, m.newLinkRun(nil, nil).link.(*faultyLink).next)
		}
		return got
	}
	a, b, noise := newM("osd.0"), newM("osd.1"), newM("osd.2")
	alone := points(a, noise, 0)
	crowded := points(b, noise, 3)
	for i := range alone {
		if alone[i] != crowded[i] {
			t.Fatalf("link %d: fault after frame %d alone, %d with other messengers' links between: %v against %v",
				i, alone[i], crowded[i], alone, crowded)
		}
	}
	if alone[0] == alone[1] && alone[1] == alone[2] {
		t.Fatalf("every link faults at the same frame: %v", alone)
	}
}
