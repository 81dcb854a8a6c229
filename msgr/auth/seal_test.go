package auth

import (
	"bytes"
	"errors"
	"testing"
)

func sealerPair(t *testing.T) (*Sealer, *Sealer) {
	t.Helper()
	secret := bytes.Repeat([]byte{7}, DirectionKeyLen)
	s, err := NewSealer(secret)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := NewSealer(secret)
	return s, o
}

func TestSealOpen(t *testing.T) {
	s, o := sealerPair(t)
	pre := []byte("preamble")
	var seen [][]byte
	for i := range 100 {
		msg := bytes.Repeat([]byte{byte(i)}, i)
		sealed, err := s.Seal(nil, msg, pre)
		if err != nil {
			t.Fatal(err)
		}
		if len(sealed) != len(msg)+Overhead {
			t.Fatalf("sealed %d bytes into %d", len(msg), len(sealed))
		}
		for _, p := range seen {
			if bytes.Equal(p, sealed) && i > 0 {
				t.Fatal("two frames sealed alike")
			}
		}
		seen = append(seen, sealed)
		got, err := o.Open(nil, sealed, pre)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	// The same plaintext twice seals differently: the nonce moved on.
	a, _ := s.Seal(nil, []byte("same"), nil)
	b, _ := s.Seal(nil, []byte("same"), nil)
	if bytes.Equal(a, b) {
		t.Fatal("nonce reused")
	}
}

func TestOpenRefuses(t *testing.T) {
	for name, mangle := range map[string]func(s *Sealer, f1, f2 []byte) ([]byte, []byte){
		"flipped bit":     func(_ *Sealer, f1, _ []byte) ([]byte, []byte) { f1[3] ^= 1; return f1, nil },
		"other preamble":  func(_ *Sealer, f1, _ []byte) ([]byte, []byte) { return f1, []byte("other") },
		"replayed":        func(_ *Sealer, f1, _ []byte) ([]byte, []byte) { return f1, nil }, // opened twice below
		"reordered":       func(_ *Sealer, _, f2 []byte) ([]byte, []byte) { return f2, nil },
		"truncated":       func(_ *Sealer, f1, _ []byte) ([]byte, []byte) { return f1[:len(f1)-1], nil },
		"other direction": func(_ *Sealer, f1, _ []byte) ([]byte, []byte) { return f1, nil },
	} {
		t.Run(name, func(t *testing.T) {
			s, o := sealerPair(t)
			if name == "other direction" {
				o, _ = NewSealer(bytes.Repeat([]byte{8}, DirectionKeyLen))
			}
			f1, _ := s.Seal(nil, []byte("frame one"), []byte("pre"))
			f2, _ := s.Seal(nil, []byte("frame two"), []byte("pre"))
			if name == "replayed" {
				if _, err := o.Open(nil, f1, []byte("pre")); err != nil {
					t.Fatal(err)
				}
			}
			f, pre := mangle(s, f1, f2)
			if pre == nil {
				pre = []byte("pre")
			}
			if _, err := o.Open(nil, f, pre); !errors.Is(err, ErrOpen) {
				t.Fatalf("opened: %v", err)
			}
			// Once broken, always broken: even the right next frame.
			if _, err := o.Open(nil, f2, []byte("pre")); !errors.Is(err, ErrOpen) {
				t.Fatal("an opener went on after a frame failed")
			}
		})
	}
}

// TestRekeyInStep: both ends move to the next key at the same frame, by
// count and by bytes, and the key really changes.
func TestRekeyInStep(t *testing.T) {
	s, o := sealerPair(t)
	s.count, o.count = rekeyFrames-2, rekeyFrames-2
	s.bytes, o.bytes = 0, 0
	for i := range 4 {
		f, err := s.Seal(nil, []byte("x"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.Open(nil, f, nil); err != nil {
			t.Fatalf("frame %d around the rekey: %v", i, err)
		}
	}
	if s.epoch != 2 || o.epoch != 2 || s.count != 2 {
		t.Fatalf("after the frame limit: epochs %d/%d, count %d", s.epoch, o.epoch, s.count)
	}
	s.bytes, o.bytes = rekeyBytes-10, rekeyBytes-10
	f, _ := s.Seal(nil, make([]byte, 10), nil)
	if _, err := o.Open(nil, f, nil); err != nil {
		t.Fatal(err)
	}
	if s.epoch != 3 || o.epoch != 3 {
		t.Fatalf("after the byte limit: epochs %d/%d", s.epoch, o.epoch)
	}
	// An opener that did not rekey cannot read the new key's frames.
	stale, _ := NewSealer(bytes.Repeat([]byte{7}, DirectionKeyLen))
	stale.count = s.count
	f, _ = s.Seal(nil, []byte("y"), nil)
	if _, err := stale.Open(nil, f, nil); !errors.Is(err, ErrOpen) {
		t.Fatal("the key did not change at the rekey")
	}
}

// TestRecords: a run of k records takes the nonces k Seals would, in
// order, so record i seals as the i-th of k consecutive Seals; the run
// counts as k messages, its bytes as sealed; a record opens only at its
// own index; and a record that does not open is ErrOpen, after which an
// opener the caller broke refuses everything.
func TestRecords(t *testing.T) {
	const k = 5
	s, o := sealerPair(t)
	ref, _ := sealerPair(t)
	head, err := s.Seal(nil, []byte("head"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ref.Seal(nil, []byte("head"), nil)
	if _, err := o.Open(nil, head, nil); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Reserve(k, 10*k)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := o.Reserve(k, 10*k)
	if err != nil {
		t.Fatal(err)
	}
	var nb [12]byte
	sealed := make([][]byte, k)
	for i := k - 1; i >= 0; i-- { // any order
		pt := bytes.Repeat([]byte{'r'}, 10)
		sealed[i] = recs.Seal(&nb, nil, i, pt, []byte("ad"))
	}
	for i := range k {
		want, _ := ref.Seal(nil, bytes.Repeat([]byte{'r'}, 10), []byte("ad"))
		if !bytes.Equal(sealed[i], want) {
			t.Fatalf("record %d sealed unlike the Seal %d after the head", i, i+1)
		}
		if _, err := opened.Open(&nb, nil, (i+1)%k, sealed[i], []byte("ad")); !errors.Is(err, ErrOpen) {
			t.Fatalf("record %d opened as record %d: %v", i, (i+1)%k, err)
		}
		if got, err := opened.Open(&nb, nil, i, sealed[i], []byte("ad")); err != nil || string(got) != "rrrrrrrrrr" {
			t.Fatalf("record %d: %q, %v", i, got, err)
		}
	}
	if s.count != 1+k || s.bytes != 4+10*k {
		t.Fatalf("after a head and %d records: %d messages, %d bytes counted", k, s.count, s.bytes)
	}
	// The Seal after the run takes the nonce after its last record.
	next, _ := s.Seal(nil, []byte("next"), nil)
	if want, _ := ref.Seal(nil, []byte("next"), nil); !bytes.Equal(next, want) {
		t.Fatal("the Seal after a run of records does not take the next nonce")
	}
	o.Break()
	if _, err := o.Reserve(1, 1); !errors.Is(err, ErrOpen) {
		t.Fatalf("a broken opener reserved records: %v", err)
	}
}
