//go:build rdma

package rdma

import (
	"testing"
	"time"
)

// TestSpinBudgetSteps walks a budget of 1.6 ms (steps of 100 µs) through
// the gaps and idle sleeps its rules name, one step at a time.
func TestSpinBudgetSteps(t *testing.T) {
	const us = time.Microsecond
	b := newSpinBudget(1600 * us)
	steps := []struct {
		what  string
		gap   time.Duration // 0: an idle sleep instead
		want  time.Duration
		grows uint64
	}{
		{"a gap within the budget changes nothing", 1600 * us, 1600 * us, 0},
		{"a gap beyond the bound halves it", 1601 * us, 800 * us, 0},
		{"and again", time.Second, 400 * us, 0},
		{"an idle sleep halves it", 0, 200 * us, 0},
		{"a gap within it changes nothing", 150 * us, 200 * us, 0},
		{"below a sixteenth of the bound it is zero", 0, 100 * us, 0},
		{"", 0, 0, 0},
		{"zero stays zero", 0, 0, 0},
		{"a gap a spin up to the bound would have caught grows it from zero to a step", 1 * us, 100 * us, 1},
		{"then doubles it", 1000 * us, 200 * us, 2},
		{"", 1000 * us, 400 * us, 3},
		{"", 1000 * us, 800 * us, 4},
		{"up to the bound", 1000 * us, 1600 * us, 5},
		{"and no further", 1600 * us, 1600 * us, 5},
	}
	for i, s := range steps {
		if s.gap == 0 {
			b.sleptIdle()
		} else {
			b.found(s.gap)
		}
		if got := b.budget(); got != s.want || b.grows.Load() != s.grows {
			t.Fatalf("step %d (%s): budget %v after %d grows, want %v after %d", i, s.what, got, b.grows.Load(), s.want, s.grows)
		}
	}
	if got := b.shrinks.Load(); got != 5 {
		t.Fatalf("%d shrinks counted, want 5", got)
	}
}

// TestSpinBudgetTinyBound: a bound below spinSteps nanoseconds still
// grows back from zero.
func TestSpinBudgetTinyBound(t *testing.T) {
	b := newSpinBudget(4)
	for range 3 { // 4, 2, 1, 0 ns
		b.sleptIdle()
	}
	if b.budget() != 0 {
		t.Fatalf("budget %v after three idle sleeps, want 0", b.budget())
	}
	b.found(2)
	if b.budget() == 0 {
		t.Fatal("a gap within the bound left the budget at zero")
	}
}
