package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/local"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr"
	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/transports"
)

// ObjOp is an object benchmark operation.
type ObjOp string

const (
	OpPut    ObjOp = "put"    // write a fresh object
	OpGet    ObjOp = "get"    // read a random object of the working set, whole
	OpStat   ObjOp = "stat"   // stat a random object of the working set
	OpList   ObjOp = "list"   // list ObjOptions.ListKeys keys after a random one
	OpDelete ObjOp = "delete" // delete an object of the working set
	// OpMixed names the total row of a mixed workload.
	OpMixed ObjOp = "mixed"
)

// ObjOps are the operations ParseObjOp accepts, in the order a run does
// them by default: writes first, the delete last, as it empties the
// working set.
var ObjOps = []ObjOp{OpPut, OpGet, OpStat, OpList, OpDelete}

// ParseObjOp parses an operation name.
func ParseObjOp(s string) (ObjOp, error) {
	op := ObjOp(strings.ToLower(strings.TrimSpace(s)))
	if !slices.Contains(ObjOps, op) {
		return "", fmt.Errorf("operation %q: want put, get, stat, list or delete", s)
	}
	return op, nil
}

// MixWeight is one operation's share of a mixed workload.
type MixWeight struct {
	Op     ObjOp
	Weight int
}

// ParseMix parses a mixed workload, "get=70,put=20,stat=10": operations
// and relative weights (they need not add up to 100).
func ParseMix(s string) ([]MixWeight, error) {
	var mix []MixWeight
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		name, w, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("mix %q: want op=weight,... as in get=70,put=20,stat=10", s)
		}
		op, err := ParseObjOp(name)
		if err != nil {
			return nil, fmt.Errorf("mix %q: %w", s, err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("mix %q: weight %q: want a whole number >= 0", s, w)
		}
		if slices.ContainsFunc(mix, func(m MixWeight) bool { return m.Op == op }) {
			return nil, fmt.Errorf("mix %q: %s twice", s, op)
		}
		if n > 0 {
			mix = append(mix, MixWeight{op, n})
		}
	}
	if len(mix) == 0 {
		return nil, fmt.Errorf("mix %q: no operation with a weight above 0", s)
	}
	return mix, nil
}

// FormatMix writes a mix as ParseMix reads it.
func FormatMix(mix []MixWeight) string {
	var b strings.Builder
	for i, m := range mix {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%d", m.Op, m.Weight)
	}
	return b.String()
}

// ObjOptions configure RunObj, in the spirit of `rados bench` and warp:
// for each size, each operation of Ops runs for Duration with Concurrency
// workers, then, with a Mix, the mixed workload does.
type ObjOptions struct {
	// Seeds of a running cluster; empty starts a local one in this
	// process with OSDs OSDs and Replicas replicas, its data under Dir (a
	// temporary directory when empty, removed afterwards).
	Seeds []string
	// Keyring authenticates the run's client to the cluster of Seeds
	// (nil: none, for a cluster run with auth off). A local cluster runs
	// with auth off: there it is not used.
	Keyring *auth.Keyring
	// S3, if set, is measured instead of an Osprey cluster: any S3
	// endpoint (s3Store), with the same workloads. The
	// objects the run wrote are deleted at its end (the bucket too when
	// the run made it) unless KeepObjects.
	S3          *S3Target
	KeepObjects bool
	OSDs        int // default 3
	// ReadCacheSize is each local OSD's read cache of checked objects
	// (osprey osd --read-cache-mib): 0 the OSD's default (512 MiB),
	// negative off. A get row whose working set the caches hold reads
	// from memory; one larger reads the disk.
	ReadCacheSize int64
	Replicas      int    // default min(3, OSDs)
	PGs           uint32 // default 128
	// Public and Cluster are the local cluster's transports: "tcp" (the
	// default) or "rdma+tcp", ...
	Public, Cluster string
	Dir             string
	// Faults are injected into the local cluster's OSDs
	// (--inject-socket-failures).
	Faults msgr.FaultInjection
	// CompressibleBody writes a patterned body (it compresses about
	// 1,000:1) instead of random bytes, to see what a compressing layer
	// makes of it.
	CompressibleBody bool
	// NoCeiling skips the measure of the local cluster's disk (MeasureDisk)
	// that the rows are put beside.
	NoCeiling bool

	Sizes []int   // default 4 KiB and 4 MiB
	Ops   []ObjOp // default put, get; none with a Mix
	// Mix, if set, adds a mixed workload per size: each worker draws
	// every operation by these weights. Gets, stats and lists read the
	// working set as it was when the row began; deletes take only
	// objects this row's puts wrote (one with none left to take is a put
	// instead), so no read ever races a delete of its object.
	Mix []MixWeight
	// Objects is the working set that get, stat, list and delete rows
	// (and mixes) need: objects of the size are written first, outside
	// the measurement, until at least this many exist (a put row's
	// objects count). Default 4 x Concurrency. A delete row stops early
	// when it has deleted them all.
	Objects int
	// ListKeys is the keys one list operation asks for; default 100.
	ListKeys    int
	Concurrency int           // ops in flight; default 16
	Duration    time.Duration // measured per row; default 10s
	Warmup      time.Duration // discarded before each row; default none
	Segment     time.Duration // throughput segment; default 1s
	Bucket      string        // default "osprey-bench"
	Logger      *slog.Logger
	OnRow       func(ObjRow)
	// Progress, if set, gets a snapshot of the running row every 250ms
	// and one with PhaseDone when its timeline ends.
	Progress func(Progress)
}

// ObjRow is one measured operation at one size. JSON keys are part of the
// CLI's output contract (--json); keep them stable.
type ObjRow struct {
	Op ObjOp `json:"op"`
	// Mix is the mixed workload the row is part of, "" for a row of one
	// operation. A mix has a row per operation and an OpMixed total.
	Mix         string  `json:"mix,omitempty"`
	Size        int     `json:"size"`
	Concurrency int     `json:"concurrency"`
	Replicas    int     `json:"replicas"`
	Transport   string  `json:"transport"` // public/cluster
	Objects     int     `json:"objects"`   // working set when the row began
	Ops         uint64  `json:"ops"`
	Errors      uint64  `json:"errors"`
	Seconds     float64 `json:"seconds"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"` // object payload read or written
	P50Us       float64 `json:"p50_us"`
	P99Us       float64 `json:"p99_us"`
	P999Us      float64 `json:"p999_us"`
	MaxUs       float64 `json:"max_us"`
	MeanUs      float64 `json:"mean_us"`
	// CPU of the whole process (client and, without Seeds, the local
	// cluster's OSDs) over the row. The operations of a mix share it: it
	// is on the mix's total row only, and 0 on its per-operation rows.
	CPUSeconds  float64 `json:"cpu_s"`
	CPUUsPerOp  float64 `json:"cpu_us_per_op"`
	CPUSecPerGB float64 `json:"cpu_s_per_gb"` // 0 for operations that move no payload
	// CPUScope says whose CPU that is: CPUClientAndCluster on a local
	// cluster, CPUClient against a running cluster or an S3 endpoint
	// (whose own CPU is not counted).
	CPUScope string `json:"cpu_scope"`
	// The disk under the local cluster's data, measured before the rows
	// (MeasureDisk), and the row's share of it: a put's bytes times its
	// replicas (on one host every replica writes every byte to that disk)
	// over the write ceiling, a get's bytes over the read ceiling. 0 with
	// Seeds or NoCeiling.
	DiskWriteBytesPerSec float64 `json:"disk_write_bytes_per_sec"`
	DiskReadBytesPerSec  float64 `json:"disk_read_bytes_per_sec"`
	DiskShare            float64 `json:"disk_share"`

	Segments
	LatencyHist []HistBucket `json:"latency_hist"`
}

func (o *ObjOptions) defaults() error {
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
	if len(o.Ops) == 0 && len(o.Mix) == 0 {
		o.Ops = []ObjOp{OpPut, OpGet}
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.Objects <= 0 {
		o.Objects = 4 * o.Concurrency
	}
	if o.ListKeys <= 0 {
		o.ListKeys = 100
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	o.Warmup = max(o.Warmup, 0)
	if o.Bucket == "" {
		o.Bucket = "osprey-bench"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	for _, op := range o.Ops {
		if _, err := ParseObjOp(string(op)); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	for _, m := range o.Mix {
		if _, err := ParseObjOp(string(m.Op)); err != nil || m.Weight < 0 {
			return fmt.Errorf("bench: mix %s=%d: want an operation and a weight >= 0", m.Op, m.Weight)
		}
	}
	for _, s := range o.Sizes {
		if s < 0 {
			return fmt.Errorf("bench: size %d: want at least 0", s)
		}
	}
	return nil
}

// newObjClient is client.New; tests see the options RunObj gives it.
var newObjClient = client.New

// ObjRow.CPUScope's values.
const (
	CPUClientAndCluster = "client+cluster"
	CPUClient           = "client"
)

// RunObj runs the object benchmark and returns, for each size, one row per
// operation of o.Ops, then with a Mix one row per operation of the mix and
// its OpMixed total, in the order they ran. Whatever ran is returned with
// an error too.
func RunObj(ctx context.Context, o ObjOptions) ([]ObjRow, error) {
	if err := o.defaults(); err != nil {
		return nil, &OptionsError{err}
	}
	if o.S3 != nil {
		return runObjS3(ctx, o)
	}
	seeds := o.Seeds
	var ceiling DiskCeiling
	// The client of a local cluster shares its transports (one RDMA
	// domain and poller for the process, local.Cluster.Transports); nil:
	// the build's own.
	var ts transports.Set
	keyring := o.Keyring
	if len(seeds) == 0 {
		keyring = nil
		lc, err := local.Start(ctx, local.Options{OSDs: o.OSDs, Replicas: o.Replicas, PGs: o.PGs,
			Public: o.Public, Cluster: o.Cluster, Dir: o.Dir, Logger: o.Logger, Faults: o.Faults, ReadCacheSize: o.ReadCacheSize})
		if err != nil {
			return nil, err
		}
		defer lc.Close(context.Background())
		seeds, ts = lc.Seeds(), lc.Transports
		if !o.NoCeiling {
			if ceiling, err = MeasureDisk(ctx, lc.Dir); err != nil {
				return nil, err
			}
		}
	}
	cl, err := newObjClient(ctx, client.Options{Seeds: seeds, Logger: o.Logger, Transports: ts, Keyring: keyring})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	replicas, transport := o.Replicas, o.Public+"/"+o.Cluster
	if len(o.Seeds) > 0 {
		for p := range cl.Map().Pools() {
			replicas = int(p.Size)
			break
		}
		// The running cluster's networks, as its map has them, not
		// the local cluster's defaults.
		transport = mapTransports(cl.Map())
	}
	scope := CPUClientAndCluster
	if len(o.Seeds) > 0 {
		scope = CPUClient
	}
	rows, _, err := runObjRows(ctx, &o, sdkStore{cl}, func(r *ObjRow) {
		r.Replicas, r.Transport, r.CPUScope = replicas, transport, scope
		r.setDiskShare(ceiling)
	})
	return rows, err
}

// runObjS3 runs the rows against an S3 endpoint, then deletes what they
// wrote.
func runObjS3(ctx context.Context, o ObjOptions) ([]ObjRow, error) {
	st, err := newS3Store(*o.S3, o.Concurrency)
	if err != nil {
		return nil, err
	}
	defer st.close()
	// The keys the bucket held before stay, as with an Osprey cluster's
	// (osprey bench obj --seeds): the run's fixed names (objKey) may
	// rewrite them, as a later run's gets read an earlier one's puts.
	var before map[string]bool
	if !o.KeepObjects {
		if before, err = st.keysUnder(ctx, o.Bucket, ObjKeyPrefix); err != nil {
			return nil, fmt.Errorf("bench: listing %s before the run: %w", o.Bucket, err)
		}
	}
	rows, written, err := runObjRows(ctx, &o, st, func(r *ObjRow) { r.Transport, r.CPUScope = "s3", CPUClient })
	written.keys = slices.DeleteFunc(written.keys, func(k string) bool { return before[k] })
	if !o.KeepObjects && (written.bucketMade || len(written.keys) > 0) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
		defer cancel()
		if cerr := st.cleanup(cctx, o.Bucket, written.keys, written.bucketMade); cerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: deleting the run's objects from %s: %w", o.Bucket, cerr))
		}
	}
	return rows, err
}

// CleanupTimeout bounds the deletion of a run's objects (from an S3
// endpoint here, from a cluster by osprey bench obj --seeds), which runs
// after an interrupt too, and against a store that went away.
const CleanupTimeout = 2 * time.Minute

// objWritten is what a run wrote: the keys of its puts, and whether it
// made the bucket.
type objWritten struct {
	keys       []string
	bucketMade bool
}

// runObjRows makes the bucket and runs every row against st; label fills
// in what the store says of each row.
func runObjRows(ctx context.Context, o *ObjOptions, st objStore, label func(*ObjRow)) ([]ObjRow, objWritten, error) {
	var written objWritten
	var err error
	if written.bucketMade, err = st.makeBucket(ctx, o.Bucket); err != nil {
		return nil, written, err
	}
	var rows []ObjRow
	add := func(rs []ObjRow) {
		for _, r := range rs {
			label(&r)
			o.Logger.Info("bench: row done", "op", r.Op, "mix", r.Mix, "size", FormatSize(int64(r.Size)),
				"ops_per_sec", int64(r.OpsPerSec), "p50_us", r.P50Us)
			if o.OnRow != nil {
				o.OnRow(r)
			}
			rows = append(rows, r)
		}
	}
	for _, size := range o.Sizes {
		b := &objBench{o: o, st: st, set: &objSet{}, size: size, body: objBody(size, o.CompressibleBody)}
		err := func() error {
			defer func() {
				for n := range b.set.next.Load() {
					written.keys = append(written.keys, objKey(size, n))
				}
			}()
			for _, op := range o.Ops {
				rs, err := b.run(ctx, []MixWeight{{op, 1}}, "")
				add(rs)
				if err != nil {
					return err
				}
			}
			if len(o.Mix) > 0 {
				rs, err := b.run(ctx, o.Mix, FormatMix(o.Mix))
				add(rs)
				return err
			}
			return nil
		}()
		if err != nil {
			return rows, written, err
		}
	}
	return rows, written, nil
}

func objKey(size int, n int64) string { return fmt.Sprintf(ObjKeyPrefix+"%d/%08d", size, n) }

// ObjKeyPrefix is what every key the object benchmark writes starts with.
const ObjKeyPrefix = "bench/"

// objBody is what every put of a size writes: random bytes by default,
// which no compressing layer shrinks, as real media, archives and
// encrypted data (a patterned body compresses about 1,000:1 and flatters
// any layer that compresses).
func objBody(size int, compressible bool) []byte {
	body := make([]byte, size)
	if !compressible {
		fillRandom(body, uint64(size))
		return body
	}
	for i := range body {
		body[i] = byte(i * 7)
	}
	return body
}

// fillRandom fills b with random bytes from seed (ChaCha8: fast, and the
// same bytes each run).
func fillRandom(b []byte, seed uint64) {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	rand.NewChaCha8(s).Read(b)
}

// setDiskShare puts the row beside the disk's ceiling c. A mix's rows
// share the disk with each other: they get the ceiling, not a share.
func (r *ObjRow) setDiskShare(c DiskCeiling) {
	r.DiskWriteBytesPerSec, r.DiskReadBytesPerSec = c.WriteBytesPerSec, c.ReadBytesPerSec
	switch {
	case r.Mix != "":
	case r.Op == OpPut && c.WriteBytesPerSec > 0:
		r.DiskShare = r.BytesPerSec * float64(r.Replicas) / c.WriteBytesPerSec
	case r.Op == OpGet && c.ReadBytesPerSec > 0:
		r.DiskShare = r.BytesPerSec / c.ReadBytesPerSec
	}
}

// objSet is the working set of one size: the indexes n of the objects
// objKey(size, n) this run wrote and has not deleted.
type objSet struct {
	next atomic.Int64 // the next fresh index
	mu   sync.Mutex
	keys []int64
	// fresh holds what a mixed row's puts wrote: the only objects its
	// deletes take, so that they never delete what a get is reading.
	fresh []int64
}

func (s *objSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

func (s *objSet) add(n int64, fresh bool) {
	s.mu.Lock()
	if fresh {
		s.fresh = append(s.fresh, n)
	} else {
		s.keys = append(s.keys, n)
	}
	s.mu.Unlock()
}

// random returns a random object of the set (not of fresh).
func (s *objSet) random(rng *rand.Rand) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.keys) == 0 {
		return 0, false
	}
	return s.keys[rng.IntN(len(s.keys))], true
}

// take removes the newest object of the set, or of fresh.
func (s *objSet) take(fresh bool) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := &s.keys
	if fresh {
		l = &s.fresh
	}
	n := len(*l)
	if n == 0 {
		return 0, false
	}
	v := (*l)[n-1]
	*l = (*l)[:n-1]
	return v, true
}

// settle adds what a mixed row's puts left to the set.
func (s *objSet) settle() {
	s.mu.Lock()
	s.keys = append(s.keys, s.fresh...)
	s.fresh = nil
	s.mu.Unlock()
}

// objBench runs the rows of one size.
type objBench struct {
	o    *ObjOptions
	st   objStore
	set  *objSet
	size int
	body []byte
}

// errSetEmpty ends a row that has nothing left to read or delete.
var errSetEmpty = errors.New("the working set is empty")

// fill writes objects until the working set holds o.Objects, with
// o.Concurrency writers, outside any measurement.
func (b *objBench) fill(ctx context.Context) error {
	need := int64(b.o.Objects - b.set.len())
	if need <= 0 {
		return nil
	}
	b.o.Logger.Info("bench: writing the working set", "size", FormatSize(int64(b.size)), "objects", need)
	var (
		left     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	left.Store(need)
	for range min(int64(b.o.Concurrency), need) {
		wg.Go(func() {
			for left.Add(-1) >= 0 && ctx.Err() == nil {
				if _, err := b.do(ctx, OpPut, nil, false); err != nil {
					errOnce.Do(func() { firstErr = err })
					left.Store(0)
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("bench: writing the working set of %s objects: %w", FormatSize(int64(b.size)), firstErr)
	}
	return ctx.Err()
}

// do performs one operation and returns the one it performed: in a mix, a
// delete with no fresh object left to take is a put.
func (b *objBench) do(ctx context.Context, op ObjOp, rng *rand.Rand, mixed bool) (ObjOp, error) {
	o, st := b.o, b.st
	switch op {
	case OpDelete:
		n, ok := b.set.take(mixed)
		if !ok {
			if mixed {
				return b.do(ctx, OpPut, rng, mixed)
			}
			return op, errSetEmpty
		}
		return op, st.remove(ctx, o.Bucket, objKey(b.size, n))
	case OpPut:
		n := b.set.next.Add(1) - 1
		err := st.put(ctx, o.Bucket, objKey(b.size, n), b.body)
		if err == nil {
			b.set.add(n, mixed)
		}
		return op, err
	}
	n, ok := b.set.random(rng)
	if !ok {
		return op, errSetEmpty
	}
	key := objKey(b.size, n)
	switch op {
	case OpGet:
		return op, st.get(ctx, o.Bucket, key)
	case OpStat:
		return op, st.stat(ctx, o.Bucket, key)
	case OpList:
		return op, st.list(ctx, o.Bucket, fmt.Sprintf("bench/%d/", b.size), key, o.ListKeys)
	}
	return op, fmt.Errorf("bench: unknown operation %q", op)
}

// payloadBytes is what one operation moves of object data.
func payloadBytes(op ObjOp, size int) float64 {
	if op == OpPut || op == OpGet {
		return float64(size)
	}
	return 0
}

// run measures one row: a single operation (mix of one, name "") or a
// mixed workload, with o.Concurrency workers for o.Duration after
// o.Warmup. Each worker has a tally per operation.
func (b *objBench) run(ctx context.Context, mix []MixWeight, name string) ([]ObjRow, error) {
	o, mixed := b.o, name != ""
	if slices.ContainsFunc(mix, func(m MixWeight) bool { return m.Op != OpPut }) {
		if err := b.fill(ctx); err != nil {
			return nil, err
		}
	}
	objects := b.set.len()
	var total int
	for _, m := range mix {
		total += m.Weight
	}
	label := fmt.Sprintf("%s %s conc %d", mix[0].Op, FormatSize(int64(b.size)), o.Concurrency)
	progSize := int(payloadBytes(mix[0].Op, b.size))
	if mixed {
		label, progSize = fmt.Sprintf("mix %s %s conc %d", name, FormatSize(int64(b.size)), o.Concurrency), 0
	}
	rctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	r := startRun(rctx, runOptions{warmup: o.Warmup, duration: o.Duration, segment: o.Segment,
		label: label, size: progSize, progress: o.Progress})
	// tallies[k][w] is worker w's of operation ObjOps[k].
	tallies := make([][]*tally, len(ObjOps))
	for k := range tallies {
		tallies[k] = make([]*tally, o.Concurrency)
		for w := range tallies[k] {
			tallies[k][w] = r.newTally()
		}
	}
	errCounts := make([]atomic.Uint64, len(ObjOps))
	var (
		exhausted atomic.Bool
		denied    atomic.Pointer[error] // the refusal that stopped the row
		errOnce   sync.Once
		firstErr  error
		wg        sync.WaitGroup
	)
	for w := range o.Concurrency {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(b.size)))
			for !r.stopping() && ctx.Err() == nil {
				op := mix[0].Op
				if len(mix) > 1 {
					op = pickOp(mix, total, rng)
				}
				t0 := r.clk.now()
				op, err := b.do(ctx, op, rng, mixed)
				if errors.Is(err, errSetEmpty) {
					exhausted.Store(true)
					stopRun()
					return
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
				}
				if refused(err) {
					// No retry helps (a key revoked, caps taken away):
					// stop rather than spin on errors at full speed.
					denied.CompareAndSwap(nil, &err)
					stopRun()
					return
				}
				if !r.measuring() {
					continue // warming up, or the row ended meanwhile
				}
				k := slices.Index(ObjOps, op)
				if err != nil {
					errCounts[k].Add(1)
					continue
				}
				now := r.clk.now()
				tallies[k][w].record(now, now-t0)
			}
		})
	}
	<-r.stopped
	wg.Wait()
	if mixed {
		b.set.settle()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.elapsed() <= 0 {
		if exhausted.Load() {
			return nil, fmt.Errorf("bench: %s %s: the working set of %d objects ran out during the warm-up; raise --objects",
				label, FormatSize(int64(b.size)), objects)
		}
		return nil, fmt.Errorf("bench: %s: nothing measured", label)
	}
	if exhausted.Load() {
		o.Logger.Warn("bench: the row ran out of objects and stopped early; raise --objects for a full row",
			"row", label, "objects", objects, "seconds", float64(r.elapsed())/1e9)
	}

	var rows []ObjRow
	var all []*tally
	var segBytes []float64
	var ops, errs uint64
	for k, op := range ObjOps {
		h, segs := merged(tallies[k])
		inMix := slices.ContainsFunc(mix, func(m MixWeight) bool { return m.Op == op })
		if !inMix && h.Count() == 0 && errCounts[k].Load() == 0 {
			continue
		}
		row := b.row(op, name, objects, r, h, segs, payloadBytes(op, b.size), nil)
		row.Errors = errCounts[k].Load()
		if !mixed {
			row.CPUSeconds = (r.cpu1 - r.cpu0).Seconds()
			row.fillCPU()
		}
		rows = append(rows, row)
		all = append(all, tallies[k]...)
		ops += row.Ops
		errs += row.Errors
		counts, _ := wholeSegments(segs, r.seg, r.elapsed())
		if segBytes == nil {
			segBytes = make([]float64, len(counts)) // the same whole segments for every operation
		}
		for i, c := range counts {
			segBytes[i] += float64(c) * payloadBytes(op, b.size)
		}
	}
	if mixed {
		h, segs := merged(all)
		row := b.row(OpMixed, name, objects, r, h, segs, 0, segBytes)
		row.Errors = errs
		row.CPUSeconds = (r.cpu1 - r.cpu0).Seconds()
		for _, pr := range rows {
			row.BytesPerSec += pr.BytesPerSec
		}
		row.fillCPU()
		rows = append(rows, row)
	}
	if err := denied.Load(); err != nil {
		return rows, fmt.Errorf("bench: %s: stopped: %w", label, *err)
	}
	if ops == 0 && firstErr != nil {
		return rows, fmt.Errorf("bench: %s: %w", label, firstErr)
	}
	if firstErr != nil {
		o.Logger.Warn("bench: some ops failed", "row", label, "errors", errs, "first", firstErr)
	}
	return rows, nil
}

// refused reports whether err is a refusal no retry helps: access denied
// by the cluster or the S3 endpoint (403).
func refused(err error) bool {
	var se *s3Error
	return errors.Is(err, client.ErrAccessDenied) || errors.As(err, &se) && se.Status == 403
}

// row fills a row's rates from its histogram and segments. bytesPerOp
// gives the payload of each operation, or, when 0, segBytes the payload
// of each whole segment (a mix's total).
func (b *objBench) row(op ObjOp, mix string, objects int, r *run, h *Histogram, segs []uint64, bytesPerOp float64, segBytes []float64) ObjRow {
	el := r.elapsed()
	secs := float64(el) / 1e9
	row := ObjRow{Op: op, Mix: mix, Size: b.size, Concurrency: b.o.Concurrency, Objects: objects,
		Ops: h.Count(), Seconds: secs,
		P50Us:       float64(h.Quantile(0.5)) / 1e3,
		P99Us:       float64(h.Quantile(0.99)) / 1e3,
		P999Us:      float64(h.Quantile(0.999)) / 1e3,
		MaxUs:       float64(h.Max()) / 1e3,
		MeanUs:      h.Mean() / 1e3,
		LatencyHist: h.Buckets(),
	}
	row.OpsPerSec = float64(row.Ops) / secs
	row.BytesPerSec = row.OpsPerSec * bytesPerOp
	counts, width := wholeSegments(segs, r.seg, el)
	if segBytes == nil {
		segBytes = make([]float64, len(counts))
		for i, c := range counts {
			segBytes[i] = float64(c) * bytesPerOp
		}
	}
	row.Segments = segmentStats(width, counts, segBytes[:min(len(segBytes), len(counts))])
	return row
}

func (r *ObjRow) fillCPU() {
	if r.Ops > 0 {
		r.CPUUsPerOp = r.CPUSeconds * 1e6 / float64(r.Ops)
	}
	r.CPUSecPerGB = cpuPerGB(r.CPUSeconds, r.BytesPerSec*r.Seconds)
}

// pickOp draws an operation by weight.
func pickOp(mix []MixWeight, total int, rng *rand.Rand) ObjOp {
	x := rng.IntN(total)
	for _, m := range mix {
		if x < m.Weight {
			return m.Op
		}
		x -= m.Weight
	}
	return mix[len(mix)-1].Op
}

// WriteObjTable prints rows for people: one line per row, then the mixes'
// weights. "seg ops/s" is the slowest, median and fastest segment.
func WriteObjTable(w io.Writer, rows []ObjRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tsize\tconc\trepl\ttransport\tops/s\tMB/s\tdisk%\tseg ops/s slow/med/fast\tp50 ms\tp99 ms\tmax ms\tcpu s\tcpu s/GB\terrors\t")
	var mixes []string
	for _, r := range rows {
		op := string(r.Op)
		if r.Mix != "" {
			if !slices.Contains(mixes, r.Mix) {
				mixes = append(mixes, r.Mix)
			}
			if r.Op != OpMixed {
				op = fmt.Sprintf("mix%d:%s", slices.Index(mixes, r.Mix)+1, r.Op)
			} else {
				op = fmt.Sprintf("mix%d", slices.Index(mixes, r.Mix)+1)
			}
		}
		disk, repl := "-", "-" // an S3 endpoint does not say its replicas
		if r.DiskShare > 0 {
			disk = fmt.Sprintf("%.0f%%", 100*r.DiskShare)
		}
		if r.Replicas > 0 {
			repl = strconv.Itoa(r.Replicas)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.0f\t%.1f\t%s\t%s/%s/%s\t%s\t%s\t%s\t%.2f\t%s\t%d\t\n",
			op, FormatSize(int64(r.Size)), r.Concurrency, repl, r.Transport, r.OpsPerSec, r.BytesPerSec/1e6, disk,
			FormatCount(r.SegSlowestPerSec), FormatCount(r.SegMedianPerSec), FormatCount(r.SegFastestPerSec),
			formatMs(r.P50Us), formatTail(r.P99Us, r.Ops, 100, formatMs), formatMs(r.MaxUs), r.CPUSeconds, formatCPUPerGB(r.CPUSecPerGB), r.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, m := range mixes {
		fmt.Fprintf(w, "mix%d: %s (CPU on the total row only)\n", i+1, m)
	}
	if slices.ContainsFunc(rows, func(r ObjRow) bool { return r.Ops < 100 }) {
		fmt.Fprintln(w, "-: a row with fewer than 100 ops has no p99 (it would be its max)")
	}
	switch rows[0].CPUScope {
	case CPUClientAndCluster:
		fmt.Fprintln(w, "cpu: this process's, the client's and the local cluster's")
	case CPUClient:
		fmt.Fprintln(w, "cpu: the client's only (this process); the cluster's or endpoint's own is not counted")
	}
	if r := rows[0]; r.DiskWriteBytesPerSec > 0 {
		fmt.Fprintf(w, "disk: %.0f MB/s synced 4 MiB writes, %.0f MB/s reads; disk%% = a put's MB/s x replicas, or a get's MB/s, over them\n",
			r.DiskWriteBytesPerSec/1e6, r.DiskReadBytesPerSec/1e6)
	}
	return nil
}

// formatMs prints a latency of us microseconds in ms, with three digits
// after the point below 1 ms (a cached stat's 71 µs is 0.071, not 0.07).
func formatMs(us float64) string {
	if us < 1000 {
		return strconv.FormatFloat(us/1e3, 'f', 3, 64)
	}
	return strconv.FormatFloat(us/1e3, 'f', 2, 64)
}

// formatCPUPerGB prints "-" for rows that move no payload.
func formatCPUPerGB(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// mapTransports is "PUBLIC/CLUSTER", the schemes of the first OSD's
// addresses in mp ("?" for one that does not parse).
func mapTransports(mp *placement.Map) string {
	scheme := func(addr string) string {
		if a, err := msgr.ParseAddr(addr); err == nil {
			return a.Scheme
		}
		return "?"
	}
	for info := range mp.OSDs() {
		return scheme(info.PublicAddr) + "/" + scheme(info.ClusterAddr)
	}
	return "?/?"
}
