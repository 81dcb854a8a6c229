package client

import (
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// FuzzReplyTid: replyTid finds a reply's request id without decoding the
// reply; it must never panic and must agree with a full decode.
func FuzzReplyTid(f *testing.F) {
	for _, m := range []proto.Message{
		&osdpb.ObjectReply{Header: &osdpb.ReplyHeader{Req: &osdpb.ReqID{Client: 9, Tid: 77}}, Offset: 3},
		&osdpb.ListObjectsReply{Header: &osdpb.ReplyHeader{Status: osdpb.Status_NO_SUCH_BUCKET, Req: &osdpb.ReqID{Tid: 1}}},
		&osdpb.BucketReply{},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := replyTid(b)
		var r osdpb.BucketReply
		if proto.Unmarshal(b, &r) == nil && got != r.GetHeader().GetReq().GetTid() {
			t.Fatalf("replyTid %d, decoded %d", got, r.GetHeader().GetReq().GetTid())
		}
	})
}
