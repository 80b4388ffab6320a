package monitoring

import (
	"testing"

	"github.com/shardfs/shardfs/internal/gostmt"
)

// The rules' tests start no goroutine: scripts/test.sh runs them without
// -race on that ground; a goroutine added here must bring them back.
func TestRulesStartNoGoroutine(t *testing.T) { gostmt.None(t, ".") }
