package s3gw_test

import (
	"sync"
	"testing"
)

// A CompleteMultipartUpload sent several times at once (a client retrying
// an answer it did not wait for) completes the upload once: the object
// stays readable. Each repeat that found the upload record still there
// used to complete it again and, as the new object replaced the old, delete
// the parts that both are made of.
func TestCompleteMultipartUploadRepeatedAtOnce(t *testing.T) {
	e := newEnv(t)
	for round := range 4 {
		b := e.newBucket(t)
		id, data, parts := e.mpUpload(t, b, "k", 5*mib+1, 5*mib, nil)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				_, err := e.completeErr(b, "k", id, parts)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: a repeated completion: %v", round, err)
			}
		}
		e.wantObject(t, b, "k", data, "", nil)
	}
}
