package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/decl"
	"github.com/crmd/crmd/rules"
)

// A Snapshot is one whole revision of a business's rules: the compiled union
// of its active packs. A request takes one snapshot when it starts and keeps
// it to the end, so that it never sees half of a pack; a new activation
// builds a new snapshot beside the old one and swaps it in.
type Snapshot struct {
	BusinessID string
	Generation int64
	Rules      *rules.Ruleset
	Packs      []PackRef
}

// PackRef names an active pack revision.
type PackRef struct {
	Pack     string
	Revision int
	Hash     string
}

// PackPollInterval is how often a serving engine looks for new pack
// activations, by this or any other process on the database.
const PackPollInterval = 500 * time.Millisecond

type snapshotEntry struct {
	cur     atomic.Pointer[Snapshot]
	load    sync.Mutex // one load at a time
	failGen int64      // a generation that failed to compile, not retried
}

type snapshots struct {
	mu sync.Mutex
	m  map[string]*snapshotEntry
}

func (s *snapshots) entry(businessID string) *snapshotEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*snapshotEntry{}
	}
	e, ok := s.m[businessID]
	if !ok {
		e = &snapshotEntry{}
		s.m[businessID] = e
	}
	return e
}

func (s *snapshots) loaded() map[string]*snapshotEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*snapshotEntry, len(s.m))
	for id, e := range s.m {
		if e.cur.Load() != nil {
			out[id] = e
		}
	}
	return out
}

// noPacks is the ruleset of a business without packs.
var noPacks = sync.OnceValue(func() *rules.Ruleset {
	rs, errs := rules.Compile(nil, compileOptions())
	if errs != nil {
		panic("engine: the empty ruleset does not compile: " + errs.Error())
	}
	return rs
})

// PacksError means a business's active packs cannot be compiled (by this
// crmd: after an upgrade, say). Its requests are refused until the packs
// are fixed, rather than served without the business's rules.
type PacksError struct {
	BusinessID string
	Errs       decl.Errors
}

func (e *PacksError) Error() string {
	return fmt.Sprintf("the active rule packs of business %s do not compile:\n%s", e.BusinessID, e.Errs.Error())
}

// snapshot returns the business's current snapshot, loading it on first use.
func (e *Engine) snapshot(ctx context.Context, businessID string) (*Snapshot, error) {
	ent := e.snaps.entry(businessID)
	if s := ent.cur.Load(); s != nil {
		return s, nil
	}
	ent.load.Lock()
	defer ent.load.Unlock()
	if s := ent.cur.Load(); s != nil {
		return s, nil
	}
	s, err := e.loadSnapshot(ctx, businessID)
	if err != nil {
		return nil, err
	}
	ent.cur.Store(s)
	return s, nil
}

// loadSnapshot reads and compiles a business's active packs.
func (e *Engine) loadSnapshot(ctx context.Context, businessID string) (*Snapshot, error) {
	revs, gen, err := e.store.ActivePacks(ctx, businessID)
	if err != nil {
		return nil, fmt.Errorf("loading rule packs: %w", err)
	}
	s := &Snapshot{BusinessID: businessID, Generation: gen, Rules: noPacks()}
	if len(revs) == 0 {
		return s, nil
	}
	packs, errs := parseRevisions(revs)
	if errs == nil {
		s.Rules, errs = rules.Compile(packs, compileOptions())
	}
	if errs != nil {
		return nil, &PacksError{BusinessID: businessID, Errs: errs}
	}
	for _, r := range revs {
		s.Packs = append(s.Packs, PackRef{Pack: r.Pack, Revision: r.Revision, Hash: r.Hash})
	}
	return s, nil
}

func parseRevisions(revs []*objects.PackRevision) ([]*rules.Pack, decl.Errors) {
	var (
		packs []*rules.Pack
		all   decl.Errors
	)
	for _, r := range revs {
		files := make([]rules.File, len(r.Files))
		for i, f := range r.Files {
			files[i] = rules.File{Name: f.Name, Data: []byte(f.Content)}
		}
		p, errs := rules.Parse(r.Pack, files)
		all = append(all, errs...)
		packs = append(packs, p)
	}
	if all != nil {
		return nil, all
	}
	return packs, nil
}

// refresh swaps in a new snapshot for every loaded business whose pack
// generation has moved on. A generation that does not compile is logged
// once and the snapshot before it keeps serving.
func (e *Engine) refresh(ctx context.Context) error {
	loaded := e.snaps.loaded()
	if len(loaded) == 0 {
		return nil
	}
	ids := make([]string, 0, len(loaded))
	for id := range loaded {
		ids = append(ids, id)
	}
	gens, err := e.store.PackGenerations(ctx, ids)
	if err != nil {
		return fmt.Errorf("polling rule pack generations: %w", err)
	}
	for id, ent := range loaded {
		gen := gens[id]
		if cur := ent.cur.Load(); gen == cur.Generation || gen == ent.failGen {
			continue
		}
		e.reload(ctx, id, ent)
	}
	return nil
}

// reload loads and swaps in a business's snapshot now.
func (e *Engine) reload(ctx context.Context, businessID string, ent *snapshotEntry) {
	ent.load.Lock()
	defer ent.load.Unlock()
	s, err := e.loadSnapshot(ctx, businessID)
	if err != nil {
		if pe, ok := err.(*PacksError); ok {
			_, gen, _ := e.store.ActivePacks(ctx, businessID)
			ent.failGen = gen
			e.log.LogAttrs(ctx, slog.LevelError, "rule packs do not compile; the revision before them keeps serving",
				slog.String("business", businessID), slog.Int64("generation", gen), slog.String("errors", pe.Errs.Error()))
			return
		}
		e.log.LogAttrs(ctx, slog.LevelWarn, "reloading rule packs", slog.String("business", businessID), slog.String("err", err.Error()))
		return
	}
	old := ent.cur.Swap(s)
	if old == nil || old.Generation != s.Generation {
		e.log.LogAttrs(ctx, slog.LevelInfo, "rule packs active", slog.String("business", businessID),
			slog.Int64("generation", s.Generation), slog.String("packs", packList(s.Packs)), slog.Int("rules", s.Rules.Rules()))
	}
}

func packList(refs []PackRef) string {
	out := ""
	for i, r := range refs {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s@%d", r.Pack, r.Revision)
	}
	if out == "" {
		return "none"
	}
	return out
}

// A View is one request's view of a business: its snapshot of rules, taken
// once, and the operations of the request.
type View struct {
	e    *Engine
	biz  string
	snap *Snapshot
}

// View returns a view of a business for one request.
func (e *Engine) View(ctx context.Context, businessID string) (*View, error) {
	s, err := e.snapshot(ctx, businessID)
	if err != nil {
		return nil, err
	}
	return &View{e: e, biz: businessID, snap: s}, nil
}

// Snapshot returns the rules the view sees.
func (v *View) Snapshot() *Snapshot { return v.snap }

// Object returns one of the business's objects, or an
// *objects.UnknownObjectError.
func (v *View) Object(name string) (*objects.Object, error) {
	s := v.snap.Rules.Schema
	o, ok := s.Object(name)
	if !ok {
		return nil, &objects.UnknownObjectError{Name: name, Suggest: decl.Closest(name, s.Names())}
	}
	return o, nil
}

// Get returns one record and its object. The record carries its stored
// data: Object.AppendJSON writes it, and Object.Decode gives its values.
func (v *View) Get(ctx context.Context, object, id string) (*objects.Object, *objects.Record, error) {
	obj, err := v.Object(object)
	if err != nil {
		return nil, nil, err
	}
	if !objects.ValidID(id) {
		return nil, nil, &objects.NotFoundError{Object: obj.Name, ID: id}
	}
	rec, err := v.e.store.Get(ctx, v.biz, obj.Name, id)
	if err != nil {
		return nil, nil, err
	}
	return obj, rec, nil
}

// List returns a page of records of an object, oldest first. limit must be
// between 1 and objects.MaxPageSize, offset not negative.
func (v *View) List(ctx context.Context, object string, limit, offset int) (*objects.Object, []*objects.Record, error) {
	obj, err := v.Object(object)
	if err != nil {
		return nil, nil, err
	}
	recs, err := v.e.store.List(ctx, v.biz, obj.Name, limit, offset)
	if err != nil {
		return nil, nil, err
	}
	return obj, recs, nil
}
