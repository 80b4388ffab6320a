package repository

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/shardfs/shardfs/backend"
)

// FindAlias writes a probe object through each store and lists them through
// each, and returns the first pair (i < j) that sees each other's probes,
// or -1, -1. A store for which optional says true may fail to answer: it is
// left out of the comparison. The probes are written under a fresh token
// of dataset name's probe prefix, which nothing else reads, and deleted.
func FindAlias(ctx context.Context, stores []backend.Store, optional func(int) bool, name string) (int, int, error) {
	var b [8]byte
	crand.Read(b[:])
	prefix := ProbePrefix(name, hex.EncodeToString(b[:]))
	// Each store deletes the probe it wrote: where two stores are one, the
	// other's probe is that store's own, deleted through it.
	defer backend.OnEvery(stores, func(i int, s backend.Store) error {
		return s.Delete(context.WithoutCancel(ctx), prefix+strconv.Itoa(i))
	})
	required := func(errs []error) []error {
		var out []error
		for i, err := range errs {
			if err != nil && (optional == nil || !optional(i)) {
				out = append(out, err)
			}
		}
		return out
	}
	results := backend.OnEvery(stores, func(i int, s backend.Store) error {
		return s.Put(ctx, prefix+strconv.Itoa(i), []byte(prefix))
	})
	if errs := required(results); len(errs) > 0 {
		return -1, -1, fmt.Errorf("write a probe object to tell the stores apart: %w", errors.Join(errs...))
	}
	seen := make([][]string, len(stores))
	results = backend.OnEvery(stores, func(i int, s backend.Store) (err error) {
		seen[i], err = s.List(ctx, prefix)
		return err
	})
	if errs := required(results); len(errs) > 0 {
		return -1, -1, fmt.Errorf("list the probe objects that tell the stores apart: %w", errors.Join(errs...))
	}
	for i, keys := range seen {
		for _, k := range keys {
			j, err := strconv.Atoi(strings.TrimPrefix(k, prefix))
			if err == nil && j != i && j >= 0 && j < len(stores) {
				return min(i, j), max(i, j), nil
			}
		}
	}
	return -1, -1, nil
}
