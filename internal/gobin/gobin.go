// Package gobin locates the Go bin directory, where the test harnesses find
// the servers scripts/deps.sh builds with go install (MinIO, toxiproxy).
package gobin

import (
	"os"
	"path/filepath"
)

// Dir is $GOBIN, else $GOPATH/bin, else ~/go/bin, as go install uses them.
func Dir() string {
	if d := os.Getenv("GOBIN"); d != "" {
		return d
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	return filepath.Join(gopath, "bin")
}
