package ops

import (
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

func TestOSDName(t *testing.T) {
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

// FuzzVarintField: the OSDs' and the mon client's dispatchers read request
// ids with VarintField without decoding the message. On arbitrary bytes it
// must not panic; on bytes that decode, it must agree with the full decode
// and report them well formed.
func FuzzVarintField(f *testing.F) {
	for _, m := range []proto.Message{
		&osdpb.PGLogPullReply{Tid: 7, Entries: []*osdpb.LogEntry{{Bucket: "b", Key: "k"}}},
		&osdpb.RepOpReply{Tid: 1 << 40, Pg: 3, Last: &osdpb.Version{Epoch: 2, Seq: 9}},
		&osdpb.ListObjectsReply{Tid: 1, Truncated: true},
		&osdpb.GetMapReply{Tid: 5, Map: &osdpb.ClusterMap{Epoch: 3}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x50, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := VarintField(b, 10)
		var r osdpb.PGBackfillReply // tid is field 10 here too
		if proto.Unmarshal(b, &r) == nil && (got != r.Tid || !ok) {
			t.Fatalf("VarintField %d (well formed: %v), decoded %d", got, ok, r.Tid)
		}
	})
}
