package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func s3Client(endpoint, access, secret string) *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(access, secret, "")})
}

// TestUpAndS3Serve: `osprey up` serves S3 with the key pair it prints
// (client.admin's), and `osprey s3` serves the same cluster from another
// process, as an entity with the s3-gateway profile, to a read-only user
// made with `osprey auth s3-key add`; it takes up its key rotated into its
// --keyring file without a restart, and stops on SIGINT.
func TestUpAndS3Serve(t *testing.T) {
	bin := buildCLI(t)
	up := startUp(t, bin, t.TempDir(), 0, "--log-level", "info", "--s3-access-log=false")
	if up.s3 == nil {
		t.Fatal("osprey up printed no s3 gateway")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	endpoint, _ := up.s3["endpoint"].(string)
	access, _ := up.s3["access_key"].(string)
	secret, _ := up.s3["secret_key"].(string)
	if !strings.HasPrefix(endpoint, "http://127.0.0.1:") || len(access) != 20 || len(secret) != 40 || up.s3["entity"] != "client.admin" {
		t.Fatalf("s3: %v", up.s3)
	}
	c := s3Client(endpoint, access, secret)
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("via-up")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("via-up"), Key: aws.String("k"), Body: strings.NewReader("hello")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s3Client(endpoint, access, "not-the-secret").ListBuckets(ctx, &s3.ListBucketsInput{}); err == nil {
		t.Fatal("a wrong secret was accepted")
	}
	// Every daemon's metrics are where up said, the gateway's counting
	// the requests just made.
	for _, d := range []string{"mon.a", "osd.0", "osd.1", "osd.2"} {
		text := scrapeText(t, up.metrics[d])
		if !strings.Contains(text, "osprey_msgr_sessions{") {
			t.Errorf("%s's metrics at %q have no messenger series", d, up.metrics[d])
		}
		// up's OSDs share one process: their caches are smaller than
		// osprey osd's.
		if want := fmt.Sprintf("osprey_osd_read_cache_limit_bytes %g\n", float64(128<<20)); d != "mon.a" && !strings.Contains(text, want) {
			t.Errorf("%s's read cache is not up's default: no %q", d, want)
		}
	}
	if strings.Contains(up.stderr.String(), "msg=s3 ") {
		t.Errorf("osprey up --s3-access-log=false logged requests:\n%s", up.stderr)
	}
	// Every daemon, the gateway too, says it is ready on its listener
	// (the probes of Kubernetes and load balancers).
	for _, d := range []string{"mon.a", "osd.0", "osd.1", "osd.2", "s3"} {
		if got := scrapeText(t, strings.TrimSuffix(up.metrics[d], "/metrics")+"/readyz"); got != "ready\n" {
			t.Errorf("%s's /readyz: %q", d, got)
		}
	}
	if m := scrapeText(t, up.metrics["s3"]); !strings.Contains(m, `osprey_s3_requests_total{op="PutObject",status="200"} 1`) ||
		!strings.Contains(m, `osprey_s3_requests_total{op="Auth",status="403"} 1`) {
		t.Errorf("the gateway's metrics do not count its requests:\n%s", m)
	}

	// A read-only user with a key pair, made by the CLI.
	m := []string{"--mon", up.mon, "--keyring", up.keyring}
	if _, _, err := run(t, append([]string{"auth", "get-or-create", "client.reader", "osd", "allow r"}, m...)...); err != nil {
		t.Fatal(err)
	}
	keyOut, _, err := run(t, append([]string{"auth", "s3-key", "add", "client.reader"}, m...)...)
	var roAccess, roSecret string
	if _, err := fmt.Sscanf(keyOut, "access key %s\nsecret key %s\n", &roAccess, &roSecret); err != nil || len(roAccess) != 20 {
		t.Fatalf("auth s3-key add: %q %v", keyOut, err)
	}
	ls, _, err := run(t, append([]string{"auth", "ls"}, m...)...)
	if err != nil || !strings.Contains(ls, roAccess) || strings.Contains(ls, roSecret) {
		t.Fatalf("auth ls shows the access key id, not the secret: %v\n%s", err, ls)
	}
	get, _, err := run(t, append([]string{"auth", "get", "client.reader"}, m...)...)
	if err != nil || !strings.Contains(get, "access key "+roAccess+" secret key "+roSecret) {
		t.Fatalf("auth get shows the pair: %v\n%s", err, get)
	}

	// A second gateway, its own process, on the same cluster, as an
	// entity of its own with the gateway's profile.
	gwKeyring := filepath.Join(t.TempDir(), "client.gw.keyring")
	if _, _, err := run(t, append([]string{"auth", "get-or-create", "client.gw", "mon", "allow profile s3-gateway", "osd", "allow profile s3-gateway", "-o", gwKeyring}, m...)...); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, bin, "--mon", up.mon, "--keyring", gwKeyring, "--listen", "127.0.0.1:0", "--access-log=false",
		"--metrics-addr", "127.0.0.1:0", "--client-timeout", "2s")
	addr, gwMetrics, lines, stderr := gw.addr, gw.metrics, gw.lines, gw.stderr
	c2 := s3Client(addr, roAccess, roSecret)
	_, err = c2.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("via-up"), Key: aws.String("k2"), Body: strings.NewReader("no")})
	if !strings.Contains(fmt.Sprint(err), "AccessDenied") {
		t.Fatalf("a read-only user's PUT through osprey s3: %v", err)
	}
	out, err := c2.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("via-up"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(b) != "hello" {
		t.Fatalf("through osprey s3: %q", b)
	}
	if m := scrapeText(t, gwMetrics); !strings.Contains(m, `osprey_s3_requests_total{op="GetObject",status="200"} 1`) {
		t.Errorf("osprey s3 --metrics-addr: its metrics at %s do not count the GET:\n%s", gwMetrics, m)
	}
	if got := scrapeText(t, strings.TrimSuffix(gwMetrics, "/metrics")+"/readyz"); got != "ready\n" {
		t.Errorf("osprey s3's /readyz: %q", got)
	}
	if strings.Contains(stderr.String(), "msg=s3 ") {
		t.Errorf("osprey s3 --access-log=false logged requests:\n%s", stderr)
	}
	// --client-timeout: a client that stalls in its headers is cut after
	// it, not after the default minute.
	stalled, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := io.WriteString(stalled, "GET / HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	stalled.SetReadDeadline(time.Now().Add(30 * time.Second))
	cutAt := time.Now()
	if _, err := io.Copy(io.Discard, stalled); err != nil || time.Since(cutAt) > 20*time.Second {
		t.Fatalf("a client stalled in its headers, --client-timeout 2s: cut after %v (%v)", time.Since(cutAt), err)
	}
	// The gateway's key rotated into its --keyring file: the cluster
	// refuses the old key at once, and the gateway takes up the new one
	// without a restart.
	if _, _, err := run(t, append([]string{"auth", "rotate", "client.gw", "-o", gwKeyring}, m...)...); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	for {
		// Past the 2 s in which the mon ends the old key's sessions, a
		// GET that works came through sessions of the new key.
		out, err := c2.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("via-up"), Key: aws.String("k")})
		if err == nil {
			out.Body.Close()
			if time.Since(rotated) > 3*time.Second {
				break
			}
		}
		if time.Since(rotated) > 30*time.Second {
			t.Fatalf("the gateway's GET 30 s after its key was rotated: %v\n%s", err, stderr)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	if err := gw.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if l := <-lines; l != "osprey s3: stopped" {
		t.Fatalf("after SIGINT: %q\n%s", l, stderr)
	}
	if err := gw.cmd.Wait(); err != nil {
		t.Fatalf("osprey s3 after SIGINT: %v\n%s", err, stderr)
	}
	up.interrupt(t)
}

func TestS3NeedsKeys(t *testing.T) {
	t.Setenv(envS3AccessKey, "")
	t.Setenv(envS3SecretKey, "")
	t.Chdir(t.TempDir()) // no client.admin keyring found by default
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--keyring", "none", "--access-key", "AK"}, "anonymous"},
		{[]string{"--keyring", "none"}, "no keyring"},
		{[]string{"--keyring", "none", "--access-key", "AK", "--secret-key", "SK", "--pprof"}, "--metrics-addr"},
		{[]string{"--keyring", "none", "--access-key", "AK", "--secret-key", "SK", "--client-timeout", "0s"}, "--client-timeout"},
	} {
		_, _, err := run(t, append([]string{"s3", "--seeds", "127.0.0.1:1"}, c.args...)...)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("osprey s3 %v: %v (exit %d), want %q", c.args, err, exitCode(err), c.want)
		}
	}
}

// scrapeText GETs a /metrics URL.
func scrapeText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %q: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}
