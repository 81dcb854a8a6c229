package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/metrics"
	"github.com/spf13/cobra"
)

// Environment variables that give `osprey s3` its key pair.
const (
	envS3AccessKey = "OSPREY_S3_ACCESS_KEY"
	envS3SecretKey = "OSPREY_S3_SECRET_KEY"
)

// defaultS3Listen is where `osprey s3` and `osprey up` serve S3: MinIO's
// port, on loopback.
const defaultS3Listen = "127.0.0.1:9000"

type s3Options struct {
	target          targetFlags
	listen          string
	access, secret  string
	region          string
	domains         []string
	shutdownTimeout time.Duration
	metricsAddr     string
}

func newS3Cmd() *cobra.Command {
	var o s3Options
	cmd := &cobra.Command{
		Use:   "s3",
		Short: "Serve the S3 API over HTTP (a gateway to the cluster)",
		Long: `Serves the S3 REST API on --listen for aws-cli, boto3, aws-sdk-go-v2 and other
S3 clients: buckets, objects (with ranges and metadata), listings v1 and v2,
batch deletes, multipart uploads (docs/s3.md). The gateway is stateless: it is a client of the cluster like
any other, and any number of them can serve one cluster.

Every request must be signed (AWS Signature Version 4, header or presigned
URL) with the key pair given by --access-key and --secret-key (or
` + envS3AccessKey + ` and ` + envS3SecretKey + `); anonymous requests are refused.
The keys are the gateway's own for now, not yet the cluster's entities.

It serves until Ctrl-C or SIGTERM, then lets the requests in progress finish
(at most --shutdown-timeout). Each request gets one access log line.`,
		Example: `  OSPREY_S3_ACCESS_KEY=AK OSPREY_S3_SECRET_KEY=SK osprey s3
  osprey s3 --listen :9000 --mon 10.0.0.1:3300 --access-key AK --secret-key SK
  aws --endpoint-url http://127.0.0.1:9000 s3 ls`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runS3(cmd, o) },
	}
	f := cmd.Flags()
	addTargetFlags(f, &o.target)
	f.StringVar(&o.listen, "listen", defaultS3Listen, "HOST:PORT to serve HTTP on")
	f.StringVar(&o.access, "access-key", "", "the access key clients sign with (env "+envS3AccessKey+")")
	f.StringVar(&o.secret, "secret-key", "", "its secret (env "+envS3SecretKey+")")
	f.StringVar(&o.region, "region", "us-east-1", "the region GetBucketLocation answers")
	f.StringSliceVar(&o.domains, "domain", nil, "domains for virtual-hosted-style requests (BUCKET.DOMAIN); path style always works")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long requests in progress may take to finish on a stop")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", metricsAddrUsage)
	return cmd
}

func runS3(cmd *cobra.Command, o s3Options) error {
	ctx := cmd.Context()
	o.access = cmpOrEnv(o.access, envS3AccessKey)
	o.secret = cmpOrEnv(o.secret, envS3SecretKey)
	if o.access == "" || o.secret == "" {
		return usageErrorf("a key pair is required: --access-key and --secret-key (or %s and %s); anonymous access is not served",
			envS3AccessKey, envS3SecretKey)
	}
	cl, err := connectWith(ctx, cmd, o.target, client.Options{Logger: slog.Default(), MD5: true})
	if err != nil {
		return err
	}
	defer cl.Close()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	gopts := s3gw.Options{Client: cl, Credentials: s3gw.StaticCredentials{o.access: o.secret},
		Region: o.region, Domains: o.domains, ShutdownTimeout: o.shutdownTimeout}
	var ms *metrics.Server
	if o.metricsAddr != "" {
		if ms, err = serveGatewayMetrics(ctx, o.metricsAddr, cl, &gopts, slog.Default()); err != nil {
			ln.Close()
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		defer ms.Close(context.Background())
	}
	gw, err := s3gw.New(gopts)
	if err != nil {
		ln.Close()
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "osprey s3: serving S3 on http://%s (access key %s)\n", ln.Addr(), o.access)
	printMetrics(cmd.OutOrStdout(), "osprey s3", ms)
	err = gw.Serve(ctx, ln)
	fmt.Fprintln(cmd.OutOrStdout(), "osprey s3: stopped")
	return err
}

// serveGatewayMetrics serves the gateway's metrics on addr and has
// gopts report each request to them.
func serveGatewayMetrics(ctx context.Context, addr string, cl *client.Client, gopts *s3gw.Options, logger *slog.Logger) (*metrics.Server, error) {
	reg, gm := metrics.GatewayRegistry(cl)
	gopts.OnRequest = gm.Observe
	return metrics.Serve(ctx, metrics.ServerOptions{Addr: addr, Registry: reg, Logger: logger})
}

func cmpOrEnv(flag, env string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(env)
}

// upGateway is the S3 gateway `osprey up` runs beside its cluster.
type upGateway struct {
	Endpoint  string `json:"endpoint"`
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
	cl        *client.Client
	metrics   *metrics.Server // nil without metrics
	cancel    context.CancelFunc
	done      chan error
}

// randomKey is n characters of an S3-style key alphabet.
func randomKey(n int, alphabet string) string {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// startUpGateway starts `osprey up`'s gateway on addr with a fresh key
// pair. explicit says the user chose addr: failing to listen on the
// default address only warns, since the cluster is useful without it.
func startUpGateway(ctx context.Context, lc *localCluster, addr string, explicit, withMetrics bool, logger *slog.Logger, warn io.Writer) (*upGateway, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if !explicit {
			fmt.Fprintf(warn, "osprey up: no S3 gateway: %v (--s3 ADDR picks another address, --s3 '' none)\n", err)
			return nil, nil
		}
		return nil, fmt.Errorf("--s3 %s: %w", addr, err)
	}
	opts := client.Options{Seeds: lc.Seeds(), Logger: logger, MD5: true, Keyring: lc.AdminKeyring, Modes: lc.clientModes}
	if lc.Mon != nil {
		opts.Seeds, opts.Mon = nil, []string{lc.Mon.Addr()}
	}
	cl, err := client.New(ctx, opts)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("the S3 gateway's client: %w", err)
	}
	g := &upGateway{Endpoint: "http://" + ln.Addr().String(), cl: cl, done: make(chan error, 1),
		AccessKey: randomKey(20, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"),
		SecretKey: randomKey(40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
	gopts := s3gw.Options{Client: cl, Credentials: s3gw.StaticCredentials{g.AccessKey: g.SecretKey}, Logger: logger}
	if withMetrics {
		if g.metrics, err = serveGatewayMetrics(ctx, "127.0.0.1:0", cl, &gopts, logger); err != nil {
			ln.Close()
			cl.Close()
			return nil, err
		}
	}
	gw, err := s3gw.New(gopts)
	if err != nil {
		ln.Close()
		g.metrics.Close(context.Background())
		cl.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g.cancel = cancel
	go func() { g.done <- gw.Serve(sctx, ln) }()
	return g, nil
}

// stop lets the gateway's requests finish, then closes its client; nil
// does nothing.
func (g *upGateway) stop() error {
	if g == nil || g.cancel == nil {
		return nil
	}
	g.cancel()
	g.cancel = nil
	err := <-g.done
	g.metrics.Close(context.Background())
	g.cl.Close()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// printS3 tells the user how to reach the gateway.
func (g *upGateway) printS3(w io.Writer) {
	if g == nil {
		return
	}
	fmt.Fprintf(w, "  s3     %s  access key %s  secret key %s\n", g.Endpoint, g.AccessKey, g.SecretKey)
	fmt.Fprintf(w, "         AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s aws --endpoint-url %s s3 ls\n",
		g.AccessKey, shellQuote(g.SecretKey), g.Endpoint)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// upS3Addr is where `osprey up` serves S3: --s3, or a free port when the
// cluster takes free ports too.
func upS3Addr(cmd *cobra.Command, o upOptions) string {
	if !cmd.Flags().Changed("s3") && o.port == 0 {
		return "127.0.0.1:0"
	}
	return o.s3
}
