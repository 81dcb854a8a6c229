package s3gw_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/msgrtest"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// TestS3KeysOfEntities: a gateway on a cluster with auth, as its own
// entity (profile s3-gateway), serves the S3 keys of the cluster's
// entities and allows each what its entity's osd caps allow: a read-only
// user reads and is refused writes, a one-bucket user is refused other
// buckets (and sees only its own in ListBuckets), an unknown key and an
// unsigned request are refused, a key works the moment it is made and is
// refused once removed.
func TestS3KeysOfEntities(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := osdtest.StartLocal(t, local.Options{OSDs: 1, Replicas: 1, PGs: 8, WithMon: true, Dir: t.TempDir(), Logger: quiet})
	mons := []string{c.Mon.Addr()}
	gk := osdtest.Keyring(t, c, "client.s3-gateway", mon.S3GatewayCaps)
	cl, err := client.New(ctx, client.Options{Mon: mons, Keyring: gk, MD5: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// An entity without the profile is refused the secrets at once, and
	// neither that nor a Close leaves anything running.
	before := runtime.NumGoroutine()
	plain := osdtest.Keyring(t, c, "client.plain", map[string]string{auth.ServiceMon: "allow r"})
	if _, err := s3gw.NewClusterCredentials(ctx, s3gw.ClusterCredentialsOptions{Mon: mons, Keyring: plain, Logger: quiet}); err == nil || !strings.Contains(err.Error(), "s3-gateway") {
		t.Fatalf("credentials as an entity without the s3-gateway profile: %v", err)
	}
	creds, err := s3gw.NewClusterCredentials(ctx, s3gw.ClusterCredentialsOptions{Mon: mons, Keyring: gk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	creds.Close()
	msgrtest.EventuallyDescribed(t, 10*time.Second, func() string { return "goroutines back to their count (leak?)" },
		func() bool { return runtime.NumGoroutine() <= before })
	creds, err = s3gw.NewClusterCredentials(ctx, s3gw.ClusterCredentialsOptions{Mon: mons, Keyring: gk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer creds.Close()
	gwLog := &osdtest.LogBuffer{}
	gw, err := s3gw.New(s3gw.Options{Client: cl, Credentials: creds, Logger: slog.New(slog.NewTextHandler(gwLog, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	admin, err := monclient.New(ctx, monclient.Options{Addrs: mons, Keyring: c.AdminKeyring, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	// An OSD's entity subscribes to the auth table too: every table it
	// gets, pushed or fetched, must come without the S3 secrets.
	osdKey := osdtest.Keyring(t, c, "osd.9", mon.OSDCaps)
	var osdTables []*osdpb.AuthTable // under OnAuth's serialization, read after Close
	osdSub, err := monclient.New(ctx, monclient.Options{Addrs: mons, Keyring: osdKey, Logger: quiet,
		OnAuth: func(t *osdpb.AuthTable) { osdTables = append(osdTables, t) }})
	if err != nil {
		t.Fatal(err)
	}
	defer osdSub.Close()
	if _, err := osdSub.Subscribe(ctx); err != nil {
		t.Fatal(err)
	}

	s3c := func(access, secret string) *s3.Client {
		return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(access, secret, "")})
	}
	// user makes entity with these osd caps and an S3 key pair for it,
	// through the mon's command, and signs with the pair at once.
	user := func(entity, osdCaps string) (*s3.Client, string) {
		t.Helper()
		if _, err := c.Mon.GetOrCreateKeyring(ctx, entity, map[string]string{auth.ServiceOSD: osdCaps}); err != nil {
			t.Fatal(err)
		}
		rep, err := admin.Command(ctx, &osdpb.MonCommand{Prefix: "auth s3-key add", Entity: entity})
		if err != nil {
			t.Fatal(err)
		}
		var k mon.S3KeyEntry
		if err := json.Unmarshal([]byte(rep.Output), &k); err != nil || len(k.AccessKey) != 20 || len(k.Secret) != 40 {
			t.Fatalf("s3-key add: %q %v", rep.Output, err)
		}
		return s3c(k.AccessKey, k.Secret), k.AccessKey
	}
	body := func() *strings.Reader { return strings.NewReader("data") }
	put := func(c *s3.Client, bucket, key string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: body()})
		return err
	}
	get := func(c *s3.Client, bucket, key string) error {
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err == nil {
			out.Body.Close()
		}
		return err
	}

	adm, _ := user("client.owner", "allow rw")
	for _, b := range []string{"shared", "private"} {
		if _, err := adm.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
		if err := put(adm, b, "k"); err != nil {
			t.Fatal(err)
		}
	}

	ro, roKey := user("client.reader", "allow r")
	if err := get(ro, "shared", "k"); err != nil {
		t.Fatalf("read-only user's GET: %v", err)
	}
	wantCode(t, "read-only PUT", put(ro, "shared", "new"), "AccessDenied", 403)
	_, err = ro.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("shared"), Key: aws.String("k")})
	wantCode(t, "read-only DELETE", err, "AccessDenied", 403)
	// DeleteObjects: a reader is refused key by key, as S3 does.
	del, err := ro.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("shared"), Delete: &types.Delete{
		Objects: []types.ObjectIdentifier{{Key: aws.String("k")}, {Key: aws.String("absent")}}}})
	if err != nil || len(del.Deleted) != 0 || len(del.Errors) != 2 || aws.ToString(del.Errors[0].Code) != "AccessDenied" || aws.ToString(del.Errors[1].Code) != "AccessDenied" {
		t.Fatalf("a read-only user's DeleteObjects: %+v, %v", del, err)
	}
	_, err = ro.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("mine")})
	wantCode(t, "read-only CreateBucket", err, "AccessDenied", 403)
	if acl, err := ro.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("shared")}); err != nil ||
		*acl.Owner.ID != "client.reader" || len(acl.Grants) != 1 || acl.Grants[0].Permission != types.PermissionRead {
		t.Fatalf("a read-only user's GetBucketAcl: %+v, %v", acl, err)
	}
	if err := get(adm, "shared", "k"); err != nil {
		t.Fatalf("the object a refused DELETE named: %v", err)
	}

	if _, ok := creds.Keeper.Table().LookupS3(roKey); !ok {
		t.Fatal("the gateway's table lacks the reader's key")
	}
	if tb, err := osdSub.FetchAuth(ctx); err != nil {
		t.Fatal(err)
	} else if _, ok := tb.Lookup("client.reader"); !ok || tb.Len() == 0 {
		t.Fatal("an OSD's fetched table lacks client.reader")
	} else if _, ok := tb.LookupS3(roKey); ok {
		t.Fatal("an OSD's fetched auth table carries S3 secrets")
	}

	one, oneKey := user("client.one", "allow rw bucket=shared")
	if err := put(one, "shared", "by-one"); err != nil {
		t.Fatalf("one-bucket user's PUT in its bucket: %v", err)
	}
	wantCode(t, "one-bucket GET elsewhere", get(one, "private", "k"), "AccessDenied", 403)
	wantCode(t, "one-bucket PUT elsewhere", put(one, "private", "x"), "AccessDenied", 403)
	_, err = one.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("private"), Delete: &types.Delete{
		Objects: []types.ObjectIdentifier{{Key: aws.String("k")}}}})
	wantCode(t, "one-bucket DeleteObjects elsewhere", err, "AccessDenied", 403)
	_, err = one.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("shared"), Key: aws.String("copied"), CopySource: aws.String("private/k")})
	wantCode(t, "copy from a bucket it may not read", err, "AccessDenied", 403)
	lb, err := one.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range lb.Buckets {
		names = append(names, aws.ToString(b.Name))
	}
	if !slices.Equal(names, []string{"shared"}) || aws.ToString(lb.Owner.ID) != "client.one" {
		t.Fatalf("one-bucket user's ListBuckets: %v owner %v", names, aws.ToString(lb.Owner.ID))
	}

	wantCode(t, "unknown key", get(s3c("AKNOSUCHKEYNOSUCHKEY", "secret"), "shared", "k"), "InvalidAccessKeyId", 403)
	resp, err := http.Get(srv.URL + "/shared/k")
	if err != nil {
		t.Fatal(err)
	}
	xmlBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(xmlBody), "<Code>AccessDenied</Code>") || !strings.Contains(string(xmlBody), "<RequestId>") {
		t.Fatalf("anonymous GET: %d %s", resp.StatusCode, xmlBody)
	}

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	// eventually polls until ok says the change took effect.
	eventually := func(what string, ok func() (bool, error)) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; <-tick.C {
			done, err := ok()
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s, 10s on: %v", what, err)
			}
		}
	}
	// New caps apply to the keys the entity has, at the next push.
	if _, err := admin.Command(ctx, &osdpb.MonCommand{Prefix: "auth caps", Entity: "client.reader", Caps: map[string]string{auth.ServiceOSD: "allow rw"}}); err != nil {
		t.Fatal(err)
	}
	eventually("the reader given w still may not write", func() (bool, error) {
		err := put(ro, "shared", "by-reader")
		return err == nil, err
	})

	if _, err := admin.Command(ctx, &osdpb.MonCommand{Prefix: "auth s3-key rm", Entity: "client.one", AccessKey: oneKey}); err != nil {
		t.Fatal(err)
	}
	eventually("a removed key still works", func() (bool, error) {
		err := get(one, "shared", "k")
		c, _ := code(err)
		return c == "InvalidAccessKeyId", err
	})
	osdSub.Close()
	sawClientOne := false
	for _, tb := range osdTables {
		for _, e := range tb.Entries {
			if len(e.S3Keys) > 0 {
				t.Fatalf("an OSD was pushed %s's S3 keys", e.Entity)
			}
			sawClientOne = sawClientOne || e.Entity == "client.one"
		}
	}
	if !sawClientOne {
		t.Fatalf("the OSD's subscription saw no table with client.one (%d tables)", len(osdTables))
	}

	// The cluster refusing the gateway itself (its osd caps cut, as a
	// key rotated under it) is no user's doing: 503, the detail in the
	// gateway's log, not 403 with the gateway's entity in the message.
	if _, err := admin.Command(ctx, &osdpb.MonCommand{Prefix: "auth caps", Entity: "client.s3-gateway",
		Caps: map[string]string{auth.ServiceMon: mon.S3GatewayCaps[auth.ServiceMon], auth.ServiceOSD: ""}}); err != nil {
		t.Fatal(err)
	}
	noRetry := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: adm.Options().Credentials, RetryMaxAttempts: 1})
	eventually("a GET by a gateway refused by the cluster", func() (bool, error) {
		err := get(noRetry, "shared", "k")
		c, status := code(err)
		if c == "AccessDenied" || status == 403 {
			t.Fatalf("the cluster refusing the gateway answered the user %v", err)
		}
		return c == "ServiceUnavailable" && status == 503 && !strings.Contains(err.Error(), "s3-gateway"), err
	})
	// Not ready meanwhile (a load balancer's probe, osprey s3's /readyz),
	// and ready again once its caps are back, with no request sent it.
	if err := gw.Ready(); err == nil || !strings.Contains(err.Error(), "refused the S3 gateway") {
		t.Fatalf("a gateway the cluster refuses: Ready %v", err)
	}
	if _, err := admin.Command(ctx, &osdpb.MonCommand{Prefix: "auth caps", Entity: "client.s3-gateway", Caps: mon.S3GatewayCaps}); err != nil {
		t.Fatal(err)
	}
	eventually("the gateway ready again once its caps are back", func() (bool, error) {
		err := gw.Ready()
		return err == nil, err
	})
	if err := get(noRetry, "shared", "k"); err != nil {
		t.Fatalf("a GET once the gateway's caps are back: %v", err)
	}
	// Caps of the gateway's own that name one bucket: a request for
	// another is refused it, and the gateway stays ready, as it serves
	// that bucket still.
	if _, err := admin.Command(ctx, &osdpb.MonCommand{Prefix: "auth caps", Entity: "client.s3-gateway",
		Caps: map[string]string{auth.ServiceMon: mon.S3GatewayCaps[auth.ServiceMon], auth.ServiceOSD: "allow rw bucket=shared"}}); err != nil {
		t.Fatal(err)
	}
	eventually("a GET of a bucket the gateway's caps leave out", func() (bool, error) {
		err := get(noRetry, "other-bucket", "k")
		_, status := code(err)
		return status == 503, err
	})
	if err := gw.Ready(); err != nil {
		t.Fatalf("a gateway refused one bucket its caps leave out: Ready %v", err)
	}
	if _, err := admin.Command(ctx, &osdpb.MonCommand{Prefix: "auth caps", Entity: "client.s3-gateway", Caps: mon.S3GatewayCaps}); err != nil {
		t.Fatal(err)
	}
	// The gateway's entity removed: the mons refuse it the table, so it
	// cannot tell whether a key exists. 503 too, not 403
	// InvalidAccessKeyId, which tells users their keys are gone.
	if _, err := admin.Command(ctx, &osdpb.MonCommand{Prefix: "auth rm", Entity: "client.s3-gateway"}); err != nil {
		t.Fatal(err)
	}
	eventually("a GET by a gateway whose entity was removed", func() (bool, error) {
		err := get(noRetry, "shared", "k")
		c, status := code(err)
		if c == "InvalidAccessKeyId" || status == 403 {
			t.Fatalf("a gateway whose entity was removed answered the user %v", err)
		}
		return c == "ServiceUnavailable" && status == 503 && !strings.Contains(err.Error(), "s3-gateway"), err
	})
	// Every request fails alike: the log says so once in a while, not
	// once per request.
	for range 20 {
		if _, status := code(get(noRetry, "shared", "k")); status != 503 {
			t.Fatalf("a gateway refused by the mons answered %d", status)
		}
	}
	if n := strings.Count(gwLog.String(), "s3: request failed"); n < 1 || n > 3 {
		t.Fatalf("%d lines of failed requests in the gateway's log after 20 failures alike:\n%s", n, gwLog.String())
	}
}
