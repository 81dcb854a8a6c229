package osd

import (
	"testing"
	"time"
)

// TestLateLiftKeepsANewerFence: the lift of a failed delete, arriving
// after the fence of the delete retried after it, leaves that fence up
// (each lift names its delete); the newer delete's own lift takes it down,
// and a fence lifts itself once its time is up.
func TestLateLiftKeepsANewerFence(t *testing.T) {
	var f fences
	f.set("b", 1, false, time.Minute)
	f.set("b", 2, false, time.Minute) // the retry's raise
	f.set("b", 1, true, 0)            // the first delete's late lift
	if !f.fenced("b") {
		t.Fatal("a late lift took down a newer delete's fence")
	}
	f.set("b", 2, true, 0)
	if f.fenced("b") {
		t.Fatal("the delete's own lift left its fence up")
	}
	f.set("b", 3, false, 0) // its time is up at once
	if f.fenced("b") {
		t.Fatal("a fence past its time still stands")
	}
}
