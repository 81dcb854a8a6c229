package ops

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// OSDName is OSD id's messenger entity name, "osd.ID", the name OSDs give
// themselves and clients and peers dial them by.
func OSDName(id uint32) string { return fmt.Sprintf("osd.%d", id) }

// ParseOSDName is OSDName's inverse; false for any other name.
func ParseOSDName(name string) (uint32, bool) {
	s, ok := strings.CutPrefix(name, "osd.")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 32)
	return uint32(id), err == nil
}

// EachField calls fn with each top-level field of the protobuf encoding b,
// in order: a bytes field's value without its length, any other field's
// raw encoding. It is how a dispatcher reads a request id without
// decoding the whole message. It stops at the first malformed field and
// reports whether it read all of b.
func EachField(b []byte, fn func(protowire.Number, protowire.Type, []byte)) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return false
		}
		v := b[:n]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		fn(num, typ, v)
		b = b[n:]
	}
	return true
}

// VarintField is the value of varint field num of the protobuf encoding b
// (the last one, as protobuf keeps the last of a repeated scalar), read
// without decoding the rest; 0 when absent. ok is false when b is
// malformed (the value read before the fault is still returned).
func VarintField(b []byte, num protowire.Number) (v uint64, ok bool) {
	ok = EachField(b, func(n protowire.Number, typ protowire.Type, raw []byte) {
		if n == num && typ == protowire.VarintType {
			v, _ = protowire.ConsumeVarint(raw)
		}
	})
	return v, ok
}
