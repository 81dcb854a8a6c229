package dashboard

// Point is one sample of throughput: the cluster's (the sum over up OSDs)
// or one OSD's.
type Point struct {
	// At is when the sample was taken, in Unix milliseconds (what JS's
	// Date takes).
	At          int64   `json:"t"`
	Ops         float64 `json:"ops"`
	ReadBytes   float64 `json:"read_bps"`
	WriteBytes  float64 `json:"write_bps"`
	RecoveryBps float64 `json:"recovery_bps"`
}

// ring keeps the last len(pts) points, oldest overwritten first.
type ring struct {
	pts  []Point
	next int  // where the next point goes
	full bool // every slot holds a point
}

func newRing(n int) *ring { return &ring{pts: make([]Point, max(n, 1))} }

func (r *ring) add(p Point) {
	r.pts[r.next] = p
	r.next++
	if r.next == len(r.pts) {
		r.next, r.full = 0, true
	}
}

// since returns the points taken after t (Unix ms), oldest first, in a
// new slice.
func (r *ring) since(t int64) []Point {
	var ordered []Point
	if r.full {
		ordered = append(ordered, r.pts[r.next:]...)
	}
	ordered = append(ordered, r.pts[:r.next]...)
	out := []Point{}
	for _, p := range ordered {
		if p.At > t {
			out = append(out, p)
		}
	}
	return out
}
