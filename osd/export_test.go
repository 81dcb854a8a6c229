package osd

// SetBackfillFetched installs a hook that runs after a backfill's walk
// fetched an object and before it installs it; nil removes it. Tests only.
func SetBackfillFetched(f func(bucket, key string)) {
	if f == nil {
		backfillFetched.Store(nil)
		return
	}
	backfillFetched.Store(&f)
}
