package k8s

import (
	"testing"

	"github.com/shardfs/shardfs/internal/gostmt"
)

// The manifests' test starts no goroutine: scripts/test.sh runs it without
// -race on that ground (under -race it compiled k8s.io/api for the race
// detector, for nothing to race); a goroutine added here must bring it back.
func TestManifestsStartNoGoroutine(t *testing.T) { gostmt.None(t, ".") }
