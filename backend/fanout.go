package backend

import "sync"

// OnEvery runs fn on every store in parallel, waits for all, and returns
// each store's error by position (nil where fn succeeded). It is the one
// way shardfs asks "every store" anything: a store that fails does not stop
// the others, and the caller decides how many answers it needs.
func OnEvery(stores []Store, fn func(i int, s Store) error) []error {
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i, s)
		}()
	}
	wg.Wait()
	return errs
}

// Split sorts the result of OnEvery into the stores that succeeded and the
// errors of the others.
func Split(errs []error) (ok []int, failed []error) {
	for i, err := range errs {
		if err == nil {
			ok = append(ok, i)
		} else {
			failed = append(failed, err)
		}
	}
	return ok, failed
}
