package pending

import (
	"slices"
	"testing"
)

// TestTableOnce: an entry leaves the table once, by whichever of Take,
// TakeIf, FailIf or Close comes first; what the others find is nothing.
func TestTableOnce(t *testing.T) {
	var tb Table[string]
	a := tb.Add("a")
	b := tb.Add("b")
	if a == b || a == 0 || b == 0 {
		t.Fatalf("Add gave tids %d and %d", a, b)
	}
	if !tb.Put(100, "c") || !tb.Put(101, "d") {
		t.Fatal("Put refused on an open table")
	}
	if v, ok := tb.Get(a); !ok || v != "a" || tb.Len() != 4 {
		t.Fatalf("Get(%d) = %q, %v with %d entries", a, v, ok, tb.Len())
	}
	if v, ok := tb.Take(a); !ok || v != "a" {
		t.Fatalf("Take(%d) = %q, %v", a, v, ok)
	}
	if _, ok := tb.Take(a); ok {
		t.Fatal("an entry was taken twice")
	}
	if _, ok := tb.TakeIf(b, func(v string) bool { return v == "x" }); ok {
		t.Fatal("TakeIf took an entry its match refused")
	}
	if v, ok := tb.TakeIf(b, func(v string) bool { return v == "b" }); !ok || v != "b" {
		t.Fatalf("TakeIf(%d) = %q, %v", b, v, ok)
	}
	var failed []string
	fail := func(v string) { failed = append(failed, v) }
	if n := tb.FailIf(func(v string) bool { return v == "c" }, fail); n != 1 || !slices.Equal(failed, []string{"c"}) {
		t.Fatalf("FailIf failed %d: %q", n, failed)
	}
	if !tb.Close(fail) || !slices.Equal(failed, []string{"c", "d"}) || tb.Len() != 0 {
		t.Fatalf("Close failed %q, %d left", failed, tb.Len())
	}
	if tb.Close(fail) || len(failed) != 2 {
		t.Fatal("a second Close failed entries again")
	}
	if tb.Put(102, "e") || tb.Len() != 0 {
		t.Fatal("Put registered an entry in a closed table")
	}
}
