package osd

import (
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// FuzzTidOf: tidOf reads the tid of any OSD-to-OSD message without
// decoding it; on arbitrary bytes it must not panic, and on a real message
// it must agree with the full decode.
func FuzzTidOf(f *testing.F) {
	for _, m := range []proto.Message{
		&osdpb.PGLogPullReply{Tid: 7, Entries: []*osdpb.LogEntry{{Bucket: "b", Key: "k"}}},
		&osdpb.RepOpReply{Tid: 1 << 40, Pg: 3},
		&osdpb.ListObjectsReply{Tid: 1, Truncated: true},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x50, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		got := tidOf(b)
		var r osdpb.PGBackfillReply // tid is field 10 here too
		if proto.Unmarshal(b, &r) == nil && got != r.Tid {
			t.Fatalf("tidOf %d, decoded %d", got, r.Tid)
		}
	})
}
