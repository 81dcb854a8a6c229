package ops

import "testing"

func TestOSDName(t *testing.T) {
	if got := OSDName(12); got != "osd.12" {
		t.Errorf("OSDName(12) = %q, want osd.12", got)
	}
	for _, id := range []uint32{0, 7, 1<<32 - 1} {
		if got, ok := ParseOSDName(OSDName(id)); !ok || got != id {
			t.Errorf("ParseOSDName(%q) = %d, %v", OSDName(id), got, ok)
		}
	}
	for _, name := range []string{"", "osd.", "osd.-1", "osd.4294967296", "osd.1x", "client.3", "mon.a"} {
		if id, ok := ParseOSDName(name); ok {
			t.Errorf("ParseOSDName(%q) = %d, want no OSD", name, id)
		}
	}
}
