package placement

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

const testFSID = "0f6e3c52-8a8b-4c3e-9a41-6a0b2f1d9e77"

// testProto returns a valid map proto of OSDs with ids 0..len(weights)-1
// and the given weights, all up and in, and one pool.
func testProto(weights []float64, pool *osdpb.Pool) *osdpb.ClusterMap {
	pb := &osdpb.ClusterMap{Epoch: 1, Fsid: testFSID, Pools: []*osdpb.Pool{pool}}
	for i, w := range weights {
		pb.Osds = append(pb.Osds, &osdpb.OSDInfo{
			Id:          uint32(i),
			PublicAddr:  fmt.Sprintf("tcp://10.0.0.%d:6800", i+1),
			ClusterAddr: fmt.Sprintf("rdma+verbs://192.168.0.%d:6900", i+1),
			Weight:      w, Up: true, In: true,
		})
	}
	return pb
}

func equalWeights(n int) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

func mustMap(t testing.TB, pb *osdpb.ClusterMap) *Map {
	t.Helper()
	m, err := FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestFromProtoInvalid(t *testing.T) {
	pool := func() *osdpb.Pool { return &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 16, MinSize: 2} }
	for _, tc := range []struct {
		name  string
		edit  func(pb *osdpb.ClusterMap)
		field string // MapError.Field
		in    string // a substring of Reason
	}{
		{"epoch 0", func(pb *osdpb.ClusterMap) { pb.Epoch = 0 }, "epoch", "at least 1"},
		{"no fsid", func(pb *osdpb.ClusterMap) { pb.Fsid = "" }, "fsid", "missing"},
		{"fsid not UTF-8", func(pb *osdpb.ClusterMap) { pb.Fsid = "a\xff" }, "fsid", "UTF-8"},
		{"fsid control char", func(pb *osdpb.ClusterMap) { pb.Fsid = "a\nb" }, "fsid", "non-printable"},
		{"pool id too high", func(pb *osdpb.ClusterMap) { pb.Pools[0].Id = MaxPoolID + 1 }, "pools[0].id", "want 0..65534"},
		// A nil entry is copied as an empty message, which fails validation.
		{"nil OSD", func(pb *osdpb.ClusterMap) { pb.Osds[1] = nil }, "osds[1].public_addr", "missing"},
		{"duplicate OSD id", func(pb *osdpb.ClusterMap) { pb.Osds[2].Id = 0 }, "osds", "OSD id 0 appears more than once"},
		{"NaN weight", func(pb *osdpb.ClusterMap) { pb.Osds[1].Weight = math.NaN() }, "osds[1].weight", "finite"},
		{"+Inf weight", func(pb *osdpb.ClusterMap) { pb.Osds[1].Weight = math.Inf(1) }, "osds[1].weight", "finite"},
		{"negative weight", func(pb *osdpb.ClusterMap) { pb.Osds[0].Weight = -1 }, "osds[0].weight", ">= 0"},
		{"no public addr", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "" }, "osds[0].public_addr", "missing"},
		{"no cluster addr", func(pb *osdpb.ClusterMap) { pb.Osds[0].ClusterAddr = "" }, "osds[0].cluster_addr", "missing"},
		{"no scheme", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "10.0.0.1:6800" }, "osds[0].public_addr", "SCHEME://"},
		{"unknown scheme", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "udp://10.0.0.1:6800" }, "osds[0].public_addr", "unknown scheme"},
		{"upper-case scheme", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "TCP://10.0.0.1:6800" }, "osds[0].public_addr", "unknown scheme"},
		{"rdma without provider", func(pb *osdpb.ClusterMap) { pb.Osds[0].ClusterAddr = "rdma+://10.0.0.1:6800" }, "osds[0].cluster_addr", "PROVIDER"},
		{"rdma bad provider", func(pb *osdpb.ClusterMap) { pb.Osds[0].ClusterAddr = "rdma+Verbs://10.0.0.1:6800" }, "osds[0].cluster_addr", "PROVIDER"},
		{"no port", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "tcp://10.0.0.1" }, "osds[0].public_addr", "HOST:PORT"},
		{"port 0", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "tcp://10.0.0.1:0" }, "osds[0].public_addr", "1..65535"},
		{"port too big", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "tcp://10.0.0.1:65536" }, "osds[0].public_addr", "1..65535"},
		{"port not a number", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "tcp://10.0.0.1:http" }, "osds[0].public_addr", "1..65535"},
		{"no host", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "tcp://:6800" }, "osds[0].public_addr", "missing host"},
		{"bad host", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "tcp://a$b:6800" }, "osds[0].public_addr", "neither"},
		{"IPv6 without brackets", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "tcp://::1:6800" }, "osds[0].public_addr", "HOST:PORT"},
		{"path", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "tcp://10.0.0.1:6800/x" }, "osds[0].public_addr", "no path"},
		{"user", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "tcp://u@10.0.0.1:6800" }, "osds[0].public_addr", "no path"},
		{"space", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "tcp://10.0.0.1: 6800" }, "osds[0].public_addr", "space"},
		{"empty mem", func(pb *osdpb.ClusterMap) { pb.Osds[0].PublicAddr = "mem://" }, "osds[0].public_addr", "mem://NAME"},
		{"nil pool", func(pb *osdpb.ClusterMap) { pb.Pools[0] = nil }, "pools[0].name", "missing"},
		{"no pool name", func(pb *osdpb.ClusterMap) { pb.Pools[0].Name = "" }, "pools[0].name", "missing"},
		{"size 0", func(pb *osdpb.ClusterMap) { pb.Pools[0].Size = 0 }, "pools[0].size", "at least 1"},
		{"pg_count 0", func(pb *osdpb.ClusterMap) { pb.Pools[0].PgCount = 0 }, "pools[0].pg_count", "1..65536"},
		{"pg_count too big", func(pb *osdpb.ClusterMap) { pb.Pools[0].PgCount = MaxPGCount + 1 }, "pools[0].pg_count", "1..65536"},
		{"min_size > size", func(pb *osdpb.ClusterMap) { pb.Pools[0].MinSize = 4 }, "pools[0].min_size", "exceeds size 3"},
		{"NaN full ratio", func(pb *osdpb.ClusterMap) { pb.FullRatio = math.NaN() }, "full_ratio", "fraction"},
		{"full ratio over 1", func(pb *osdpb.ClusterMap) { pb.FullRatio = 1.01 }, "full_ratio", "fraction"},
		{"negative nearfull ratio", func(pb *osdpb.ClusterMap) { pb.NearfullRatio = -0.5 }, "nearfull_ratio", "fraction"},
		{"full below the default backfillfull", func(pb *osdpb.ClusterMap) { pb.FullRatio = 0.8 }, "full ratios", "nearfull <= backfillfull <= full"},
		{"nearfull over backfillfull", func(pb *osdpb.ClusterMap) { pb.NearfullRatio, pb.BackfillfullRatio = 0.9, 0.88 }, "full ratios", "nearfull <= backfillfull <= full"},
		{"duplicate pool id", func(pb *osdpb.ClusterMap) {
			pb.Pools = append(pb.Pools, &osdpb.Pool{Id: 1, Name: "q", Size: 1, PgCount: 1})
		}, "pools", "pool id 1 appears more than once"},
		{"duplicate pool name", func(pb *osdpb.ClusterMap) {
			pb.Pools = append(pb.Pools, &osdpb.Pool{Id: 2, Name: "p", Size: 1, PgCount: 1})
		}, "pools[1].name", `"p" appears more than once`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pb := testProto(equalWeights(3), pool())
			tc.edit(pb)
			m, err := FromProto(pb)
			if err == nil {
				t.Fatalf("FromProto accepted the map (epoch %d)", m.Epoch())
			}
			var me *MapError
			if !errors.As(err, &me) || !errors.Is(err, ErrInvalidMap) {
				t.Fatalf("error %v (%T) is not a *MapError wrapping ErrInvalidMap", err, err)
			}
			if me.Field != tc.field || !strings.Contains(me.Reason, tc.in) {
				t.Fatalf("error %q: want field %q and a reason with %q", err, tc.field, tc.in)
			}
			if !strings.HasPrefix(err.Error(), "placement: invalid cluster map: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
	if _, err := FromProto(nil); !errors.Is(err, ErrInvalidMap) {
		t.Fatalf("FromProto(nil) = %v, want ErrInvalidMap", err)
	}
}

func TestFromProtoValidAddrs(t *testing.T) {
	for _, a := range []string{
		"tcp://10.0.0.1:6800", "tcp://[::1]:6800", "tcp://[fe80::1%eth0]:1", "tcp://osd-3.rack_2.example.com:65535",
		"rdma+verbs://10.0.0.1:6800", "rdma+efa://h:1", "rdma+tcp://127.0.0.1:7000", "rdma+sockets://localhost:7000",
		"mem://osd0", "mem://auto-3",
	} {
		pb := testProto(equalWeights(1), &osdpb.Pool{Id: 1, Name: "p", Size: 1, PgCount: 1})
		pb.Osds[0].PublicAddr, pb.Osds[0].ClusterAddr = a, a
		if _, err := FromProto(pb); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
}

func TestMapIsImmutable(t *testing.T) {
	pb := testProto([]float64{1, 2, 0}, &osdpb.Pool{Id: 4, Name: "p", Size: 2, PgCount: 8})
	m := mustMap(t, pb)
	before := m.Proto()

	// Nothing the caller holds or gets back reaches the Map's state.
	pb.Osds[0].Up = false
	pb.Pools[0].Size = 1
	m.Proto().Epoch = 99
	o, _ := m.OSD(1)
	o.Weight = 7
	p, _ := m.Pool(4)
	p.PgCount = 1
	p, _ = m.PoolByName("p")
	p.Name = "x"
	for o := range m.OSDs() {
		o.Up = false
	}
	for p := range m.Pools() {
		p.Size = 9
	}
	set := m.ActingSet(4, 0)
	set[0] = 42
	if !proto.Equal(before, m.Proto()) {
		t.Fatalf("map changed through a copy:\n%v\nwant\n%v", m.Proto(), before)
	}
	if got := m.ActingSet(4, 0); slices.Contains(got, 42) {
		t.Fatalf("ActingSet = %v: changed through a returned slice", got)
	}
}

func TestAccessors(t *testing.T) {
	pb := testProto([]float64{1, 1, 1}, &osdpb.Pool{Id: 9, Name: "nine", Size: 2, PgCount: 8})
	pb.Pools = append(pb.Pools, &osdpb.Pool{Id: 3, Name: "three", Size: 1, PgCount: 4})
	// Out of id order on purpose: the accessors yield id order.
	pb.Osds[0].Id, pb.Osds[2].Id = 20, 0
	m := mustMap(t, pb)
	if m.Epoch() != 1 || m.FSID() != testFSID {
		t.Fatalf("Epoch, FSID = %d, %q", m.Epoch(), m.FSID())
	}
	var ids []uint32
	for o := range m.OSDs() {
		ids = append(ids, o.Id)
	}
	if !slices.Equal(ids, []uint32{0, 1, 20}) {
		t.Fatalf("OSDs yielded ids %v, want [0 1 20]", ids)
	}
	var pools []uint32
	for p := range m.Pools() {
		pools = append(pools, p.Id)
		break // the iterators honour an early stop
	}
	if !slices.Equal(pools, []uint32{3}) {
		t.Fatalf("Pools yielded %v first, want [3]", pools)
	}
	if o, ok := m.OSD(20); !ok || o.PublicAddr != "tcp://10.0.0.1:6800" {
		t.Fatalf("OSD(20) = %v, %v", o, ok)
	}
	if _, ok := m.OSD(5); ok {
		t.Fatal("OSD(5) found")
	}
	if a, ok := m.PublicAddr(0); !ok || a != "tcp://10.0.0.3:6800" {
		t.Fatalf("PublicAddr(0) = %q, %v", a, ok)
	}
	if a, ok := m.ClusterAddr(1); !ok || a != "rdma+verbs://192.168.0.2:6900" {
		t.Fatalf("ClusterAddr(1) = %q, %v", a, ok)
	}
	if a, ok := m.PublicAddr(5); ok || a != "" {
		t.Fatalf("PublicAddr(5) = %q, %v", a, ok)
	}
	if p, ok := m.Pool(9); !ok || p.Name != "nine" {
		t.Fatalf("Pool(9) = %v, %v", p, ok)
	}
	if p, ok := m.PoolByName("three"); !ok || p.Id != 3 {
		t.Fatalf("PoolByName(three) = %v, %v", p, ok)
	}
	if _, ok := m.Pool(4); ok {
		t.Fatal("Pool(4) found")
	}
	if _, ok := m.PoolByName("four"); ok {
		t.Fatal("PoolByName(four) found")
	}
}

func TestWith(t *testing.T) {
	m := mustMap(t, testProto(equalWeights(4), &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 64}))
	var kept *osdpb.ClusterMap
	next, err := m.With(func(pb *osdpb.ClusterMap) {
		kept = pb
		pb.Epoch = 77 // ignored
		pb.Osds[3].Up = false
	})
	if err != nil {
		t.Fatal(err)
	}
	if next.Epoch() != 2 || m.Epoch() != 1 {
		t.Fatalf("epochs: next %d, old %d; want 2, 1", next.Epoch(), m.Epoch())
	}
	if o, _ := next.OSD(3); o.Up {
		t.Fatal("OSD 3 still up in the new map")
	}
	if o, _ := m.OSD(3); !o.Up {
		t.Fatal("With changed the old map")
	}
	kept.Osds[0].Up = false // edit's copy is not the new map's
	if o, _ := next.OSD(0); !o.Up {
		t.Fatal("the new map aliases edit's proto")
	}
	for pg := range uint32(64) {
		if slices.Contains(next.ActingSet(1, pg), 3) {
			t.Fatalf("PG %d still maps to the down OSD 3", pg)
		}
	}

	var me *MapError
	if _, err := m.With(func(pb *osdpb.ClusterMap) { pb.Osds[0].Weight = -1 }); !errors.As(err, &me) || me.Field != "osds[0].weight" {
		t.Fatalf("With made an invalid map: %v", err)
	}
	if _, err := m.With(func(pb *osdpb.ClusterMap) { pb.Fsid = "other" }); !errors.As(err, &me) || me.Field != "fsid" {
		t.Fatalf("With changed the fsid: %v", err)
	}
	last := mustMap(t, &osdpb.ClusterMap{Epoch: math.MaxUint64, Fsid: "f", Osds: m.Proto().Osds})
	if _, err := last.With(func(*osdpb.ClusterMap) {}); !errors.As(err, &me) || me.Field != "epoch" {
		t.Fatalf("With past the last epoch: %v", err)
	}
}

func TestNewLocal(t *testing.T) {
	for n := 1; n <= 5; n++ {
		var pub []string
		for i := range n {
			pub = append(pub, fmt.Sprintf("tcp://127.0.0.1:%d", 6800+i))
		}
		m, err := NewLocal(LocalOptions{PublicAddrs: pub})
		if err != nil {
			t.Fatal(err)
		}
		p, ok := m.PoolByName(DefaultPoolName)
		if !ok || p.Id != DefaultPoolID || p.PgCount != DefaultPGCount || p.Size != uint32(min(3, n)) || p.MinSize != 0 || MinSize(p) != int(p.Size)-int(p.Size)/2 {
			t.Fatalf("%d OSDs: pool %v", n, p)
		}
		if m.Epoch() != 1 || len(m.FSID()) != 36 {
			t.Fatalf("%d OSDs: epoch %d, fsid %q", n, m.Epoch(), m.FSID())
		}
		for i := range n {
			o, ok := m.OSD(uint32(i))
			if !ok || !o.Up || !o.In || o.Weight != 1 || o.PublicAddr != pub[i] || o.ClusterAddr != pub[i] {
				t.Fatalf("%d OSDs: OSD %d = %v", n, i, o)
			}
		}
		for pg := range uint32(DefaultPGCount) {
			if got := len(m.ActingSet(DefaultPoolID, pg)); got != min(3, n) {
				t.Fatalf("%d OSDs: PG %d has %d OSDs", n, pg, got)
			}
		}
	}

	a, _ := NewLocal(LocalOptions{PublicAddrs: []string{"mem://a"}})
	b, _ := NewLocal(LocalOptions{PublicAddrs: []string{"mem://a"}})
	if a.FSID() == b.FSID() {
		t.Fatalf("two local clusters share fsid %s", a.FSID())
	}

	m, err := NewLocal(LocalOptions{
		PublicAddrs:  []string{"tcp://127.0.0.1:6800", "tcp://127.0.0.1:6801"},
		ClusterAddrs: []string{"rdma+tcp://127.0.0.1:6900", "rdma+tcp://127.0.0.1:6901"},
		PGCount:      32, Size: 1, FSID: "f",
	})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := m.Pool(DefaultPoolID); p.PgCount != 32 || p.Size != 1 || m.FSID() != "f" {
		t.Fatalf("options ignored: %v, fsid %q", p, m.FSID())
	}
	if a, _ := m.ClusterAddr(1); a != "rdma+tcp://127.0.0.1:6901" {
		t.Fatalf("ClusterAddr(1) = %q", a)
	}

	for _, opts := range []LocalOptions{
		{},
		{PublicAddrs: []string{"tcp://h:1"}, ClusterAddrs: []string{}},
		{PublicAddrs: []string{"nonsense"}},
	} {
		if _, err := NewLocal(opts); !errors.Is(err, ErrInvalidMap) {
			t.Errorf("NewLocal(%+v) = %v, want ErrInvalidMap", opts, err)
		}
	}
}

// TestFullness: the map's ratios (Ceph's defaults when unset) turn a disk's
// used fraction into its state.
func TestFullness(t *testing.T) {
	m := mustMap(t, testProto(equalWeights(3), &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 16}))
	for _, tc := range []struct {
		used float64
		want osdpb.Fullness
	}{
		{0, osdpb.Fullness_FULLNESS_NONE}, {0.8499, osdpb.Fullness_FULLNESS_NONE},
		{0.85, osdpb.Fullness_FULLNESS_NEARFULL}, {0.9, osdpb.Fullness_FULLNESS_BACKFILLFULL},
		{0.95, osdpb.Fullness_FULLNESS_FULL}, {1, osdpb.Fullness_FULLNESS_FULL},
	} {
		if got := m.Fullness(tc.used); got != tc.want {
			t.Errorf("default ratios: %v used is %v, want %v", tc.used, got, tc.want)
		}
	}
	m, err := m.With(func(pb *osdpb.ClusterMap) { pb.NearfullRatio, pb.BackfillfullRatio, pb.FullRatio = 0.5, 0.6, 0.7 })
	if err != nil {
		t.Fatal(err)
	}
	if near, back, full := m.FullRatios(); near != 0.5 || back != 0.6 || full != 0.7 {
		t.Fatalf("ratios %v %v %v", near, back, full)
	}
	if got := m.Fullness(0.65); got != osdpb.Fullness_FULLNESS_BACKFILLFULL {
		t.Fatalf("0.65 used at 0.5/0.6/0.7: %v", got)
	}
}

// TestGivenUp: peering stops waiting for an OSD the map no longer has, or
// one down and declared lost after the interval began, and gives up one
// whose store was born after it began; never one up with its old store.
func TestGivenUp(t *testing.T) {
	pb := testProto(equalWeights(5), &osdpb.Pool{Id: 1, Name: "p", Size: 3, PgCount: 8})
	pb.Epoch = 20
	pb.Osds[1].Up, pb.Osds[1].LostAt = false, 12 // down, lost at 12
	pb.Osds[2].LostAt = 12                       // lost at 12, up again since
	pb.Osds[3].Up = false                        // down, not lost
	pb.Osds[4].Born = 15                         // up, its store made at 15
	m := mustMap(t, pb)
	for _, c := range []struct {
		id    uint32
		first uint64
		want  bool
	}{
		{0, 5, false},  // up
		{1, 5, true},   // lost after the interval began
		{1, 12, false}, // lost when it began: says nothing of it
		{2, 5, false},  // up again
		{3, 5, false},  // down, not lost
		{4, 14, true},  // its store was made after the interval began
		{4, 15, false}, // made when it began: a member with this store
		{9, 5, true},   // removed
		{9, 100, true}, // removed: any interval
	} {
		if got := m.GivenUp(c.id, c.first); got != c.want {
			t.Errorf("GivenUp(osd.%d, interval from %d) = %v, want %v", c.id, c.first, got, c.want)
		}
	}
}
