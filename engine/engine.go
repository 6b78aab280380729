// Package engine is crmd's one write path. Every create, update and delete,
// whatever its source, goes through Engine.Write, which checks the write
// against the business's schema and stores it in one transaction. Reads and
// the operator's business and key operations go through the Engine too, so
// that nothing above it touches a store.
package engine

import (
	"context"
	"log/slog"
	"maps"
	"reflect"
	"time"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/decl"
)

// Engine applies writes and serves reads for every business.
type Engine struct {
	store objects.Store
	log   *slog.Logger
	keys  *keyUsage
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

// A WriteRequest is one write to one record.
type WriteRequest struct {
	BusinessID string
	Object     string
	Op         Op
	ID         string         // the record, for Update and Delete
	Fields     map[string]any // the values sent, as decoded from JSON with json.Number
}

// now is the time stamped on records: UTC, to the microsecond that both
// stores keep.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// schema returns the objects the business can use.
func (e *Engine) schema(businessID string) *objects.Schema {
	return objects.Standard()
}

// Object returns the schema of one of the business's objects, or an
// *objects.UnknownObjectError.
func (e *Engine) Object(businessID, name string) (*objects.Object, error) {
	s := e.schema(businessID)
	o, ok := s.Object(name)
	if !ok {
		return nil, &objects.UnknownObjectError{Name: name, Suggest: decl.Closest(name, s.Names())}
	}
	return o, nil
}

// Write applies one write and returns the record as stored (nil after a
// delete). It returns an *objects.FieldError for a value that cannot be
// stored, an *objects.NotFoundError for a record the business does not have,
// and an *objects.UnknownObjectError for an object it does not have.
func (e *Engine) Write(ctx context.Context, w WriteRequest) (*objects.Record, error) {
	obj, err := e.Object(w.BusinessID, w.Object)
	if err != nil {
		return nil, err
	}
	if w.Op != Create && !objects.ValidID(w.ID) {
		return nil, &objects.NotFoundError{Object: obj.Name, ID: w.ID}
	}
	switch w.Op {
	case Create:
		return e.create(ctx, w.BusinessID, obj, w.Fields)
	case Update:
		return e.update(ctx, w.BusinessID, obj, w.ID, w.Fields)
	case Delete:
		return nil, e.store.Write(ctx, w.BusinessID, func(tx objects.Tx) error {
			return tx.Delete(ctx, obj.Name, w.ID)
		})
	}
	panic("engine: unknown write op " + string(w.Op))
}

func (e *Engine) create(ctx context.Context, businessID string, obj *objects.Object, in map[string]any) (*objects.Record, error) {
	fields, err := obj.CheckInput(in, false)
	if err != nil {
		return nil, err
	}
	obj.DeriveName(fields)
	var rec *objects.Record
	err = e.store.Write(ctx, businessID, func(tx objects.Tx) error {
		if err := checkReferences(ctx, tx, obj, fields, nil); err != nil {
			return err
		}
		// The id and time are taken inside the transaction, so that ids
		// follow the order in which records are stored.
		t := now()
		rec = &objects.Record{Object: obj.Name, ID: objects.NewID(), CreatedAt: t, UpdatedAt: t, Fields: fields}
		return tx.Insert(ctx, rec)
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

func (e *Engine) update(ctx context.Context, businessID string, obj *objects.Object, id string, in map[string]any) (*objects.Record, error) {
	patch, err := obj.CheckInput(in, true)
	if err != nil {
		return nil, err
	}
	var rec *objects.Record
	err = e.store.Write(ctx, businessID, func(tx objects.Tx) error {
		old, err := tx.Get(ctx, obj.Name, id)
		if err != nil {
			return err
		}
		if err := obj.Decode(old); err != nil {
			return err
		}
		fields := maps.Clone(old.Fields)
		for k, v := range patch {
			if v == nil {
				delete(fields, k)
			} else {
				fields[k] = v
			}
		}
		if reflect.DeepEqual(fields, old.Fields) {
			// Nothing changes: nothing is written, and updated_at stays.
			rec = old
			return nil
		}
		if err := checkReferences(ctx, tx, obj, fields, old.Fields); err != nil {
			return err
		}
		rec = &objects.Record{Object: obj.Name, ID: id, CreatedAt: old.CreatedAt, UpdatedAt: now(), Fields: fields}
		return tx.Update(ctx, rec)
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// checkReferences checks that every reference in fields that is new or
// changed from old names a record of the business.
func checkReferences(ctx context.Context, tx objects.Tx, obj *objects.Object, fields, old map[string]any) error {
	for _, f := range obj.Fields {
		if f.Target == "" {
			continue
		}
		id, ok := fields[f.Name].(string)
		if !ok || (old != nil && old[f.Name] == id) {
			continue
		}
		found, err := tx.Exists(ctx, f.Target, id)
		if err != nil {
			return err
		}
		if !found {
			return &objects.FieldError{Field: f.Name, Code: objects.CodeInvalidReference,
				Message: f.Name + " refers to no " + f.Target + " record with id " + id}
		}
	}
	return nil
}

// Get returns one record and its object.
func (e *Engine) Get(ctx context.Context, businessID, object, id string) (*objects.Object, *objects.Record, error) {
	obj, err := e.Object(businessID, object)
	if err != nil {
		return nil, nil, err
	}
	if !objects.ValidID(id) {
		return nil, nil, &objects.NotFoundError{Object: obj.Name, ID: id}
	}
	rec, err := e.store.Get(ctx, businessID, obj.Name, id)
	if err != nil {
		return nil, nil, err
	}
	return obj, rec, nil
}

// List returns a page of records of an object, oldest first. limit must be
// between 1 and objects.MaxPageSize, offset not negative.
func (e *Engine) List(ctx context.Context, businessID, object string, limit, offset int) (*objects.Object, []*objects.Record, error) {
	obj, err := e.Object(businessID, object)
	if err != nil {
		return nil, nil, err
	}
	recs, err := e.store.List(ctx, businessID, obj.Name, limit, offset)
	if err != nil {
		return nil, nil, err
	}
	return obj, recs, nil
}

// Ping reports whether the store is reachable.
func (e *Engine) Ping(ctx context.Context) error { return e.store.Ping(ctx) }
