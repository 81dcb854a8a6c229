package osd

import "sync/atomic"

// testHook is a function a test installs (through export_test.go) to hold
// or steer an OSD at one point of its work; production never sets one, so
// each point costs an atomic load. It is global, not per OSD: a hook that
// must tell the in-process OSDs apart takes the OSD's id.
type testHook[F any] struct{ f atomic.Pointer[F] }

// Set installs f; a nil f removes the hook.
func (h *testHook[F]) Set(f F) { h.f.Store(&f) }

// Load returns the installed function, nil when there is none.
func (h *testHook[F]) Load() F {
	if f := h.f.Load(); f != nil {
		return *f
	}
	var none F
	return none
}
