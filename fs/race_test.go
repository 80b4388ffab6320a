//go:build race

package fs_test

func init() { raceEnabled = true }
