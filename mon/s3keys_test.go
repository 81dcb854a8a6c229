package mon

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestS3KeyCommands: "auth s3-key add" gives an entity pairs that "auth
// get" and "auth ls" show and the auth table carries; "auth s3-key rm"
// takes one away; an entity holds at most maxS3Keys; bad input is
// refused with the error that says what is wrong.
func TestS3KeyCommands(t *testing.T) {
	e := startTestEtcd(t)
	a := startTestMon(t, testConfig(e, "a"))
	c := newTestClient(t, nil, a.Addr())
	mustCommand(t, c, authCmd("auth add", "client.u", map[string]string{"osd": "allow r"}))
	add := func() S3KeyEntry {
		t.Helper()
		var k S3KeyEntry
		rep := mustCommand(t, c, authCmd("auth s3-key add", "client.u", nil))
		if err := json.Unmarshal([]byte(rep.Output), &k); err != nil || len(k.AccessKey) != 20 || len(k.Secret) != 40 {
			t.Fatalf("s3-key add: %q %v", rep.Output, err)
		}
		return k
	}
	k1, k2 := add(), add()
	if k1.AccessKey == k2.AccessKey {
		t.Fatal("two keys with one id")
	}
	var got AuthEntry
	if err := json.Unmarshal([]byte(mustCommand(t, c, authCmd("auth get", "client.u", nil)).Output), &got); err != nil ||
		len(got.S3Keys) != 2 || got.S3Keys[0] != k1 || got.S3Keys[1] != k2 {
		t.Fatalf("auth get: %+v %v", got, err)
	}
	tb, err := a.auth.listTable(ctxFor(t, 10*time.Second))
	if err != nil || len(tb.Entries) != 1 || len(tb.Entries[0].S3Keys) != 2 {
		t.Fatalf("auth table: %v %v", tb, err)
	}
	if pub := withoutS3Keys(tb); len(pub.Entries) != 1 || len(pub.Entries[0].S3Keys) != 0 || len(tb.Entries[0].S3Keys) != 2 {
		t.Fatalf("the table without S3 keys: %v (and the one it came from: %v)", pub, tb)
	}

	rm := &osdpb.MonCommand{Prefix: "auth s3-key rm", Entity: "client.u", AccessKey: k1.AccessKey}
	mustCommand(t, c, rm)
	var ls []AuthEntry
	if err := json.Unmarshal([]byte(mustCommand(t, c, authCmd("auth ls", "", nil)).Output), &ls); err != nil ||
		len(ls) != 1 || len(ls[0].S3Keys) != 1 || ls[0].S3Keys[0] != k2 {
		t.Fatalf("auth ls after rm: %+v %v", ls, err)
	}

	for _, bad := range []struct {
		what string
		cmd  *osdpb.MonCommand
		want osdpb.Status
	}{
		{"rm of a key removed", rm, osdpb.Status_NO_SUCH_ENTITY},
		{"add to no entity", authCmd("auth s3-key add", "client.nobody", nil), osdpb.Status_NO_SUCH_ENTITY},
		{"add to a bad name", authCmd("auth s3-key add", "nobody", nil), osdpb.Status_INVALID_ARGUMENT},
		{"rm of a malformed id", &osdpb.MonCommand{Prefix: "auth s3-key rm", Entity: "client.u", AccessKey: "a/b"}, osdpb.Status_INVALID_ARGUMENT},
		{"rm of no id", &osdpb.MonCommand{Prefix: "auth s3-key rm", Entity: "client.u"}, osdpb.Status_INVALID_ARGUMENT},
	} {
		_, err := c.Command(ctxFor(t, 10*time.Second), bad.cmd)
		var oe *ops.Error
		if !errors.As(err, &oe) || oe.Status != bad.want {
			t.Errorf("%s: %v, want %v", bad.what, err, bad.want)
		}
	}

	for range maxS3Keys - 1 {
		add()
	}
	_, err = c.Command(ctxFor(t, 10*time.Second), authCmd("auth s3-key add", "client.u", nil))
	if oe := (*ops.Error)(nil); !errors.As(err, &oe) || oe.Status != osdpb.Status_INVALID_ARGUMENT {
		t.Fatalf("key %d: %v, want InvalidArgument", maxS3Keys+1, err)
	}
}
