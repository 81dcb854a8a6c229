package ops

import (
	"fmt"
	"strconv"
	"strings"
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
