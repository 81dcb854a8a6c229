package osd

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ospreystore/osprey/osd/pg"
)

// TestMarkdownCountsMarkdowns: the markdown bound counts each markdown
// once, however many boots it takes to come back (a boot the mon could
// not take is tried again at each beacon), holds at the markdown past the
// count, and lets the OSD boot once the period since the first has passed.
func TestMarkdownCountsMarkdowns(t *testing.T) {
	o := &OSD{cfg: Config{MaxMarkdownCount: 2, MaxMarkdownPeriod: time.Minute}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	t0 := time.Unix(1_000_000, 0)
	boot := func(epoch uint64, at time.Duration, want bool) {
		t.Helper()
		o.bootEpoch.Store(epoch)
		if got := o.mayBootAgain(t0.Add(at)); got != want {
			t.Fatalf("markdown after the boot of epoch %d, at %v: may boot %v, want %v (markdowns %v, held until %v)",
				epoch, at, got, want, o.markdowns, o.HeldDownUntil())
		}
	}
	boot(5, 0, true)
	for i := range 20 { // its boots fail and are tried again: one markdown
		boot(5, time.Duration(i)*time.Second, true)
	}
	boot(7, 30*time.Second, true)  // a second markdown
	boot(9, 40*time.Second, false) // a third: held until t0+1m
	boot(9, 59*time.Second, false)
	boot(9, 61*time.Second, true) // the period since the first passed
	boot(9, 62*time.Second, true) // that boot tried again
	if len(o.markdowns) != 3 {
		t.Fatalf("markdowns %v, want 3", o.markdowns)
	}
	boot(11, 85*time.Second, false) // within a minute of the second and third: held again

	// Markdowns we asked for, our disk stuck, do not count.
	o = &OSD{cfg: Config{MaxMarkdownCount: 1, MaxMarkdownPeriod: time.Minute}, log: o.log}
	o.stallMarked.Store(true)
	for i := range 5 {
		boot(uint64(20+2*i), time.Duration(i)*time.Second, true)
	}
	if len(o.markdowns) != 0 {
		t.Fatalf("markdowns %v after stalls alone, want none", o.markdowns)
	}
	o.stallMarked.Store(false)
	boot(31, 10*time.Second, true)  // a first markdown of another kind
	boot(33, 11*time.Second, false) // a second, past the bound of 1
}

// TestNotePeerKeepsTheFurthest: replies read out of order (a replica's
// batched syncs ack in any order) never move a replica's known position
// back; a reset (peering) sets it outright, or forgets it.
func TestNotePeerKeepsTheFurthest(t *testing.T) {
	var p pgState
	at := func(want uint64) {
		t.Helper()
		v, ok := p.peerAt(1)
		if want == 0 && ok || want != 0 && (!ok || v.GetSeq() != want) {
			t.Fatalf("replica at %v (known %v), want seq %d", v, ok, want)
		}
	}
	p.notePeer(1, protoVersion(pg.Version{Epoch: 5, Seq: 12}))
	p.notePeer(1, protoVersion(pg.Version{Epoch: 5, Seq: 11}))
	at(12)
	p.notePeer(1, protoVersion(pg.Version{Epoch: 7, Seq: 11})) // a later interval's entry
	at(11)
	p.resetPeer(1, pg.Version{Epoch: 7, Seq: 3})
	at(3)
	p.resetPeer(1, pg.Version{})
	at(0)
}
