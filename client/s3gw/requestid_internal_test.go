package s3gw

import "testing"

// TestRequestIDs: 16 upper-case hex digits, and no two alike, as clients
// and the access log tell requests apart by them.
func TestRequestIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 10000 {
		id := newRequestID()
		if len(id) != 16 {
			t.Fatalf("request id %q: want 16 hex digits", id)
		}
		for _, c := range id {
			if !('0' <= c && c <= '9' || 'A' <= c && c <= 'F') {
				t.Fatalf("request id %q: want upper-case hex", id)
			}
		}
		if seen[id] {
			t.Fatalf("request id %q made twice", id)
		}
		seen[id] = true
	}
}
