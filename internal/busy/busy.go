// Package busy keeps a test's cores busy, as a training node's are, so
// that the bounds a test checks are checked where they must hold.
package busy

import "testing"

// Burn keeps n goroutines spinning until the test ends.
func Burn(t testing.TB, n int) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	for range n {
		go func() {
			for x := 0; ; x++ {
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
}
