package client_test

import (
	"bytes"
	"context"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
)

func TestParseAddrs(t *testing.T) {
	got := client.ParseAddrs("10.0.0.1:6800, tcp://10.0.0.2:6800", "rdma+verbs://10.0.1.1:6800", " ", "[::1]:6800\n")
	want := []string{"tcp://10.0.0.1:6800", "tcp://10.0.0.2:6800", "rdma+verbs://10.0.1.1:6800", "tcp://[::1]:6800"}
	if !slices.Equal(got, want) {
		t.Errorf("ParseAddrs = %q, want %q", got, want)
	}
	if got := client.ParseAddrs(" , ", ""); len(got) != 0 {
		t.Errorf("ParseAddrs of nothing = %q", got)
	}
}

// TestBareSeedsAndWholeCRC32C: New takes a bare HOST:PORT seed, as the CLI
// does, and a multipart object's info carries the CRC32C of its bytes
// (combined from its parts'), in stat, listings and the put's answer.
func TestBareSeedsAndWholeCRC32C(t *testing.T) {
	c := osdtest.Start(t, osdtest.Options{OSDs: 1, PGs: 8})
	var bare []string
	for _, s := range c.Seeds() {
		bare = append(bare, strings.TrimPrefix(s, "tcp://"))
	}
	cl := c.Client(t, func(o *client.Options) { o.Seeds = bare })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.MakeBucket(ctx, "crc"); err != nil {
		t.Fatal(err)
	}
	data := osdtest.Payload(11<<20+3, 5)
	want := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	put, err := cl.PutObject(ctx, "crc", "mp", bytes.NewReader(data), int64(len(data)), client.PutOptions{PartSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(put.ETag, "-3") || put.CRC32C != want {
		t.Errorf("put: ETag %s CRC32C %08x, want a 3-part object with %08x", put.ETag, put.CRC32C, want)
	}
	if st, err := cl.StatObject(ctx, "crc", "mp"); err != nil || st.CRC32C != want {
		t.Errorf("stat: CRC32C %08x, %v; want %08x", st.CRC32C, err, want)
	}
	for info, err := range cl.ListObjects(ctx, "crc", client.ListOptions{}) {
		if err != nil || info.CRC32C != want {
			t.Errorf("list: %s CRC32C %08x, %v; want %08x", info.Key, info.CRC32C, err, want)
		}
	}
}
