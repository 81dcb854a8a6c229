package msgr

import (
	"reflect"
	"testing"
)

// TestAddCountersSumsEveryCounter: TransportStats and the retired totals
// sum every cumulative counter of ConnStats. A counter added to ConnStats
// and forgotten in addCounters would read 0 in the per-transport totals
// (SealFailures did); the windows, queues, RTT and mode are the link's
// state, not counters.
func TestAddCountersSumsEveryCounter(t *testing.T) {
	state := map[string]bool{"SendCredits": true, "SendBytesCredit": true, "RecvWindowMsgs": true,
		"QueuedMsgs": true, "QueuedBytes": true, "RTT": true, "Mode": true}
	var one ConnStats
	v := reflect.ValueOf(&one).Elem()
	for i := range v.NumField() {
		if f := v.Type().Field(i); !state[f.Name] {
			if f.Type.Kind() != reflect.Uint64 {
				t.Fatalf("ConnStats.%s is a %v: a counter or link state?", f.Name, f.Type)
			}
			v.Field(i).SetUint(1)
		}
	}
	var sum ConnStats
	sum.addCounters(&one)
	sum.addCounters(&one)
	s := reflect.ValueOf(sum)
	for i := range s.NumField() {
		name := s.Type().Field(i).Name
		if state[name] {
			if !s.Field(i).IsZero() {
				t.Errorf("addCounters summed %s, the link's state", name)
			}
		} else if got := s.Field(i).Uint(); got != 2 {
			t.Errorf("addCounters: %s = %d after adding 1 twice", name, got)
		}
	}
}
