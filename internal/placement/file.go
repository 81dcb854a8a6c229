package placement

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxFileSize bounds what Load reads: a map of thousands of OSDs is well
// under a megabyte, and a wrong path must not read a disk image into memory.
const maxFileSize = 16 << 20

// Marshal returns the map in the file format (see the package comment):
// protojson with every field present, indented by two spaces, ending in a
// newline. The bytes are stable: equal maps marshal to equal bytes, in
// every build.
func (m *Map) Marshal() ([]byte, error) {
	// EmitUnpopulated shows "up": false and "in": false, which a reader of
	// the file would otherwise have to infer from their absence.
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m.pb)
	if err != nil {
		return nil, fmt.Errorf("placement: marshal cluster map: %w", err)
	}
	// protojson varies its whitespace from build to build on purpose, so
	// that nobody relies on it; re-indenting with encoding/json, which
	// first drops all insignificant whitespace, makes the output stable.
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, fmt.Errorf("placement: marshal cluster map: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// Unmarshal parses a map in the file format and validates it. Field names
// may be the proto names (pg_count) or their JSON names (pgCount); unknown
// fields are an error, not ignored, since a misspelt "weight" must not
// silently become weight 0. A parse failure is a *DecodeError, an invalid
// map a *MapError; both wrap ErrInvalidMap.
func Unmarshal(b []byte) (*Map, error) {
	pb := new(osdpb.ClusterMap)
	if err := protojson.Unmarshal(b, pb); err != nil {
		return nil, &DecodeError{Err: err}
	}
	return build(pb)
}

// Load reads and validates the map file at path (see Unmarshal).
func Load(path string) (*Map, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("placement: load map: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("placement: load map %s: %w", path, err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("placement: load map %s: larger than %d bytes: %w", path, maxFileSize, ErrInvalidMap)
	}
	m, err := Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("placement: load map %s: %w", path, err)
	}
	return m, nil
}

// Save writes the map to path atomically: after a crash at any point the
// file holds either the old map or the new one, never a mix. It writes a
// temporary file in the same directory, syncs it, renames it over path and
// syncs the directory so the rename itself is durable. The file is
// world-readable (0644): a map holds addresses, no secrets.
func (m *Map) Save(path string) (err error) {
	b, err := m.Marshal()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("placement: save map: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("placement: save map %s: %w", path, err)
		}
	}()
	if _, err = tmp.Write(b); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
