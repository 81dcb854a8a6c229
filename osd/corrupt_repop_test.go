package osd_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ospreystore/osprey/client"
	"github.com/ospreystore/osprey/internal/osdtest"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/msgr/tcp"
	"github.com/ospreystore/osprey/msgr/wire"
	"github.com/ospreystore/osprey/osd"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// tcpOnly is the transports of the tests' own messengers, which reach
// osdtest clusters (on tcp).
var tcpOnly = []wire.Transport{tcp.Transport{}}

// corruptingTCP is the tcp transport whose links flip one bit of the
// first RepOp body written through any of them (a copy: the primary's
// own bytes stay intact), as a bad NIC or cable might.
type corruptingTCP struct {
	tcp.Transport
	done *atomic.Bool
}

func (t corruptingTCP) Dial(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Link, error) {
	l, err := t.Transport.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	return corruptingLink{l, t.done}, nil
}

func (t corruptingTCP) Listen(ctx context.Context, addr string, opts wire.LinkOptions) (wire.Listener, error) {
	ln, err := t.Transport.Listen(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	return corruptingListener{ln, t.done}, nil
}

type corruptingListener struct {
	wire.Listener
	done *atomic.Bool
}

func (ln corruptingListener) Accept(ctx context.Context) (wire.Link, error) {
	l, err := ln.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return corruptingLink{l, ln.done}, nil
}

type corruptingLink struct {
	wire.Link
	done *atomic.Bool
}

func (l corruptingLink) WriteFrames(frames []wire.Frame) error {
	for i := range frames {
		f := &frames[i]
		if f.Tag == wire.TagMessage && f.Type == uint16(osdpb.MsgType_MSG_REP_OP) && len(f.Data) > 0 && l.done.CompareAndSwap(false, true) {
			bad := append([]byte(nil), f.Data...)
			bad[len(bad)/2] ^= 0x10
			f.Data = bad
		}
	}
	return l.Link.WriteFrames(frames)
}

func (l corruptingLink) EndHandshake() {
	if h, ok := l.Link.(wire.HandshakeEnder); ok {
		h.EndHandshake()
	}
}

// TestCorruptRepOpNeverLands: OSDs send each other data without a
// messenger CRC, since the store checks every body it is given against
// the object's CRC32C. A RepOp body corrupted on the way must then fail
// that check at the replica, which recovers the object from its primary:
// the put is acknowledged (the client retries if need be) and every copy
// holds the right bytes.
func TestCorruptRepOpNeverLands(t *testing.T) {
	var done atomic.Bool
	c := osdtest.Start(t, osdtest.Options{OSDs: 3, PGs: 4, Tweak: func(cfg *osd.Config) {
		cfg.Transports = []wire.Transport{corruptingTCP{done: &done}}
	}})
	ctx := ctxT(t, time.Minute)
	cl := c.Client(t, func(o *client.Options) { o.RetryFor = 30 * time.Second })
	if err := cl.MakeBucket(ctx, "bkt"); err != nil {
		t.Fatal(err)
	}
	pool, _ := c.Map.PoolByName(placement.DefaultPoolName)
	set := c.Map.ActingSet(pool.Id, placement.PGOf(pool, "bkt", "obj"))
	// First the PG's first write (the replica recovers by a backfill, which
	// acks the RepOp before its walk copies the object, as Ceph's does past
	// last_backfill, so the copy may land just after the ack); then a write
	// to a PG the replica holds (a log catch-up, before the ack).
	for i, size := range []int{300 << 10, 2 << 20} {
		done.Store(false)
		body := osdtest.Payload(size, uint64(i))
		if _, err := osdtest.Put(ctx, cl, "bkt", "obj", body, client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if !done.Load() {
			t.Fatal("no RepOp body was corrupted")
		}
		osdtest.Eventually(t, 30*time.Second, "every copy right", func() bool {
			for _, id := range set {
				// ReadRange checks the CRC32Cs: a corrupt copy fails it.
				_, got, err := c.OSDs[id].Store().ReadRange(ctx, "bkt", "obj", 0, -1, nil)
				if err != nil || !bytes.Equal(got, body) {
					return false
				}
			}
			return true
		})
	}
}
