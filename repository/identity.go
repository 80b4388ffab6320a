package repository

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/shardfs/shardfs/backend"
	"github.com/shardfs/shardfs/manifest"
)

// Identity is what a store records about its place in a dataset, written at
// ingest next to the manifest copy. Like MinIO's format.json on every drive,
// it lets a store out of place, or from another dataset, be recognised.
type Identity struct {
	Format   int    `json:"format"`
	Dataset  string `json:"dataset"`
	IngestID string `json:"ingest_id"`
	Position int    `json:"position"` // index in the ingest's --stores
	Stores   int    `json:"stores"`   // k+m
}

const identityFormat = 1

// maxIdentitySize bounds what readIdentityKey accepts.
const maxIdentitySize = 4 << 10

func readIdentityKey(ctx context.Context, s backend.Store, name, key string) (*Identity, error) {
	b, size, err := readSmallObject(ctx, s, key, maxIdentitySize)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, fmt.Errorf("store %s: %s: %d bytes, not an identity: %w", s, key, size, manifest.ErrCorrupt)
	}
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil || id.Format != identityFormat || id.Dataset != name {
		return nil, fmt.Errorf("store %s: %s is not an identity of dataset %s: %w", s, key, name, manifest.ErrCorrupt)
	}
	return &id, nil
}

// WriteIdentity records that store position of ingest m.
func WriteIdentity(ctx context.Context, s backend.Store, m *manifest.Manifest, position int) error {
	return writeIdentityKey(ctx, s, m, position, IdentityKey(m.Name))
}

// WritePendingIdentity writes the identity under PendingIdentityKey.
func WritePendingIdentity(ctx context.Context, s backend.Store, m *manifest.Manifest, position int) error {
	return writeIdentityKey(ctx, s, m, position, PendingIdentityKey(m.Name))
}

func writeIdentityKey(ctx context.Context, s backend.Store, m *manifest.Manifest, position int, key string) error {
	b, _ := json.Marshal(Identity{Format: identityFormat, Dataset: m.Name, IngestID: m.IngestID, Position: position, Stores: m.Data + m.Parity})
	return s.Put(ctx, key, b)
}

// PlaceState is what a store's identity proves about it.
type PlaceState int

const (
	// InPlace: the store's identity names this ingest and this position.
	InPlace PlaceState = iota
	// Unknown: no readable identity (a new empty store, an identity lost, or
	// a store that did not answer). Reads may use it; fragments are verified.
	Unknown
	// Foreign: the store belongs to another ingest or dataset of this name.
	// It is read around, and never written without --force.
	Foreign
)

func (s PlaceState) String() string {
	return [...]string{"in place", "unknown", "foreign"}[s]
}

// Place is one store's standing in the opened dataset.
type Place struct {
	State  PlaceState
	Detail string // for Unknown and Foreign: why
}

// OrderError: the stores are the dataset's, but not in the ingest's order.
type OrderError struct {
	Name string
	// Want lists, per position, the given store that belongs there ("" if none).
	Want []string
	// Misplaced lists "store i holds position j".
	Misplaced []string
}

func (e *OrderError) Error() string {
	order := make([]string, len(e.Want))
	for i, w := range e.Want {
		order[i] = w
		if w == "" {
			order[i] = fmt.Sprintf("<store for position %d>", i)
		}
	}
	return fmt.Sprintf("the stores of dataset %s are not in the order of its ingest (%s): nothing was read or written; pass them in this order: --stores %s",
		e.Name, strings.Join(e.Misplaced, ", "), strings.Join(order, ","))
}

// ErrWrongOrder: see OrderError.
var ErrWrongOrder = errors.New("stores out of order")

func (e *OrderError) Unwrap() error { return ErrWrongOrder }

// checkPlaces compares every store's identity with its position.
func checkPlaces(copies []storeCopy, stores []backend.Store, m *manifest.Manifest) ([]Place, error) {
	places := make([]Place, len(stores))
	oe := &OrderError{Name: m.Name, Want: make([]string, len(stores))}
	// related: an earlier version of this dataset, whose copies on a store
	// are stale, not foreign: repair rewrites them without --force.
	related := func(ingest string) bool { return supersedes(m, ingest) }
	for i, c := range copies {
		id := c.id
		switch {
		case id == nil && c.m != nil && c.m.IngestID != m.IngestID && related(c.m.IngestID):
			places[i] = Place{InPlace, "a stale manifest of ingest " + c.m.IngestID}
		case id == nil && c.m != nil && c.m.IngestID != m.IngestID:
			places[i] = Place{Foreign, "a manifest of ingest " + c.m.IngestID}
		case id == nil:
			detail := "no identity"
			if c.idErr != nil && !errors.Is(c.idErr, backend.ErrNotExist) {
				detail = c.idErr.Error()
			}
			places[i] = Place{Unknown, detail}
		case id.IngestID != m.IngestID && (!related(id.IngestID) || id.Position != i):
			places[i] = Place{Foreign, fmt.Sprintf("ingest %s, position %d", id.IngestID, id.Position)}
		case id.IngestID != m.IngestID:
			places[i] = Place{InPlace, "the stale identity of ingest " + id.IngestID}
		case id.Position != i:
			if id.Position >= 0 && id.Position < len(stores) {
				oe.Want[id.Position] = stores[i].String()
			}
			oe.Misplaced = append(oe.Misplaced, fmt.Sprintf("store %d holds position %d", i, id.Position))
		default:
			oe.Want[i] = stores[i].String()
		}
	}
	if len(oe.Misplaced) > 0 {
		return nil, oe
	}
	return places, nil
}
