package osd

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/internal/placement"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// Read repair. A primary whose own copy of an object fails its checksums
// (a flipped bit on the disk, a torn sector) or cannot be read (EIO)
// would fail the get although every replica holds the object intact. As
// Ceph's primary does on a read error, it fetches the object from a
// replica instead, installs it over its own copy, and serves the get from
// the repaired copy: the client sees the object, the operator a log line
// and osprey_osd_read_repairs_total.
//
// The replica's copy is taken only if its metadata (size, CRC32C, ETag,
// mtime, parts) equals our head's: a replica may still be behind (a write
// we applied whose RepOp it has not) or ahead (one it applied first), and
// installing its state would move the object back or forward outside the
// PG log. The install runs on the PG's shard, where no write of the PG
// can come between the comparison and the install, and it checks the
// body against the metadata's CRC32C as any put does, so a replica's own
// damage is never copied. An object whose head itself cannot be decoded
// is not repaired here: there is nothing to compare with.

// repairTimeout bounds one repair: a get waits for it.
const repairTimeout = 10 * time.Second

// errRepairRaced: the object changed between the failed read and the
// install (a write replaced it): the read is simply tried again.
var errRepairRaced = errors.New("object changed during the repair")

// repairable reports whether a read error is one a replica's copy can
// cure: a checksum that failed, or an I/O error of the disk.
func repairable(err error) bool {
	return errors.Is(err, store.ErrCorrupt) || errors.Is(err, syscall.EIO)
}

// readRepair replaces our copy of bucket/key in PG (pool, pg), which a
// get found damaged (readErr), with an intact one from another member, and
// counts the outcome.
func (o *OSD) readRepair(pool, pg uint32, bucket, key string, readErr error) error {
	err := o.repairShared(pool, pg, bucket, key, readErr)
	if err != nil {
		o.readRepairFailures.Add(1)
	} else {
		o.readRepairs.Add(1)
	}
	return err
}

// repairShared runs repairObject once per object at a time: the gets and
// the scrub that find one object damaged together share one repair.
func (o *OSD) repairShared(pool, pg uint32, bucket, key string, readErr error) error {
	_, err, _ := o.repairs.Do(bucket+"\x00"+key, func() (any, error) {
		ctx, cancel := context.WithTimeout(o.ctx, repairTimeout)
		defer cancel()
		return nil, o.repairObject(ctx, pool, pg, bucket, key, readErr)
	})
	return err
}

// repairObject installs another member's copy of bucket/key over ours,
// trying the members of the acting set in order (the primary first).
func (o *OSD) repairObject(ctx context.Context, pool, pg uint32, bucket, key string, readErr error) error {
	sid := storePG(pool, pg)
	id := placement.PGIDOf(sid)
	want, err := o.st.Head(ctx, bucket, key)
	if err != nil {
		return fmt.Errorf("repair of %s/%s: our head: %w", bucket, key, err)
	}
	o.log.Warn("damaged object: repairing it from another member", "pg", id, "bucket", bucket, "key", key, "err", readErr)
	o.pgMu.Lock()
	p := o.pgEntry(sid)
	o.pgMu.Unlock()
	var errs []error
	for _, from := range o.Map().ActingSet(pool, pg) {
		if from == o.id {
			continue
		}
		err := o.repairFrom(ctx, p, from, bucket, key, want)
		if err == nil {
			o.log.Warn("damaged object repaired", "pg", id, "bucket", bucket, "key", key, "from", from)
			return nil
		}
		if errors.Is(err, errRepairRaced) {
			return nil // the read is tried again, of the new state
		}
		errs = append(errs, fmt.Errorf("osd.%d: %w", from, err))
		if errors.Is(err, errLocalInstall) {
			break
		}
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no other member"))
	}
	err = fmt.Errorf("repair of %s/%s in pg %s failed: %w", bucket, key, id, errors.Join(errs...))
	o.log.Error("damaged object: no member could repair it", "pg", id, "bucket", bucket, "key", key, "err", err)
	return err
}

// repairFrom fetches bucket/key from OSD from and installs it, on p's
// shard, if it is the state want describes and ours still is.
func (o *OSD) repairFrom(ctx context.Context, p *pgState, from uint32, bucket, key string, want *osdpb.ObjectMeta) error {
	f, release, err := o.fetch(ctx, p, from, &osdpb.PGBackfill{AfterBucket: bucket, AfterKey: key, Exact: true})
	if err != nil {
		return err
	}
	e := f.Entry
	if e == nil || e.Kind != osdpb.OpKind_OP_PUT || !proto.Equal(e.Meta, want) {
		release()
		return ops.Errorf(osdpb.Status_SERVICE_UNAVAILABLE, "its copy is another version of the object")
	}
	defer release()
	return o.onShardWait(ctx, p.sid, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		cur, err := o.st.Head(ctx, bucket, key)
		if err != nil {
			return err
		}
		if !proto.Equal(cur, want) {
			return errRepairRaced
		}
		err = o.st.InstallObject(ctx, p.sid, e, f.data)
		if hook := repairInstalled.Load(); hook != nil && err == nil {
			err = hook(o.id)
		}
		if err != nil {
			// Our disk's failure, not the source's: said so, the log of
			// a repair that failed blamed the member that had sent a
			// whole copy.
			return fmt.Errorf("its copy came whole, but %w: %w", errLocalInstall, err)
		}
		return nil
	})
}

// repairInstalled runs as OSD osd installed a repair's copy; an error it
// returns stands for the install's (tests: a disk that fails).
var repairInstalled testHook[func(osd uint32) error]

// errLocalInstall marks a repair that failed on this OSD's own store:
// another member's copy would fail alike, so none is asked.
var errLocalInstall = errors.New("this OSD could not install it")
