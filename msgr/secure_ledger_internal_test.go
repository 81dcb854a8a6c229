//go:build invariants

package msgr

import (
	"bytes"
	"slices"
	"testing"

	"github.com/ospreystore/osprey/msgr/auth"
	"github.com/ospreystore/osprey/msgr/wire"
)

// ledgerLink is a queueLink that keeps a receive ledger, as an RDMA link
// does in the invariants build: it hears what sealing hides from it.
type ledgerLink struct {
	*queueLink
	grants []uint32   // SealedGrant's, in order
	opened []wire.Tag // OpenedControl's
}

func (l *ledgerLink) SealedGrant(p wire.Preamble) { l.grants = append(l.grants, p.GrantMsgs) }
func (l *ledgerLink) OpenedControl(t wire.Tag)    { l.opened = append(l.opened, t) }

// TestSealedLinkTellsLedger: a sealed link over a link that keeps a
// receive ledger shows it the grant of each frame it seals, which the
// SEALED frame does not carry, and the tag of each frame without segments
// it opens (a control frame that took no credit under CONTROL_SLOTS),
// which the SEALED frame hides; a frame with segments took a credit as
// the SEALED frame did, and is not told.
func TestSealedLinkTellsLedger(t *testing.T) {
	ll := &ledgerLink{queueLink: &queueLink{}}
	k := &linkKeys{tx: bytes.Repeat([]byte{1}, auth.DirectionKeyLen), rx: bytes.Repeat([]byte{2}, auth.DirectionKeyLen)}
	w, err := newSealedLink(ll, k, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	r, err := newSealedLink(ll, &linkKeys{tx: k.rx, rx: k.tx}, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	w.EndHandshake()
	r.EndHandshake()
	t.Cleanup(func() { w.Close(); r.Close() })
	frames := []wire.Frame{
		{Preamble: wire.Preamble{Tag: wire.TagKeepalive, GrantMsgs: 3}},
		{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 1, GrantMsgs: 5}, Front: []byte("f"), Data: []byte("d")},
		{Preamble: wire.Preamble{Tag: wire.TagAck, GrantMsgs: 7}},
		{Preamble: wire.Preamble{Tag: wire.TagMessage, Seq: 2, GrantMsgs: 9}, Data: make([]byte, sealRecordMinData)},
		{Preamble: wire.Preamble{Tag: wire.TagClose}},
	}
	if err := w.WriteFrames(frames); err != nil {
		t.Fatal(err)
	}
	if want := []uint32{3, 5, 7, 9, 0}; !slices.Equal(ll.grants, want) {
		t.Fatalf("grants told %v, want %v", ll.grants, want)
	}
	for range frames {
		var f wire.Frame
		if err := r.ReadFrame(&f); err != nil {
			t.Fatal(err)
		}
		f.Release()
	}
	if want := []wire.Tag{wire.TagKeepalive, wire.TagAck, wire.TagClose}; !slices.Equal(ll.opened, want) {
		t.Fatalf("opened told %v, want %v", ll.opened, want)
	}
}
