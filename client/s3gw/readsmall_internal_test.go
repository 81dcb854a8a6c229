package s3gw

import (
	"bytes"
	"errors"
	"testing"
)

// TestReadSmallOneBuffer: an XML body of known length is read whole into
// one buffer of its size, not grown by doubling (which held up to twice
// what the body budget charged it); one past the limit, known or not, is
// MaxMessageLengthExceeded.
func TestReadSmallOneBuffer(t *testing.T) {
	body := bytes.Repeat([]byte("<Object><Key>k</Key></Object>"), 100_000) // ~2.9 MB
	for _, size := range []int64{int64(len(body)), -1} {
		b, err := readSmall(bytes.NewReader(body), size, maxXMLBody)
		if err != nil || !bytes.Equal(b, body) {
			t.Fatalf("size %d: %d bytes, %v", size, len(b), err)
		}
	}
	r := bytes.NewReader(body)
	allocs := testing.AllocsPerRun(5, func() {
		r.Reset(body)
		if _, err := readSmall(r, int64(len(body)), maxXMLBody); err != nil {
			t.Fatal(err)
		}
	})
	if !raceEnabled && allocs > 2 {
		t.Errorf("%.0f allocations to read a body of known length; want its one buffer (and the limit's reader)", allocs)
	}
	for _, size := range []int64{int64(len(body)), -1} {
		_, err := readSmall(bytes.NewReader(body), size, int64(len(body))-1)
		var e *Error
		if !errors.As(err, &e) || e.Code != ErrMaxMessageLengthExceeded.Code {
			t.Fatalf("size %d over the limit: %v", size, err)
		}
	}
}
