package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/placement"
)

// ObjOp is an object benchmark operation.
type ObjOp string

const (
	OpPut ObjOp = "put"
	OpGet ObjOp = "get"
)

// ObjOptions configure RunObj, in the spirit of `rados bench`: each size
// is written for Duration by Concurrency workers, then read back.
type ObjOptions struct {
	// Seeds of a running cluster; empty starts a local one in this
	// process with OSDs OSDs and Replicas replicas, its data under Dir (a
	// temporary directory when empty, removed afterwards).
	Seeds    []string
	OSDs     int    // default 3
	Replicas int    // default min(3, OSDs)
	PGs      uint32 // default 128
	// Public and Cluster are the local cluster's transports: "tcp" (the
	// default) or "rdma+tcp", ...
	Public, Cluster string
	Dir             string

	Sizes       []int         // default 4 KiB and 4 MiB
	Ops         []ObjOp       // default put, get
	Concurrency int           // ops in flight; default 16
	Duration    time.Duration // per row; default 10s
	Bucket      string        // default "osprey-bench"
	Logger      *slog.Logger
	OnRow       func(ObjRow)
}

// ObjRow is one measured operation at one size.
type ObjRow struct {
	Op          ObjOp   `json:"op"`
	Size        int     `json:"size"`
	Concurrency int     `json:"concurrency"`
	Replicas    int     `json:"replicas"`
	Transport   string  `json:"transport"` // public/cluster
	Ops         uint64  `json:"ops"`
	Errors      uint64  `json:"errors"`
	Seconds     float64 `json:"seconds"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	P50Us       float64 `json:"p50_us"`
	P99Us       float64 `json:"p99_us"`
	MaxUs       float64 `json:"max_us"`
	CPUSeconds  float64 `json:"cpu_s"`
}

func (o *ObjOptions) defaults() {
	if o.OSDs <= 0 {
		o.OSDs = 3
	}
	if o.Replicas <= 0 {
		o.Replicas = min(3, o.OSDs)
	}
	if o.PGs == 0 {
		o.PGs = 128
	}
	if o.Public == "" {
		o.Public = "tcp"
	}
	if o.Cluster == "" {
		o.Cluster = "tcp"
	}
	if len(o.Sizes) == 0 {
		o.Sizes = []int{4 << 10, 4 << 20}
	}
	if len(o.Ops) == 0 {
		o.Ops = []ObjOp{OpPut, OpGet}
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Bucket == "" {
		o.Bucket = "osprey-bench"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// LocalCluster is a cluster of OSDs in this process, for benchmarks and
// `osprey up`.
type LocalCluster struct {
	Map  *placement.Map
	OSDs []*osd.OSD
	Dir  string
	temp bool
}

// LocalClusterOptions shape StartLocalCluster.
type LocalClusterOptions struct {
	OSDs            int
	Replicas        int
	PGs             uint32
	Public, Cluster string // transports; default tcp
	Host            string // default 127.0.0.1
	BasePort        int    // 0: free ports
	Dir             string // default a temporary directory, removed by Close
	Logger          *slog.Logger
}

// StartLocalCluster starts opts.OSDs OSDs in this process on loopback.
// With free ports (BasePort 0) a port taken between choosing and binding it
// makes it choose again, a few times.
func StartLocalCluster(ctx context.Context, opts LocalClusterOptions) (*LocalCluster, error) {
	for attempt := 0; ; attempt++ {
		lc, err := startLocalCluster(ctx, opts)
		if err == nil || opts.BasePort != 0 || attempt == 4 || !errors.Is(err, syscall.EADDRINUSE) {
			return lc, err
		}
	}
}

func startLocalCluster(ctx context.Context, opts LocalClusterOptions) (*LocalCluster, error) {
	if opts.Public == "" {
		opts.Public = "tcp"
	}
	if opts.Cluster == "" {
		opts.Cluster = "tcp"
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	lc := &LocalCluster{Dir: opts.Dir}
	if lc.Dir == "" {
		d, err := os.MkdirTemp("", "osprey-")
		if err != nil {
			return nil, err
		}
		lc.Dir, lc.temp = d, true
	}
	var pub, clu []string
	for i := range opts.OSDs {
		pp, cp := opts.BasePort+2*i, opts.BasePort+2*i+1
		if opts.BasePort == 0 {
			var err error
			if pp, err = freePort(opts.Host); err == nil {
				cp, err = freePort(opts.Host)
			}
			if err != nil {
				return nil, err
			}
		}
		pub = append(pub, fmt.Sprintf("%s://%s:%d", opts.Public, opts.Host, pp))
		clu = append(clu, fmt.Sprintf("%s://%s:%d", opts.Cluster, opts.Host, cp))
	}
	m, err := placement.NewLocal(placement.LocalOptions{PublicAddrs: pub, ClusterAddrs: clu, PGCount: opts.PGs, Size: uint32(opts.Replicas)})
	if err != nil {
		return nil, err
	}
	lc.Map = m
	if err := m.Save(filepath.Join(lc.Dir, "map.json")); err != nil {
		return nil, err
	}
	for i := range opts.OSDs {
		o, err := osd.Start(ctx, osd.Config{ID: uint32(i), Map: m, MapPath: filepath.Join(lc.Dir, "map.json"),
			DataDir: filepath.Join(lc.Dir, fmt.Sprintf("osd.%d", i)), Logger: opts.Logger})
		if err != nil {
			lc.Close(context.Background())
			return nil, err
		}
		lc.OSDs = append(lc.OSDs, o)
	}
	return lc, nil
}

// Seeds are the OSDs' public addresses.
func (lc *LocalCluster) Seeds() []string {
	var s []string
	for info := range lc.Map.OSDs() {
		s = append(s, info.PublicAddr)
	}
	return s
}

// Close stops the OSDs and removes a temporary data directory.
func (lc *LocalCluster) Close(ctx context.Context) error {
	var errs []error
	for _, o := range lc.OSDs {
		errs = append(errs, o.Close(ctx))
	}
	if lc.temp {
		errs = append(errs, os.RemoveAll(lc.Dir))
	}
	return errors.Join(errs...)
}

// RunObj runs the object benchmark and returns one row per (size, op).
func RunObj(ctx context.Context, o ObjOptions) ([]ObjRow, error) {
	o.defaults()
	seeds := o.Seeds
	if len(seeds) == 0 {
		lc, err := StartLocalCluster(ctx, LocalClusterOptions{OSDs: o.OSDs, Replicas: o.Replicas, PGs: o.PGs,
			Public: o.Public, Cluster: o.Cluster, Dir: o.Dir, Logger: o.Logger})
		if err != nil {
			return nil, err
		}
		defer lc.Close(context.Background())
		seeds = lc.Seeds()
	}
	cl, err := client.New(ctx, client.Options{Seeds: seeds, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	replicas := o.Replicas
	if len(o.Seeds) > 0 {
		for p := range cl.Map().Pools() {
			replicas = int(p.Size)
			break
		}
	}
	if err := cl.MakeBucket(ctx, o.Bucket); err != nil && !errors.Is(err, client.ErrBucketAlreadyExists) {
		return nil, err
	}
	var rows []ObjRow
	for _, size := range o.Sizes {
		written := &atomic.Int64{}
		for _, op := range o.Ops {
			row, err := runObjRow(ctx, cl, &o, op, size, written)
			if err != nil {
				return rows, err
			}
			row.Replicas, row.Transport = replicas, o.Public+"/"+o.Cluster
			rows = append(rows, row)
			if o.OnRow != nil {
				o.OnRow(row)
			}
		}
	}
	return rows, nil
}

func objKey(size int, n int64) string { return fmt.Sprintf("bench/%d/%08d", size, n) }

// runObjRow runs one op at one size for o.Duration with o.Concurrency
// workers. Puts write fresh keys (counted in written); gets read random
// keys among those written.
func runObjRow(ctx context.Context, cl *client.Client, o *ObjOptions, op ObjOp, size int, written *atomic.Int64) (ObjRow, error) {
	row := ObjRow{Op: op, Size: size, Concurrency: o.Concurrency}
	if op == OpGet && written.Load() == 0 {
		// Nothing to read yet: write a working set first.
		for i := range int64(4 * o.Concurrency) {
			if _, err := cl.PutObject(ctx, o.Bucket, objKey(size, i), bytes.NewReader(make([]byte, size)), int64(size), client.PutOptions{}); err != nil {
				return row, err
			}
		}
		written.Store(int64(4 * o.Concurrency))
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i * 7)
	}
	var (
		ops, errs atomic.Uint64
		mu        sync.Mutex
		hist      = NewHistogram()
		wg        sync.WaitGroup
		firstErr  error
	)
	deadline := time.Now().Add(o.Duration)
	cpu0 := cpuTime()
	start := time.Now()
	for w := range o.Concurrency {
		wg.Go(func() {
			h := NewHistogram()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(size)))
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				var err error
				switch op {
				case OpPut:
					_, err = cl.PutObject(ctx, o.Bucket, objKey(size, written.Add(1)-1), bytes.NewReader(body), int64(size), client.PutOptions{})
				case OpGet:
					err = readObject(ctx, cl, o.Bucket, objKey(size, rng.Int64N(written.Load())))
				}
				if err != nil {
					errs.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				h.RecordDuration(time.Since(t0))
				ops.Add(1)
			}
			mu.Lock()
			hist.Merge(h)
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	row.Ops, row.Errors, row.Seconds = ops.Load(), errs.Load(), el
	row.OpsPerSec = float64(row.Ops) / el
	row.BytesPerSec = row.OpsPerSec * float64(size)
	row.P50Us = float64(hist.Quantile(0.5)) / 1e3
	row.P99Us = float64(hist.Quantile(0.99)) / 1e3
	row.MaxUs = float64(hist.Max()) / 1e3
	row.CPUSeconds = (cpuTime() - cpu0).Seconds()
	if row.Ops == 0 && firstErr != nil {
		return row, fmt.Errorf("bench %s %d: %w", op, size, firstErr)
	}
	if firstErr != nil {
		o.Logger.Warn("bench: some ops failed", "op", op, "size", size, "errors", row.Errors, "first", firstErr)
	}
	return row, nil
}

// freePort returns a TCP port on host nobody listens on now.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WriteObjTable prints rows for people.
func WriteObjTable(w io.Writer, rows []ObjRow) {
	fmt.Fprintf(w, "%5s %8s %4s %4s %12s %10s %12s %9s %9s %9s %6s %s\n",
		"op", "size", "conc", "repl", "transport", "ops/s", "MB/s", "p50 ms", "p99 ms", "max ms", "cpu s", "errors")
	for _, r := range rows {
		fmt.Fprintf(w, "%5s %8s %4d %4d %12s %10.0f %12.1f %9.2f %9.2f %9.2f %6.2f %d\n",
			r.Op, FormatSize(int64(r.Size)), r.Concurrency, r.Replicas, r.Transport, r.OpsPerSec, r.BytesPerSec/1e6,
			r.P50Us/1e3, r.P99Us/1e3, r.MaxUs/1e3, r.CPUSeconds, r.Errors)
	}
}

// readObject reads an object whole, as a user of the SDK would.
func readObject(ctx context.Context, cl *client.Client, bucket, key string) error {
	obj, err := cl.GetObject(ctx, bucket, key, client.GetOptions{})
	if err != nil {
		return err
	}
	defer obj.Close()
	_, err = io.Copy(io.Discard, obj)
	return err
}
