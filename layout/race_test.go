//go:build race

package layout

// layout has no goroutines; -race adds nothing but time, so the property
// tests run their short set there. The test script runs the full set without -race.
func init() { raceEnabled = true }
