package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/verify"
)

// Sums is every object under prefix on the stores, as "I:KEY" (store I),
// with the CRC32 of its bytes: what a test compares before and after a
// step that must leave objects as they were, or write nothing.
func Sums(t testing.TB, stores []backend.Store, prefix string) map[string]uint32 {
	t.Helper()
	ctx := context.Background()
	out := map[string]uint32{}
	for i, s := range stores {
		keys, err := s.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			size, err := s.Stat(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, size)
			if err := s.ReadAt(ctx, k, b, 0); err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("%d:%s", i, k)] = verify.Sum(b)
		}
	}
	return out
}
