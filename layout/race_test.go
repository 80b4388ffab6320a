//go:build race

package layout

// layout has no goroutines; -race adds nothing but time, so the property
// tests run their short set there. scripts/test.sh runs layout only without -race
// (TestLayoutStartsNoGoroutine holds it to that).
func init() { raceEnabled = true }
