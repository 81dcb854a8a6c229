package placement

import "errors"

// ErrInvalidMap is wrapped by every error that rejects a cluster map, whether
// its JSON does not parse (*DecodeError) or its content is invalid
// (*MapError), so callers can test for either with errors.Is.
var ErrInvalidMap = errors.New("placement: invalid cluster map")

// MapError says which field of a cluster map is invalid and why. Field is
// the field's path in proto names, e.g. "osds[2].public_addr" or
// "pools[0].pg_count"; it is empty when the map as a whole is at fault.
type MapError struct {
	Field  string
	Reason string
}

func (e *MapError) Error() string {
	if e.Field == "" {
		return "placement: invalid cluster map: " + e.Reason
	}
	return "placement: invalid cluster map: " + e.Field + ": " + e.Reason
}

// Unwrap makes errors.Is(err, ErrInvalidMap) hold.
func (e *MapError) Unwrap() error { return ErrInvalidMap }

// DecodeError is a cluster map's JSON that does not parse as a ClusterMap:
// not JSON, unknown or duplicate fields, wrong value types. Err is
// protojson's error, which names the line and column.
type DecodeError struct {
	Err error
}

func (e *DecodeError) Error() string {
	return "placement: cluster map is not a ClusterMap in JSON: " + e.Err.Error()
}

// Unwrap makes errors.Is(err, ErrInvalidMap) hold and exposes the parser's
// error.
func (e *DecodeError) Unwrap() []error { return []error{ErrInvalidMap, e.Err} }
