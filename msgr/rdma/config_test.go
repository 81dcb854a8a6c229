//go:build rdma

package rdma

import "testing"

// TestWriteChunkDefaults checks where RDMA writes are split by default:
// on tcp, which copies into its socket inside fi_write, and nowhere else;
// that OSPREY_RDMA_WRITE_CHUNK and Config override the default.
func TestWriteChunkDefaults(t *testing.T) {
	for _, c := range []struct {
		prov, env string
		chunk     int
		want      int
	}{
		{prov: "tcp", want: DefaultWriteChunk},
		{prov: "sockets", want: 0},
		{prov: "verbs", want: 0},
		{prov: "efa", want: 0},
		{prov: "tcp", chunk: -1, want: 0},
		{prov: "verbs", chunk: 1 << 20, want: 1 << 20},
		{prov: "tcp", env: "65000", want: 65000},
		{prov: "verbs", env: "65000", want: 65000},
		{prov: "tcp", env: "-1", want: 0},
		{prov: "tcp", env: "many", want: DefaultWriteChunk},
		{prov: "tcp", env: "65000", chunk: 1000, want: 1000},
	} {
		t.Setenv("OSPREY_RDMA_WRITE_CHUNK", c.env)
		tr := NewTransport("tcp", Config{WriteChunk: c.chunk})
		if got := tr.cfg.writeChunk(c.prov); got != c.want {
			t.Errorf("%s with WriteChunk %d, OSPREY_RDMA_WRITE_CHUNK=%q: writes of %d bytes, want %d", c.prov, c.chunk, c.env, got, c.want)
		}
	}
}
