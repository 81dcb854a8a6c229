package placement

import (
	"strings"
	"testing"
)

// FuzzParsePGID: ParsePGID never panics, and what it accepts is exactly
// what String writes for the id it returns.
func FuzzParsePGID(f *testing.F) {
	for _, s := range []string{"1.1f", "0.0", "meta", "65534.ffffffff", "1.1F", "01.1f", "1.", ".1", "1.x", "-1.1", "1.1.1", "65535.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParsePGID(s)
		if err != nil {
			return
		}
		if id.String() != s {
			t.Fatalf("ParsePGID(%q) = %+v, which String writes %q", s, id, id)
		}
		if _, err := id.StoreID(); err != nil {
			t.Fatalf("ParsePGID(%q) = %+v, which has no store id: %v", s, id, err)
		}
	})
}

func TestParsePGID(t *testing.T) {
	for s, want := range map[string]PGID{"1.1f": {1, 0x1f}, "0.0": {0, 0}, "meta": {0, MetaPG}, "3.a": {3, 10}} {
		if got, err := ParsePGID(s); err != nil || got != want {
			t.Errorf("ParsePGID(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "1", "1.1F", "01.1f", "1.", ".1", "1.x", "-1.1", "1.1.1", "65535.0", "1.ffffffff"} {
		if got, err := ParsePGID(s); err == nil {
			t.Errorf("ParsePGID(%q) = %+v, want an error", s, got)
		}
	}
	// A hex seed too large for 32 bits is out of range, not "not hex".
	if _, err := ParsePGID("1.ffffffffff"); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("ParsePGID(1.ffffffffff): %v", err)
	}
}
