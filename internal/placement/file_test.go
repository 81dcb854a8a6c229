package placement

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	pb := testProto([]float64{1, 2.5, 0}, &osdpb.Pool{Id: 1, Name: "default", Size: 3, PgCount: 128, MinSize: 2})
	pb.Osds[1].Up = false
	pb.Osds[2].In = false
	pb.Pools = append(pb.Pools, &osdpb.Pool{Id: 2, Name: "cold", Size: 1, PgCount: 8})
	pb.Epoch = 1 << 60 // beyond float64 precision: must survive as a string
	m := mustMap(t, pb)

	path := filepath.Join(t.TempDir(), "cluster.json")
	if err := m.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.Proto(), m.Proto()) {
		t.Fatalf("round trip changed the map:\n%v\nwant\n%v", got.Proto(), m.Proto())
	}
	// Saving over an existing file replaces it and leaves no temporary.
	next, _ := m.With(func(pb *osdpb.ClusterMap) { pb.Osds[1].Up = true })
	if err := next.Save(path); err != nil {
		t.Fatal(err)
	}
	if got, err := Load(path); err != nil || got.Epoch() != m.Epoch()+1 {
		t.Fatalf("Load after second Save: %v, %v", got, err)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries after Save, want 1 (no temporaries)", len(ents))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Fatalf("map file mode %v, want 0644", fi.Mode().Perm())
	}

	// Marshal is stable and matches the file.
	b1, _ := m.Marshal()
	b2, _ := mustMap(t, m.Proto()).Marshal()
	if string(b1) != string(b2) {
		t.Fatal("Marshal is not stable")
	}
	if file, _ := os.ReadFile(path); string(file) != string(must(next.Marshal())) {
		t.Fatal("the file is not Marshal's bytes")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestFileFormat pins the documented format: every field, camelCase,
// two-space indent, 64-bit numbers as strings.
func TestFileFormat(t *testing.T) {
	m, err := NewLocal(LocalOptions{
		PublicAddrs:  []string{"tcp://10.0.0.1:6800"},
		ClusterAddrs: []string{"rdma+verbs://192.168.0.1:6900"},
		FSID:         testFSID,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "epoch": "1",
  "fsid": "0f6e3c52-8a8b-4c3e-9a41-6a0b2f1d9e77",
  "osds": [
    {
      "id": 0,
      "publicAddr": "tcp://10.0.0.1:6800",
      "clusterAddr": "rdma+verbs://192.168.0.1:6900",
      "weight": 1,
      "up": true,
      "in": true,
      "host": "",
      "uuid": "",
      "downSinceUnixNano": "0",
      "autoOut": false,
      "upFrom": "0",
      "fullness": "FULLNESS_NONE",
      "lostAt": "0",
      "born": "0",
      "features": "0",
      "dead": false,
      "version": ""
    }
  ],
  "pools": [
    {
      "id": 1,
      "name": "default",
      "size": 1,
      "pgCount": 128,
      "minSize": 0
    }
  ],
  "nearfullRatio": 0,
  "backfillfullRatio": 0,
  "fullRatio": 0,
  "flags": [],
  "pgTemp": []
}
`
	if got := string(must(m.Marshal())); got != want {
		t.Fatalf("Marshal:\n%s\nwant\n%s", got, want)
	}
}

// TestUnmarshalLenient: proto names, numbers for uint64, omitted fields.
func TestUnmarshalLenient(t *testing.T) {
	m, err := Unmarshal([]byte(`{"epoch": 3, "fsid": "f",
		"osds": [{"id": 2, "public_addr": "mem://a", "cluster_addr": "mem://a", "weight": 1, "up": true, "in": true}],
		"pools": [{"id": 1, "name": "p", "size": 1, "pg_count": 4}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := m.Primary(1, 3); m.Epoch() != 3 || p != 2 {
		t.Fatalf("epoch %d, primary %d", m.Epoch(), p)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	valid := `{"epoch": "1", "fsid": "f", "osds": [{"id": 0, "publicAddr": "mem://a", "clusterAddr": "mem://a"}]}`
	if _, err := Unmarshal([]byte(valid)); err != nil {
		t.Fatalf("the base case is invalid: %v", err)
	}
	for _, tc := range []struct {
		name, in string
		decode   bool   // a *DecodeError, else a *MapError
		msg      string // in the error text
	}{
		{"empty", ``, true, "unexpected"},
		{"garbage", "\x00\x01garbage", true, "invalid"},
		{"not an object", `[1, 2]`, true, "unexpected"},
		{"null", `null`, true, "unexpected"},
		{"truncated", valid[:20], true, "unexpected"},
		{"trailing data", valid + `{}`, true, "unexpected"},
		{"unknown field", strings.Replace(valid, `"fsid"`, `"fsidd"`, 1), true, `unknown field "fsidd"`},
		{"misspelt weight", strings.Replace(valid, `"id": 0`, `"id": 0, "wieght": 2`, 1), true, `unknown field "wieght"`},
		{"duplicate field", strings.Replace(valid, `"fsid": "f"`, `"fsid": "f", "fsid": "g"`, 1), true, "duplicate"},
		{"wrong type", strings.Replace(valid, `"id": 0`, `"id": "x"`, 1), true, "invalid value"},
		{"negative id", strings.Replace(valid, `"id": 0`, `"id": -1`, 1), true, "invalid value"},
		{"NaN weight", strings.Replace(valid, `"id": 0`, `"id": 0, "weight": "NaN"`, 1), false, "osds[0].weight"},
		{"epoch 0", strings.Replace(valid, `"epoch": "1"`, `"epoch": "0"`, 1), false, "epoch"},
		{"bad address", strings.Replace(valid, `"publicAddr": "mem://a"`, `"publicAddr": "a"`, 1), false, "osds[0].public_addr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Unmarshal([]byte(tc.in))
			if !errors.Is(err, ErrInvalidMap) {
				t.Fatalf("error %v does not wrap ErrInvalidMap", err)
			}
			var de *DecodeError
			var me *MapError
			if tc.decode && !errors.As(err, &de) || !tc.decode && !errors.As(err, &me) {
				t.Fatalf("error %v is a %T", err, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not mention %q", err, tc.msg)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(missing) = %v, want fs.ErrNotExist", err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("epoch: 1\n"), 0o644)
	_, err := Load(bad)
	var de *DecodeError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Load(bad) = %v, want a *DecodeError naming the file", err)
	}
	big := filepath.Join(dir, "big.json")
	os.WriteFile(big, make([]byte, maxFileSize+1), 0o644)
	if _, err := Load(big); !errors.Is(err, ErrInvalidMap) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Load(big) = %v", err)
	}
	if _, err := Load(dir); err == nil {
		t.Fatal("Load(a directory) succeeded")
	}
	m := mustMap(t, testProto(equalWeights(1), &osdpb.Pool{Id: 1, Name: "p", Size: 1, PgCount: 1}))
	if err := m.Save(filepath.Join(dir, "no", "such", "dir.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Save into a missing directory = %v", err)
	}
}
