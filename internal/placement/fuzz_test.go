package placement

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// fuzzSeeds are map files, valid and not, for the fuzz targets.
var fuzzSeeds = []string{
	``,
	`{}`,
	`null`,
	`{"epoch": "1", "fsid": "f", "osds": [{"id": 0, "publicAddr": "mem://a", "clusterAddr": "mem://a", "weight": 1, "up": true, "in": true}],
	  "pools": [{"id": 1, "name": "p", "size": 3, "pgCount": 16, "minSize": 2}]}`,
	`{"epoch": 7, "fsid": "f", "osds": [
	  {"id": 0, "public_addr": "tcp://10.0.0.1:6800", "cluster_addr": "rdma+verbs://[fe80::1]:6900", "weight": 2, "up": true, "in": true},
	  {"id": 9, "public_addr": "tcp://h:1", "cluster_addr": "tcp://h:2", "weight": 0.5, "up": true, "in": true},
	  {"id": 4, "public_addr": "tcp://h:3", "cluster_addr": "tcp://h:4", "weight": 0, "up": true, "in": true}],
	  "pools": [{"id": 2, "name": "a", "size": 2, "pg_count": 65536}, {"id": 1, "name": "b", "size": 1, "pg_count": 1}]}`,
	`{"epoch": "1", "fsid": "f", "osds": [{"id": 0, "weight": "NaN"}]}`,
	`{"epoch": "1", "fsid": "f", "osds": [{"id": 0, "weight": "-Infinity"}], "pools": [{"pgCount": 0}]}`,
	`{"epoch": "18446744073709551615", "fsid": "\u0000", "osds": [null]}`,
	`{"epoch": 1e3, "unknown": {}}`,
}

// checkMap exercises a map that FromProto or Unmarshal accepted: it must
// survive a Marshal/Unmarshal round trip unchanged and answer placement
// queries without panicking.
func checkMap(t *testing.T, m *Map) {
	b, err := m.Marshal()
	if err != nil {
		t.Fatalf("Marshal of a valid map: %v", err)
	}
	again, err := Unmarshal(b)
	if err != nil {
		t.Fatalf("Unmarshal(Marshal(m)): %v\n%s", err, b)
	}
	// Compared as JSON: a map from FromProto may carry unknown proto fields
	// (kept, so a newer peer's fields survive forwarding), which the file
	// format does not hold.
	if b2, _ := again.Marshal(); string(b2) != string(b) {
		t.Fatalf("round trip changed the map:\n%s\nbecame\n%s", b, b2)
	}
	osds := len(m.osds)
	for p := range m.Pools() {
		// Building a whole table is pg_count x OSDs draws; keep fuzzing fast.
		if int(p.PgCount)*osds > 1<<12 {
			continue
		}
		for _, pg := range []uint32{0, p.PgCount - 1, p.PgCount, MetaPG} {
			set := m.ActingSet(p.Id, pg)
			if pg < p.PgCount && len(set) > int(p.Size) {
				t.Fatalf("pool %d PG %d: %d OSDs for size %d", p.Id, pg, len(set), p.Size)
			}
			if prim, ok := m.Primary(p.Id, pg); ok != (len(set) > 0) || ok && prim != set[0] {
				t.Fatalf("pool %d PG %d: Primary %d, %v; acting set %v", p.Id, pg, prim, ok, set)
			}
		}
		for o := range m.OSDs() {
			for range m.PGsOf(p.Id, o.Id) {
			}
			break
		}
		PGOf(p, "b", "k")
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Unmarshal(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidMap) {
				t.Fatalf("error %v does not wrap ErrInvalidMap", err)
			}
			return
		}
		checkMap(t, m)
	})
}

func FuzzLoad(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "map.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Load(path)
		if err != nil {
			if !errors.Is(err, ErrInvalidMap) {
				t.Fatalf("error %v does not wrap ErrInvalidMap", err)
			}
			return
		}
		// Save's fsyncs would slow fuzzing a hundredfold; the round trip
		// through Marshal is the same check.
		checkMap(t, m)
	})
}

// FuzzFromProto feeds FromProto maps decoded from arbitrary protobuf
// bytes, which reach values JSON seeds rarely do (huge ids, NaN weights,
// invalid UTF-8).
func FuzzFromProto(f *testing.F) {
	for _, s := range fuzzSeeds {
		pb := new(osdpb.ClusterMap)
		if err := protojson.Unmarshal([]byte(s), pb); err == nil {
			b, _ := proto.Marshal(pb)
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pb := new(osdpb.ClusterMap)
		if proto.Unmarshal(b, pb) != nil {
			return
		}
		m, err := FromProto(pb)
		if err != nil {
			var me *MapError
			if !errors.As(err, &me) {
				t.Fatalf("error %v is not a *MapError", err)
			}
			return
		}
		checkMap(t, m)
		// A map may have no OSDs (FromProto accepts that), and one at
		// the highest epoch cannot advance.
		next, err := m.With(func(pb *osdpb.ClusterMap) {
			if len(pb.Osds) > 0 {
				pb.Osds[0].Up = !pb.Osds[0].Up
			}
		})
		if m.Epoch() == math.MaxUint64 {
			var me *MapError
			if !errors.As(err, &me) {
				t.Fatalf("With at the highest epoch: %v, want a *MapError", err)
			}
			return
		}
		if err != nil || next.Epoch() != m.Epoch()+1 {
			t.Fatalf("With: %v", err)
		}
	})
}
