package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/client/s3gw"
	"github.com/ospreystore/osprey/internal/metrics"
	"github.com/ospreystore/osprey/mon"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/spf13/cobra"
)

// Environment variables that give `osprey s3` a static key pair (clusters
// without auth only).
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
	corsOrigins     []string
	shutdownTimeout time.Duration
	shutdownDelay   time.Duration
	clientTimeout   time.Duration
	metricsAddr     string
	pprof           bool
	staleUploadAge  time.Duration
	maxConns        int
	maxBodyMiB      int64
	maxBodyUserMiB  int64
	maxNewPerHost   int
	accessLog       bool
}

// accessLogUsage is the usage of osprey s3's --access-log and of up's
// --s3-access-log.
const accessLogUsage = "log a line per request (Info; --log-level warn drops them too); =false for none"

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
URL) with an S3 key pair of one of the cluster's entities (osprey auth
s3-key add ENTITY), and may do what that entity's osd caps allow: reads
with r, writes with w, on the buckets they name. Anonymous requests are
refused. The gateway reaches the cluster as its own entity (--keyring),
which needs mon 'allow profile s3-gateway' osd 'allow profile s3-gateway'
(or client.admin's 'allow *'): it reads the S3 keys from the mons and
does its users' ops once their caps allow them.

On a cluster without auth (osprey up --auth none) there are no entities:
give --keyring none and one static pair, --access-key and --secret-key (or
` + envS3AccessKey + ` and ` + envS3SecretKey + `), allowed everything.

It serves until Ctrl-C or SIGTERM, then lets the requests in progress finish
(at most --shutdown-timeout). Each request gets one access log line.
At most --max-connections HTTP connections are open at once: a new one
takes the slot of a connection idle for a second or more, else of the next
whose answer starts (it says Connection: close); later ones wait in the
listen backlog (a warning says so, once a minute at most).`,
		Example: `  osprey auth get-or-create client.s3 mon 'allow profile s3-gateway' osd 'allow profile s3-gateway' -o s3.keyring
  osprey s3 --listen :9000 --mon 10.0.0.1:3300 --keyring s3.keyring
  osprey auth s3-key add client.admin
  aws --endpoint-url http://127.0.0.1:9000 s3 ls
  osprey s3 --mon 10.0.0.1:3300 --keyring none --access-key AK --secret-key SK   # a cluster without auth`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runS3(cmd, o) },
	}
	f := cmd.Flags()
	addTargetFlags(f, &o.target)
	f.StringVar(&o.listen, "listen", defaultS3Listen, "HOST:PORT to serve HTTP on")
	f.StringVar(&o.access, "access-key", "", "a static access key, on a cluster without auth only (env "+envS3AccessKey+")")
	f.StringVar(&o.secret, "secret-key", "", "its secret (env "+envS3SecretKey+")")
	f.StringVar(&o.region, "region", "us-east-1", "the region GetBucketLocation answers")
	f.StringSliceVar(&o.domains, "domain", nil, "domains for virtual-hosted-style requests (BUCKET.DOMAIN); path style always works")
	f.StringSliceVar(&o.corsOrigins, "cors-origin", nil, corsOriginUsage)
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long requests in progress may take to finish on a stop")
	f.DurationVar(&o.shutdownDelay, "shutdown-delay", 0, "on a stop, go on serving this long first, /readyz saying 503, for load balancers to notice")
	f.DurationVar(&o.clientTimeout, "client-timeout", time.Minute,
		"the longest a client may stall: to send its request's headers, between two reads of its body, or to take a slice (256 KiB) of the answer")
	f.BoolVar(&o.accessLog, "access-log", true, accessLogUsage)
	f.StringVar(&o.metricsAddr, "metrics-addr", "", metricsAddrUsage)
	f.BoolVar(&o.pprof, "pprof", false, pprofUsage)
	f.DurationVar(&o.staleUploadAge, "stale-upload-age", client.DefaultStaleUploadAge,
		"abort the gateway's internal uploads (of PUTs above 64 MiB whose gateway died) once this old, hourly and when a bucket's uploads are listed; 0s: never")
	f.IntVar(&o.maxConns, "max-connections", s3gw.DefaultMaxConnections(),
		"the most HTTP connections held open at once (4096, or half the open-file limit if less); at the cap an idle or finishing one gives way to a new one; -1: no cap")
	f.Int64Var(&o.maxBodyMiB, "max-body-mib", s3gw.DefaultMaxBodyMemory>>20,
		"MiB the bodies of the PUTs and UploadParts in progress may hold at once, each counted up to 64 MiB; past it a request waits up to 10s, then is answered 503 SlowDown; -1: no bound")
	f.IntVar(&o.maxNewPerHost, "max-new-per-host", 256,
		"once over half of --max-connections are open, the most connections one source IP may hold without a whole request sent (slowloris); one over it is closed at accept; -1: no bound")
	f.Int64Var(&o.maxBodyUserMiB, "max-body-mib-per-user", 0,
		"MiB of --max-body-mib one user (entity, or static key) may hold at once; past it that user's requests wait and are answered SlowDown while other users' go on; 0: a quarter of --max-body-mib; -1: no bound")
	return cmd
}

// corsOriginUsage is --cors-origin's help, osprey s3's and up's.
const corsOriginUsage = "web origins whose pages may call the gateway from a browser (CORS), for every bucket: https://app.example.com, https://*.example.com, or * for any; none: preflights are refused"

func runS3(cmd *cobra.Command, o s3Options) error {
	ctx := cmd.Context()
	o.access = cmpOrEnv(o.access, envS3AccessKey)
	o.secret = cmpOrEnv(o.secret, envS3SecretKey)
	if o.pprof && o.metricsAddr == "" {
		return usageErrorf(pprofNeedsMetrics)
	}
	if o.clientTimeout <= 0 {
		return usageErrorf("--client-timeout %v: want a positive duration", o.clientTimeout)
	}
	if o.maxConns == 0 || o.maxConns < -1 {
		return usageErrorf("--max-connections %d: give a positive number, or -1 for no cap", o.maxConns)
	}
	if o.maxBodyMiB == 0 || o.maxBodyMiB < -1 {
		return usageErrorf("--max-body-mib %d: give a positive number, or -1 for no bound", o.maxBodyMiB)
	}
	if o.maxNewPerHost == 0 || o.maxNewPerHost < -1 {
		return usageErrorf("--max-new-per-host %d: give a positive number, or -1 for no bound", o.maxNewPerHost)
	}
	if o.maxBodyUserMiB < -1 {
		return usageErrorf("--max-body-mib-per-user %d: give a positive number, 0 for a quarter of --max-body-mib, or -1 for no bound", o.maxBodyUserMiB)
	}
	keyring, err := o.target.mon.loadKeyring(os.Getenv)
	if err != nil {
		return err
	}
	static := o.access != "" || o.secret != ""
	switch {
	case static && (o.access == "" || o.secret == ""):
		return usageErrorf("a static key pair needs both --access-key and --secret-key (or %s and %s); anonymous access is not served",
			envS3AccessKey, envS3SecretKey)
	case static && keyring != nil:
		return usageErrorf("--access-key and --secret-key are for a cluster without auth (--keyring none); on %s's cluster S3 keys are entities': osprey auth s3-key add ENTITY",
			keyring.Entity)
	case !static && keyring == nil:
		return usageErrorf("no keyring: the gateway reaches the cluster as its own entity (--keyring FILE; osprey auth get-or-create client.s3 mon 'allow profile s3-gateway' osd 'allow profile s3-gateway'); on a cluster without auth, give --keyring none, --access-key and --secret-key")
	}
	var creds s3gw.Credentials = s3gw.StaticCredentials{o.access: o.secret}
	var cc *s3gw.ClusterCredentials
	who := "static access key " + o.access
	if !static {
		mons, ok, err := resolveMons(o.target.mon, os.Getenv)
		if err != nil {
			return err
		}
		if !ok {
			return usageErrorf("the S3 keys come from the mons: give --mon (or %s)", envMon)
		}
		cctx, cancel := context.WithTimeout(ctx, o.target.timeout)
		cc, err = s3gw.NewClusterCredentials(cctx, s3gw.ClusterCredentialsOptions{Mon: mons, Keyring: keyring, Modes: o.target.mon.modes, Logger: cliLogger(cmd)})
		cancel()
		if err != nil {
			return err
		}
		defer cc.Close()
		creds, who = cc, "S3 keys of the cluster's entities, as "+keyring.Entity
	}
	cl, err := connectWith(ctx, cmd, o.target, client.Options{Logger: slog.Default(), MD5: true, Keyring: keyring})
	if err != nil {
		return err
	}
	defer cl.Close()
	if !static {
		// A key rotated with `osprey auth rotate ENTITY -o FILE` is taken
		// up without a restart; until then the cluster refuses the old
		// one and S3 requests get 503.
		wctx, stop := context.WithCancel(ctx)
		defer stop()
		go auth.WatchKeyring(wctx, auth.WatchOptions{Path: o.target.mon.keyringPath(os.Getenv), Current: keyring, Logger: slog.Default(),
			Apply: func(k *auth.Keyring) error {
				if err := cl.SetKeyring(k); err != nil {
					return err
				}
				return cc.SetKeyring(k)
			}})
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	gopts := s3gw.Options{Client: cl, Credentials: creds,
		Region: o.region, Domains: o.domains, CORSOrigins: o.corsOrigins, ShutdownTimeout: o.shutdownTimeout, ShutdownDelay: o.shutdownDelay, ClientTimeout: o.clientTimeout, StaleUploadAge: o.staleUploadAge,
		MaxConnections: o.maxConns, MaxNewPerHost: o.maxNewPerHost, MaxBodyMemory: o.maxBodyMiB << 20,
		MaxBodyMemoryPerUser: o.maxBodyUserMiB << 20, NoAccessLog: !o.accessLog}
	if o.staleUploadAge == 0 {
		gopts.StaleUploadAge = -1 // never
	}
	var ms *metrics.Server
	var served atomic.Pointer[s3gw.Gateway]
	if o.metricsAddr != "" {
		if ms, err = serveGatewayMetrics(ctx, o.metricsAddr, o.pprof, cl, &gopts, &served, slog.Default()); err != nil {
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
	served.Store(gw)
	fmt.Fprintf(cmd.OutOrStdout(), "osprey s3: serving S3 on http://%s (%s)\n", ln.Addr(), who)
	printMetrics(cmd.OutOrStdout(), "osprey s3", ms)
	err = gw.Serve(ctx, ln)
	fmt.Fprintln(cmd.OutOrStdout(), "osprey s3: stopped")
	return err
}

// serveGatewayMetrics serves the gateway's metrics on addr and has
// gopts report each request to them.
// Its /readyz is gw's Ready once gw is set (the gateway is made after
// its options, which the metrics hook into).
func serveGatewayMetrics(ctx context.Context, addr string, pprof bool, cl *client.Client, gopts *s3gw.Options, gw *atomic.Pointer[s3gw.Gateway], logger *slog.Logger) (*metrics.Server, error) {
	reg, gm := metrics.GatewayRegistry(cl)
	gopts.OnRequest, gopts.OnBodyMemory = gm.Observe, gm.BodyMemory
	gm.InFlight(reg, func() int64 {
		if g := gw.Load(); g != nil {
			return g.InFlight()
		}
		return 0
	})
	ready := func() error {
		if g := gw.Load(); g != nil {
			return g.Ready()
		}
		return errors.New("the S3 gateway is starting")
	}
	return metrics.Serve(ctx, metrics.ServerOptions{Addr: addr, Registry: reg, Logger: logger, Pprof: pprof, Ready: ready})
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
	// Entity owns the key pair: client.admin, or "" for the static pair
	// of a cluster without auth.
	Entity  string `json:"entity,omitempty"`
	cl      *client.Client
	creds   *s3gw.ClusterCredentials // nil without auth
	metrics *metrics.Server          // nil without metrics
	gw      atomic.Pointer[s3gw.Gateway]
	cancel  context.CancelFunc
	done    chan error
}

// upGatewayEntity is the entity `osprey up`'s gateway reaches its
// cluster as.
const upGatewayEntity = "client.s3-gateway"

// startUpGateway starts `osprey up`'s gateway on addr. With auth it is
// client.s3-gateway and serves the entities' S3 keys, and client.admin
// gets one to print (its first, made if it has none); without auth it
// serves one fresh static pair. explicit says the user chose addr:
// failing to listen on the default address only warns, since the cluster
// is useful without it.
func startUpGateway(ctx context.Context, lc *localCluster, addr string, explicit, withMetrics bool, logger *slog.Logger, warn io.Writer) (*upGateway, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if !explicit {
			fmt.Fprintf(warn, "osprey up: no S3 gateway: %v (--s3 ADDR picks another address, --s3 '' none)\n", err)
			return nil, nil
		}
		return nil, fmt.Errorf("--s3 %s: %w", addr, err)
	}
	g := &upGateway{Endpoint: "http://" + ln.Addr().String(), done: make(chan error, 1)}
	creds, keyring, err := g.credentials(ctx, lc, logger)
	if err != nil {
		ln.Close()
		return nil, err
	}
	// On the cluster's transports: one RDMA domain for the process.
	opts := client.Options{Seeds: lc.Seeds(), Logger: logger, MD5: true, Keyring: keyring, Modes: lc.clientModes, Transports: lc.Transports}
	if lc.Mon != nil {
		opts.Seeds, opts.Mon = nil, []string{lc.Mon.Addr()}
	}
	if g.cl, err = client.New(ctx, opts); err != nil {
		ln.Close()
		g.closeCreds()
		return nil, fmt.Errorf("the S3 gateway's client: %w", err)
	}
	gopts := s3gw.Options{Client: g.cl, Credentials: creds, Logger: logger, NoAccessLog: lc.noS3AccessLog, CORSOrigins: lc.s3CORSOrigins}
	if withMetrics {
		if g.metrics, err = serveGatewayMetrics(ctx, "127.0.0.1:0", false, g.cl, &gopts, &g.gw, logger); err != nil {
			ln.Close()
			g.cl.Close()
			g.closeCreds()
			return nil, err
		}
	}
	gw, err := s3gw.New(gopts)
	if err != nil {
		ln.Close()
		g.metrics.Close(context.Background())
		g.cl.Close()
		g.closeCreds()
		return nil, err
	}
	g.gw.Store(gw)
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
	g.closeCreds()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// credentials are what the gateway checks signatures against, and the
// keyring its client uses (nil without auth); they fill in g's pair.
func (g *upGateway) credentials(ctx context.Context, lc *localCluster, logger *slog.Logger) (s3gw.Credentials, *auth.Keyring, error) {
	if lc.Mon == nil || lc.AdminKeyring == nil {
		k := auth.NewS3Key()
		g.AccessKey, g.SecretKey = k.AccessKey, k.Secret
		return s3gw.StaticCredentials{k.AccessKey: k.Secret}, nil, nil
	}
	pem, err := lc.Mon.GetOrCreateKeyring(ctx, upGatewayEntity, mon.S3GatewayCaps)
	if err != nil {
		return nil, nil, fmt.Errorf("the S3 gateway's entity: %w", err)
	}
	keyring, err := auth.ParseKeyring(pem)
	if err != nil {
		return nil, nil, fmt.Errorf("the S3 gateway's entity: %w", err)
	}
	k, err := lc.Mon.S3Key(ctx, "client.admin")
	if err != nil {
		return nil, nil, fmt.Errorf("client.admin's S3 key: %w", err)
	}
	g.AccessKey, g.SecretKey, g.Entity = k.AccessKey, k.Secret, "client.admin"
	if g.creds, err = s3gw.NewClusterCredentials(ctx, s3gw.ClusterCredentialsOptions{Mon: []string{lc.Mon.Addr()}, Keyring: keyring, Modes: lc.clientModes, Logger: logger}); err != nil {
		return nil, nil, err
	}
	return g.creds, keyring, nil
}

func (g *upGateway) closeCreds() {
	if g.creds != nil {
		g.creds.Close()
	}
}

// printS3 tells the user how to reach the gateway.
func (g *upGateway) printS3(w io.Writer) {
	if g == nil {
		return
	}
	owner := ""
	if g.Entity != "" {
		owner = " (" + g.Entity + "'s; osprey auth s3-key add ENTITY makes more)"
	}
	fmt.Fprintf(w, "  s3     %s  access key %s  secret key %s%s\n", g.Endpoint, g.AccessKey, g.SecretKey, owner)
	fmt.Fprintf(w, "         AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s aws --endpoint-url %s s3 ls\n",
		g.AccessKey, shellQuote(g.SecretKey), g.Endpoint)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// shellWord is s as one shell word: quoted only if it must be.
func shellWord(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`!*?[]{}()<>|&;#~") {
		return s
	}
	return shellQuote(s)
}

// upS3Addr is where `osprey up` serves S3: --s3, or a free port when the
// cluster takes free ports too.
func upS3Addr(cmd *cobra.Command, o upOptions) string {
	if !cmd.Flags().Changed("s3") && o.port == 0 {
		return "127.0.0.1:0"
	}
	return o.s3
}
