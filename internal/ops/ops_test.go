package ops

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
)

func TestBucketNames(t *testing.T) {
	good := []string{"abc", "my-bucket", "my.bucket.1", "a" + strings.Repeat("b", 61) + "c", "123",
		"1.2.3", "1.2.3.4.5", "1.2.3.4a", "256.1.1.1"}
	bad := []string{"", "ab", strings.Repeat("a", 64), "My-Bucket", "-abc", "abc-", ".abc", "a..b",
		"192.168.1.1", "0.0.0.0", "xn--abc", "abc-s3alias", "a_b", "a b", "ab\x00", MultipartBucket}
	for _, n := range good {
		if err := CheckBucketName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range bad {
		err := CheckBucketName(n)
		if !errors.Is(err, ErrInvalidBucketName) {
			t.Errorf("%q: got %v, want InvalidBucketName", n, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { CheckBucketName("my.bucket-1") }); n != 0 {
		t.Errorf("a good name cost %v allocations, want 0", n)
	}
}

func TestKeys(t *testing.T) {
	for key, want := range map[string]error{
		"a": nil, "dir/sub/ü.txt": nil, strings.Repeat("k", MaxKeyLen): nil,
		"": ErrInvalidKey, strings.Repeat("k", MaxKeyLen+1): ErrKeyTooLong,
		"bad\xffutf8": ErrInvalidKey, "nul\x00": ErrInvalidKey,
	} {
		if err := CheckKey(key); !errors.Is(err, want) && (want != nil || err != nil) {
			t.Errorf("%.20q: got %v, want %v", key, err, want)
		}
	}
}

func TestErrors(t *testing.T) {
	err := fmt.Errorf("get: %w", Errorf(osdpb.Status_NO_SUCH_KEY, "b/k"))
	if !errors.Is(err, ErrNoSuchKey) || errors.Is(err, ErrNoSuchBucket) {
		t.Fatalf("errors.Is on %v", err)
	}
	if s, msg := StatusOf(err); s != osdpb.Status_NO_SUCH_KEY || msg != "b/k" {
		t.Fatalf("StatusOf: %v %q", s, msg)
	}
	if s, _ := StatusOf(errors.New("disk on fire")); s != osdpb.Status_INTERNAL_ERROR {
		t.Fatalf("plain error maps to %v", s)
	}
	if err := FromReply(&osdpb.ReplyHeader{Status: osdpb.Status_SERVICE_UNAVAILABLE}); !errors.Is(err, ErrServiceUnavailable) || !err.(*Error).Retriable() {
		t.Fatalf("FromReply: %v", err)
	}
	if FromReply(&osdpb.ReplyHeader{}) != nil || FromReply(nil) == nil {
		t.Fatal("FromReply OK/nil")
	}
	if got := ErrKeyTooLong.Error(); got != "KeyTooLongError" {
		t.Fatalf("code %q", got)
	}
	for s := range osdpb.Status_name {
		if strings.HasPrefix(Code(osdpb.Status(s)), "Status(") {
			t.Errorf("status %v has no code", osdpb.Status(s))
		}
	}
	if ReplyType(osdpb.MsgType_MSG_PUT_OBJECT) != osdpb.MsgType_MSG_PUT_OBJECT_REPLY || !IsRequest(osdpb.MsgType_MSG_REP_OP) {
		t.Fatal("reply types")
	}
}

func TestMultipartKeys(t *testing.T) {
	id := NewUploadID()
	if err := CheckUploadID(id); err != nil {
		t.Fatal(err)
	}
	b, k, u, ok := ParseUploadKey(UploadKey("bkt", "a/b/c", id))
	if !ok || b != "bkt" || k != "a/b/c" || u != id {
		t.Fatalf("ParseUploadKey: %q %q %q %v", b, k, u, ok)
	}
	u, n, ok := ParsePartKey(PartKey(id, 42))
	if !ok || u != id || n != 42 {
		t.Fatalf("ParsePartKey: %q %d %v", u, n, ok)
	}
	for _, bad := range []string{"", id, id + "/00000", id + "/10001", id + "/0001x", "zz" + id[2:] + "/00001"} {
		if _, _, ok := ParsePartKey(bad); ok {
			t.Errorf("ParsePartKey(%q) ok", bad)
		}
	}
	set := NewPieceSet()
	for _, tc := range []struct{ n, p uint32 }{{1, 1}, {7, 320}, {MaxParts, MaxParts}} {
		k := PieceKey(id, tc.n, set, tc.p)
		u, n, s, p, ok := ParsePieceKey(k)
		if !ok || u != id || n != tc.n || s != set || p != tc.p || CheckObjectNames(MultipartBucket, k) != nil {
			t.Fatalf("ParsePieceKey(%q): %q %d %q %d %v", k, u, n, s, p, ok)
		}
		if _, _, ok := ParsePartKey(k); ok {
			t.Fatalf("a piece's key %q parses as a part's", k)
		}
	}
	if CheckPieceSet(set) != nil || CheckPieceSet("0123456") == nil || CheckPieceSet("0123456z") == nil {
		t.Fatal("CheckPieceSet")
	}
	for _, bad := range []string{"", PartKey(id, 1), id + "/00000." + set + ".00001", id + "/00001." + set + ".00000", id + "/00001." + set + ".10001",
		id + "/10001." + set + ".00001", id + "/00001-" + set + ".00001", id + "/00001." + set + ".0001x", id + "/00001.0123456z.00001", id + "/00001.00001"} {
		if _, _, _, _, ok := ParsePieceKey(bad); ok {
			t.Errorf("ParsePieceKey(%q) ok", bad)
		}
	}
	for _, bad := range []string{"", "bkt/" + id, "BKT/k/" + id, "bkt/k/" + id[1:]} {
		if _, _, _, ok := ParseUploadKey(bad); ok {
			t.Errorf("ParseUploadKey(%q) ok", bad)
		}
	}
	if CheckObjectNames(MultipartBucket, PartKey(id, 1)) != nil || CheckObjectNames(MultipartBucket, "x") == nil ||
		CheckObjectNames("bkt", "k") != nil || CheckObjectNames("b", "k") == nil {
		t.Fatal("CheckObjectNames")
	}
	if CheckUploadID("not-hex-not-hex-not-hex-not-hex!") == nil {
		t.Fatal("CheckUploadID accepts garbage")
	}
}
