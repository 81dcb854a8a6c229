package ops

import "sync"

// Parallel runs f(i) for i in [0, n), at most limit at once, and returns
// when every call has.
func Parallel(n, limit int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, limit)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}
