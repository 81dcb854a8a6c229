package client

import "testing"

// TestPageSizeCapped: a page of a listing (objects or uploads) holds 1000
// entries at most, as S3 caps MaxKeys and MaxUploads, and 1000 when none
// or a bad number is asked for.
func TestPageSizeCapped(t *testing.T) {
	for asked, want := range map[int]int{0: 1000, -3: 1000, 1: 1, 999: 999, 1000: 1000, 1001: 1000, 5000: 1000} {
		if got := pageSize(asked); got != want {
			t.Errorf("pageSize(%d) = %d, want %d", asked, got, want)
		}
	}
}
