package layout

import (
	"testing"

	"github.com/shardfs/shardfs/internal/gostmt"
)

// layout is pure: it starts no goroutine, in its code or its tests.
// scripts/test.sh leaves it out of the -race pass on that ground (there is
// nothing to race); a goroutine added here must bring it back.
func TestLayoutStartsNoGoroutine(t *testing.T) { gostmt.None(t, ".") }
