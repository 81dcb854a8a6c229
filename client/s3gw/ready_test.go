package s3gw_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/osdtest"
)

// TestShutdownDelay: a gateway whose stop began says it is not ready
// (osprey s3's /readyz) and goes on serving for Options.ShutdownDelay, so
// that a load balancer takes it out before it refuses connections; then
// it stops.
func TestShutdownDelay(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "drain")
	const delay = time.Second
	gw, err := s3gw.New(s3gw.Options{Client: e.cl, Credentials: s3gw.StaticCredentials{testAccess: testSecret},
		Logger: slog.New(slog.DiscardHandler), ShutdownDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + ln.Addr().String()), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(testAccess, testSecret, "")})
	if err := gw.Ready(); err != nil {
		t.Fatalf("a serving gateway: %v", err)
	}
	stop()
	stopped := time.Now()
	osdtest.Eventually(t, 10*time.Second, "the gateway draining", func() bool { return gw.Ready() != nil })
	if err := gw.Ready(); !strings.Contains(err.Error(), "stopping") {
		t.Fatalf("a draining gateway's reason: %v", err)
	}
	if _, err := c.HeadBucket(e.ctx, &s3.HeadBucketInput{Bucket: aws.String("drain")}); err != nil && time.Since(stopped) < delay {
		t.Fatalf("a request while draining: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if time.Since(stopped) < delay {
		t.Fatalf("Serve stopped %v after its context, within its ShutdownDelay", time.Since(stopped))
	}
}

// TestInFlight: a request is counted in flight from its headers to its
// end, while it waits (here for a body that does not come).
func TestInFlight(t *testing.T) {
	e := newEnv(t)
	e.mb(t, "wait")
	conn, err := net.Dial("tcp", e.srvAddr)
	if err != nil {
		t.Fatal(err)
	}
	// The headers alone: the body never comes.
	req := signed(t, "PUT", e.url+"/wait/k", []byte("0123456789"))
	head := "PUT /wait/k HTTP/1.1\r\nHost: " + req.Host + "\r\nContent-Length: 10\r\n"
	for k, v := range req.Header {
		head += k + ": " + v[0] + "\r\n"
	}
	if _, err := conn.Write([]byte(head + "\r\n")); err != nil {
		t.Fatal(err)
	}
	osdtest.Eventually(t, 10*time.Second, "the PUT in flight", func() bool { return e.gw.InFlight() == 1 })
	conn.Close()
	osdtest.Eventually(t, 10*time.Second, "nothing in flight once its client hung up", func() bool { return e.gw.InFlight() == 0 })
}
