//go:build race

package repository_test

func init() { raceEnabled = true }
