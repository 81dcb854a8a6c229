// Package local runs a whole Osprey cluster in one process: its OSDs on
// loopback (or any one host), their data under one directory, the map in
// DIR/map.json. `osprey up` and `osprey bench obj` start clusters with it.
// It is for development, demos and benchmarks; it must never be the way a
// production cluster runs (one OSD per process and disk, `osprey osd`).
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/osd/placement"
)

// Options shape a local cluster.
type Options struct {
	// Map, when set, is the cluster to run (a restart of one whose map is
	// on disk): the fields below that describe a new map are ignored.
	Map *placement.Map
	// A new map: OSDs (default 3), Replicas (default min(3, OSDs)), PGs
	// (default placement.DefaultPGCount), the transports of the public and
	// cluster networks (default "tcp"), the host to listen on (default
	// 127.0.0.1), and ports: OSD i gets BasePort+2i (public) and
	// BasePort+2i+1 (cluster), or free ports when BasePort is 0.
	OSDs            int
	Replicas        int
	PGs             uint32
	Public, Cluster string
	Host            string
	BasePort        int
	// Dir holds the map and each OSD's data (DIR/osd.N); created if
	// missing. Empty: a temporary directory that Close removes.
	Dir    string
	Logger *slog.Logger // default slog.Default()
}

// Cluster is a running local cluster.
type Cluster struct {
	Map     *placement.Map
	MapPath string
	Dir     string
	OSDs    []*osd.OSD
	temp    bool
}

// Start starts the cluster. With free ports, a port another process takes
// between being chosen and being bound makes it choose again, a few times.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	for attempt := 0; ; attempt++ {
		c, err := start(ctx, opts)
		if err == nil || opts.Map != nil || opts.BasePort != 0 || attempt == 4 || !errors.Is(err, syscall.EADDRINUSE) {
			return c, err
		}
	}
}

func start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Cluster{Dir: opts.Dir}
	if c.Dir != "" {
		if err := os.MkdirAll(c.Dir, 0o755); err != nil {
			return nil, err
		}
	} else {
		d, err := os.MkdirTemp("", "osprey-")
		if err != nil {
			return nil, err
		}
		c.Dir, c.temp = d, true
	}
	c.MapPath = filepath.Join(c.Dir, "map.json")
	c.Map = opts.Map
	if c.Map == nil {
		m, err := NewMap(opts)
		if err == nil {
			err = m.Save(c.MapPath)
		}
		if err != nil {
			c.Close(context.Background())
			return nil, err
		}
		c.Map = m
	}
	for info := range c.Map.OSDs() {
		o, err := osd.Start(ctx, osd.Config{ID: info.Id, Map: c.Map, MapPath: c.MapPath,
			DataDir: filepath.Join(c.Dir, fmt.Sprintf("osd.%d", info.Id)), Logger: opts.Logger})
		if err != nil {
			c.Close(context.Background())
			return nil, fmt.Errorf("starting osd.%d: %w", info.Id, err)
		}
		c.OSDs = append(c.OSDs, o)
	}
	return c, nil
}

// NewMap makes the epoch-1 map of a new local cluster from opts.
func NewMap(opts Options) (*placement.Map, error) {
	if opts.OSDs <= 0 {
		opts.OSDs = 3
	}
	if opts.Public == "" {
		opts.Public = "tcp"
	}
	if opts.Cluster == "" {
		opts.Cluster = "tcp"
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	var pub, clu []string
	for i := range opts.OSDs {
		pp, cp := opts.BasePort+2*i, opts.BasePort+2*i+1
		if opts.BasePort == 0 {
			var err error
			if pp, err = FreePort(opts.Host); err == nil {
				cp, err = FreePort(opts.Host)
			}
			if err != nil {
				return nil, err
			}
		}
		pub = append(pub, opts.Public+"://"+net.JoinHostPort(opts.Host, fmt.Sprint(pp)))
		clu = append(clu, opts.Cluster+"://"+net.JoinHostPort(opts.Host, fmt.Sprint(cp)))
	}
	return placement.NewLocal(placement.LocalOptions{PublicAddrs: pub, ClusterAddrs: clu, PGCount: opts.PGs, Size: uint32(opts.Replicas)})
}

// FreePort returns a TCP port on host that nobody listens on now (another
// process may take it before it is bound).
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Seeds are the OSDs' public addresses.
func (c *Cluster) Seeds() []string {
	var s []string
	for info := range c.Map.OSDs() {
		s = append(s, info.PublicAddr)
	}
	return s
}

// Close stops the OSDs and removes a temporary directory.
func (c *Cluster) Close(ctx context.Context) error {
	var errs []error
	for _, o := range c.OSDs {
		errs = append(errs, o.Close(ctx))
	}
	if c.temp {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	return errors.Join(errs...)
}
