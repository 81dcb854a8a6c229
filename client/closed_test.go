package client_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestClosedClientFailsAtOnce: an op on a closed Client fails with
// ErrClosed instead of retrying its shut messenger until RetryFor (here
// an hour) or the caller's context runs out.
func TestClosedClientFailsAtOnce(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 8})
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = time.Hour })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := cl.MakeBucket(ctx, "closed"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	big := osdtest.Payload(6<<20, 1)
	for name, op := range map[string]func() error{
		"stat": func() error { _, err := cl.StatObject(ctx, "closed", "k"); return err },
		"put": func() error {
			_, err := osdtest.Put(ctx, cl, "closed", "k", []byte("x"), client.PutOptions{})
			return err
		},
		"put in parts": func() error {
			_, err := cl.PutObject(ctx, "closed", "k", bytes.NewReader(big), int64(len(big)), client.PutOptions{PartSize: 5 << 20})
			return err
		},
		"list": func() error {
			for _, err := range cl.ListObjects(ctx, "closed", client.ListOptions{}) {
				return err
			}
			return nil
		},
	} {
		if err := op(); !errors.Is(err, client.ErrClosed) {
			t.Errorf("%s on a closed client: %v, want ErrClosed", name, err)
		}
	}
}
