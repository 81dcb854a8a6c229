package store

// bounceBuffersMade runs fn with the pool of aligned bounce buffers
// (directBufs) emptied first, and returns how many fn made it create:
// each writeDirect call that copies a piece of its body takes one, which
// an empty pool must make, while a body written from its own memory takes
// none. REQUIRES: nothing else writes data files meanwhile (no test of
// this package runs in parallel).
func bounceBuffersMade(fn func()) int {
	n := 0
	mk := directBufs.New
	defer func() { directBufs.New = mk }()
	directBufs.New = nil
	for directBufs.Get() != nil { // drain what earlier writes put back
	}
	directBufs.New = func() any { n++; return mk() }
	fn()
	return n
}

// DropReadCacheForTest empties the cache of verified extents.
func (s *Store) DropReadCacheForTest() {
	s.files.cache.clear()
}

// UnalignedReadsForTest is how many data file reads went through the page
// cache although the filesystem takes O_DIRECT.
func (s *Store) UnalignedReadsForTest() int64 { return s.files.bounced.Load() }
