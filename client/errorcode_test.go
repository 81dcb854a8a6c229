package client_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ospreystore/osprey/client"
)

func TestErrorCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{client.ErrNoSuchKey, "NoSuchKey"},
		{fmt.Errorf("wrapped: %w", client.ErrBucketNotEmpty), "BucketNotEmpty"},
		{errors.New("plain"), ""},
		{nil, ""},
	} {
		if got := client.ErrorCode(c.err); got != c.want {
			t.Errorf("ErrorCode(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
