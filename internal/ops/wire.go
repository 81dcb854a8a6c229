package ops

import (
	"strconv"
	"strings"
)

// OSDName is OSD id's messenger entity name, "osd.ID", the name OSDs give
// themselves and clients and peers dial them by. It uses no fmt: a primary
// names each replica it sends a RepOp to.
func OSDName(id uint32) string { return "osd." + strconv.FormatUint(uint64(id), 10) }

// OSDList names ids as "osd.3, osd.5".
func OSDList[T ~uint32](ids []T) string {
	var b []byte
	for i, id := range ids {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, "osd."...)
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return string(b)
}

// ParseOSDName is OSDName's inverse; false for any other name.
func ParseOSDName(name string) (uint32, bool) {
	s, ok := strings.CutPrefix(name, "osd.")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 32)
	return uint32(id), err == nil
}
