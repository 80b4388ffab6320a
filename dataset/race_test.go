//go:build race

package dataset_test

func init() { raceEnabled = true }
