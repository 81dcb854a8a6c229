package osd

import (
	"errors"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/osd/store"
	"github.com/ospreystore/osprey/proto/osdpb"
)

// checkCondition checks a conditional write's condition (nil: none)
// against the object at bucket/key now. REQUIRES: on the shard of the
// key's PG, at its primary, after the resend lookup: every write to the
// PG before this one is applied and none can come between this read and
// the write's own apply, so two If-None-Match "*" puts to one key cannot
// both pass.
func (o *OSD) checkCondition(bucket, key string, c *osdpb.Condition) error {
	if c == nil {
		return nil
	}
	cur, err := o.st.Head(o.ctx, bucket, key)
	switch {
	case errors.Is(err, store.ErrNoSuchKey):
		cur = nil
	case err != nil:
		// A missing bucket answers NoSuchBucket, as the write would.
		return err
	}
	return ops.ConditionHolds(c, cur)
}

// conditionFor checks that a write of type t carries a condition if and
// only if t is a conditional type (isIf), and that the condition is well
// formed: a plain type with a condition is refused, so that no condition
// is ever silently dropped.
func conditionFor(t osdpb.MsgType, isIf bool, c *osdpb.Condition) error {
	if !isIf {
		if c != nil {
			return ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "%s carries a condition: send it as a conditional type", t)
		}
		return nil
	}
	return ops.CheckCondition(c)
}
