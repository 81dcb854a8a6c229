package mon

import (
	"fmt"
	"slices"

	"github.com/ospreystore/osprey/internal/ops"
	"github.com/ospreystore/osprey/mon/monclient"
	"github.com/ospreystore/osprey/proto/osdpb"
	"google.golang.org/protobuf/proto"
)

// maxCommandIDs bounds the ids of one command: a command names OSDs, and
// a request with millions of them is not one.
const maxCommandIDs = 1 << 16

// decodeRequest parses the front of a mon request of type t and checks
// what can be checked without the map. The error is an *ops.Error
// (INVALID_ARGUMENT) whose message says what is wrong; the request comes
// back even then. It never panics, on any input.
func decodeRequest(t osdpb.MsgType, front []byte) (proto.Message, error) {
	var req proto.Message
	switch t {
	case osdpb.MsgType_MSG_MON_BOOT:
		req = &osdpb.MonBoot{}
	case osdpb.MsgType_MSG_MON_BEACON:
		req = &osdpb.MonBeacon{}
	case osdpb.MsgType_MSG_MON_FAILURE:
		req = &osdpb.MonFailure{}
	case osdpb.MsgType_MSG_MON_MARK_ME_DOWN:
		req = &osdpb.MonMarkMeDown{}
	case osdpb.MsgType_MSG_MON_SUBSCRIBE:
		req = &osdpb.MonSubscribe{}
	case osdpb.MsgType_MSG_MON_COMMAND:
		req = &osdpb.MonCommand{}
	default:
		return nil, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "message type %v is not a mon request", t)
	}
	if err := proto.Unmarshal(front, req); err != nil {
		return req, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "malformed %v: %v", t, err)
	}
	switch r := req.(type) {
	case *osdpb.MonBoot:
		return r, validateBoot(r)
	case *osdpb.MonFailure:
		if r.FailedForNanos < 0 {
			return r, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "failure report: failed_for %dns is negative", r.FailedForNanos)
		}
	case *osdpb.MonMarkMeDown:
		// An OSD that is up holds a map; without an epoch the request
		// could not be told from an earlier incarnation's.
		if r.Epoch == 0 {
			return r, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "mark-me-down of osd.%d names no map epoch", r.Id)
		}
	case *osdpb.MonCommand:
		if err := checkRequestID(r.RequestId); err != nil {
			return r, err
		}
		if len(r.Ids) > maxCommandIDs {
			return r, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "command names %d OSDs; at most %d", len(r.Ids), maxCommandIDs)
		}
		if r.Prefix == "osd create" || slices.Contains(authCommands, r.Prefix) {
			break // create checks the uuid, authCommand its entity and caps
		}
		if r.Prefix == "mon rm" {
			if msg := checkLabel(r.Var, 64); msg != "" {
				return r, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "mon rm: name %s", msg)
			}
			break
		}
		if !slices.Contains(mutatingCommands, r.Prefix) && !slices.Contains(monclient.ReadCommands, r.Prefix) {
			known := slices.Concat(monclient.ReadCommands, mutatingCommands, []string{"osd create", "mon rm"}, authCommands)
			return r, ops.Errorf(osdpb.Status_INVALID_ARGUMENT, "unknown command %q; known: %v", r.Prefix, known)
		}
		if slices.Contains(mutatingCommands, r.Prefix) {
			return r, commandOf(r).validate()
		}
	}
	return req, nil
}

// replyTo builds the reply of a request of type t carrying only a header:
// the answer to a request that failed (its tid is in the envelope). Every
// mon reply has the header as field 1, so a request type the mon does not
// know gets that shape too.
func replyTo(t osdpb.MsgType, h *osdpb.ReplyHeader) proto.Message {
	switch t {
	case osdpb.MsgType_MSG_MON_BOOT:
		return &osdpb.MonBootReply{Header: h}
	case osdpb.MsgType_MSG_MON_FAILURE:
		return &osdpb.MonFailureReply{Header: h}
	case osdpb.MsgType_MSG_MON_MARK_ME_DOWN:
		return &osdpb.MonMarkMeDownReply{Header: h}
	case osdpb.MsgType_MSG_MON_SUBSCRIBE:
		return &osdpb.MonSubscribeReply{Header: h}
	case osdpb.MsgType_MSG_MON_COMMAND:
		return &osdpb.MonCommandReply{Header: h}
	case osdpb.MsgType_MSG_GET_MAP:
		return &osdpb.GetMapReply{Header: h}
	}
	return &osdpb.MonBeaconReply{Header: h}
}

// isMonRequest reports whether t is a request the mon serves.
func isMonRequest(t osdpb.MsgType) bool {
	switch t {
	case osdpb.MsgType_MSG_MON_BOOT, osdpb.MsgType_MSG_MON_BEACON, osdpb.MsgType_MSG_MON_FAILURE,
		osdpb.MsgType_MSG_MON_MARK_ME_DOWN, osdpb.MsgType_MSG_MON_SUBSCRIBE, osdpb.MsgType_MSG_MON_COMMAND:
		return true
	}
	return false
}

func describe(req proto.Message) string {
	switch r := req.(type) {
	case *osdpb.MonBoot:
		if r.HasId {
			return fmt.Sprintf("boot of osd.%d", r.Id)
		}
		return "boot of a new OSD"
	case *osdpb.MonCommand:
		return fmt.Sprintf("command %q", r.Prefix)
	}
	return fmt.Sprintf("%T", req)
}
