// Package engine is crmd's one write path. Every create, update and delete,
// whatever its source (a client, an automation, a flow), goes through
// View.Write, which applies the business's compiled rules in a fixed order
// and stores the result in one transaction. The engine holds each business's
// rules as an immutable snapshot and swaps it when a pack is activated.
// Reads and the operator's business, key and pack operations go through the
// engine too, so that nothing above it touches a store.
package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/crmd/crmd/objects"
)

// Engine applies writes and serves reads for every business.
type Engine struct {
	store objects.Store
	log   *slog.Logger
	keys  *keyUsage
	snaps snapshots
}

// Options configure an Engine.
type Options struct {
	Logger *slog.Logger
}

// New returns an Engine over store.
func New(store objects.Store, opts Options) *Engine {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Engine{store: store, log: log, keys: newKeyUsage()}
}

// Op is the kind of a write.
type Op string

const (
	Create Op = "create"
	Update Op = "update"
	Delete Op = "delete"
)

// now is the time stamped on records: UTC, to the microsecond that both
// stores keep.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// Ping reports whether the store is reachable.
func (e *Engine) Ping(ctx context.Context) error { return e.store.Ping(ctx) }
