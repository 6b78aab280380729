package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/decl"
	"github.com/crmd/crmd/rules"
)

// CheckPacks compiles packs on their own, as crmd pack validate does, with
// the registered actions.
func CheckPacks(packs []*rules.Pack) (*rules.Ruleset, decl.Errors) {
	return rules.Compile(packs, compileOptions())
}

// ApplyOptions say how packs are applied.
type ApplyOptions struct {
	// AllowDrop lets a revision drop custom objects and fields that hold
	// data. The data stays stored, hidden, and comes back with a revision
	// that declares them again.
	AllowDrop bool
	// By says who applied it, for the revision's record.
	By string
}

// ApplyResult says what an activation did.
type ApplyResult struct {
	Activated  []PackRef // the revisions activated
	Unchanged  []string  // packs whose active revision already had this content
	Generation int64
	Dropped    []string // objects and fields dropped that held data
	// NewInbound are the inbound webhooks the packs made, with the tokens
	// of their URLs, shown this once.
	NewInbound []NewInbound
}

// An ApplyError is a set of packs refused: they do not compile with the
// business's other active packs, or they would drop data without leave.
// Nothing was changed.
type ApplyError struct {
	Errs decl.Errors
}

func (e *ApplyError) Error() string { return e.Errs.Error() }

// ApplyPacks stores a new revision of each pack and activates them
// together, with the business's other active packs, in one transaction. A
// pack whose content is that of its active revision is left as it is. On
// any problem nothing changes and the active revisions keep serving.
func (e *Engine) ApplyPacks(ctx context.Context, businessID string, packs []*rules.Pack, opts ApplyOptions) (*ApplyResult, error) {
	return e.activate(ctx, businessID, opts, func(tx objects.Tx, active map[string]*objects.PackRevision) ([]*rules.Pack, []*objects.PackRevision, error) {
		var out []*objects.PackRevision
		for _, p := range packs {
			if cur, ok := active[p.Name]; ok && cur.Hash == p.Hash {
				continue
			}
			rev := &objects.PackRevision{Pack: p.Name, Hash: p.Hash, CreatedAt: now(), CreatedBy: opts.By}
			for _, f := range p.Files {
				rev.Files = append(rev.Files, objects.PackFile{Name: f.Name, Content: string(f.Data)})
			}
			out = append(out, rev)
		}
		return packs, out, nil
	})
}

// RollbackPack activates an earlier revision of a pack (the one before the
// active one when revision is 0), with the same checks as ApplyPacks.
func (e *Engine) RollbackPack(ctx context.Context, businessID, pack string, revision int, opts ApplyOptions) (*ApplyResult, error) {
	return e.activate(ctx, businessID, opts, func(tx objects.Tx, active map[string]*objects.PackRevision) ([]*rules.Pack, []*objects.PackRevision, error) {
		cur, ok := active[pack]
		if !ok {
			return nil, nil, fmt.Errorf("pack %s has no active revision: %w", pack, objects.ErrNotFound)
		}
		if revision == 0 {
			revision = cur.Revision - 1
		}
		if revision < 1 || revision == cur.Revision {
			return nil, nil, fmt.Errorf("pack %s is at revision %d; there is no revision %d to roll back to", pack, cur.Revision, revision)
		}
		rev, err := e.store.PackRevision(ctx, businessID, pack, revision)
		if err != nil {
			return nil, nil, err
		}
		p, errs := parseRevisions([]*objects.PackRevision{rev})
		if errs != nil {
			return nil, nil, &ApplyError{Errs: errs}
		}
		return p, []*objects.PackRevision{rev}, nil
	})
}

// activate is the one transaction of ApplyPacks and RollbackPack: take the
// business's pack lock, choose the revisions (pick returns the packs that
// replace active ones, and the revisions to activate, with Revision 0 for
// new ones), compile the result, check what it drops, claim the values of
// fields that become unique, store and activate. After the commit the new
// snapshot serves this process's next request; other processes pick it up
// within PackPollInterval.
func (e *Engine) activate(ctx context.Context, businessID string, opts ApplyOptions,
	pick func(objects.Tx, map[string]*objects.PackRevision) ([]*rules.Pack, []*objects.PackRevision, error)) (*ApplyResult, error) {
	var res *ApplyResult
	err := e.store.Write(ctx, businessID, func(tx objects.Tx) error {
		res = &ApplyResult{}
		if err := tx.LockPacks(ctx); err != nil {
			return err
		}
		activeRevs, err := tx.TxActivePacks(ctx)
		if err != nil {
			return err
		}
		active := map[string]*objects.PackRevision{}
		for _, r := range activeRevs {
			active[r.Pack] = r
		}
		replacing, revs, err := pick(tx, active)
		if err != nil {
			return err
		}
		for _, p := range replacing {
			if !slices.ContainsFunc(revs, func(r *objects.PackRevision) bool { return r.Pack == p.Name }) {
				res.Unchanged = append(res.Unchanged, p.Name)
			}
		}
		if len(revs) == 0 {
			return nil
		}
		oldPacks, errs := parseRevisions(activeRevs)
		var oldRules *rules.Ruleset
		if errs == nil {
			oldRules, _ = rules.Compile(oldPacks, compileOptions())
		}
		// The new set: the active packs, with the picked ones replaced.
		next := slices.DeleteFunc(slices.Clone(oldPacks), func(p *rules.Pack) bool {
			return slices.ContainsFunc(replacing, func(q *rules.Pack) bool { return q.Name == p.Name })
		})
		next = append(next, replacing...)
		newRules, errs := rules.Compile(next, compileOptions())
		if errs != nil {
			return &ApplyError{Errs: errs}
		}
		if err := e.migrateData(ctx, tx, oldRules, newRules, opts, res); err != nil {
			return err
		}
		if res.NewInbound, err = ensureWebhooks(ctx, tx, newRules, now()); err != nil {
			return err
		}
		for _, rev := range revs {
			if rev.Revision == 0 {
				if err := tx.SavePackRevision(ctx, rev); err != nil {
					return err
				}
			}
			if err := tx.ActivatePack(ctx, rev.Pack, rev.Revision, opts.By, now()); err != nil {
				return err
			}
			res.Activated = append(res.Activated, PackRef{Pack: rev.Pack, Revision: rev.Revision, Hash: rev.Hash})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(res.Activated) > 0 {
		ent := e.snaps.entry(businessID)
		e.reload(ctx, businessID, ent)
		if s := ent.cur.Load(); s != nil {
			res.Generation = s.Generation
		}
	}
	return res, nil
}

// migrateData checks what going from old to new rules does to stored data.
// Custom objects and fields dropped while they hold data need AllowDrop.
// A field that is new to the schema, or whose type changes, must find the
// values stored under its name (kept from an earlier declaration, say) fit
// its type. Fields that become unique get their values claimed (duplicates
// refuse the change), and fields that stop being unique give their claims
// up. old is nil when the active packs no longer compile; then the standard
// schema stands in for it.
func (e *Engine) migrateData(ctx context.Context, tx objects.Tx, old, new *rules.Ruleset, opts ApplyOptions, res *ApplyResult) error {
	oldSchema := objects.Standard()
	if old != nil {
		oldSchema = old.Schema
	}
	var problems []string
	for _, name := range oldSchema.Names() {
		oo, _ := oldSchema.Object(name)
		no, kept := new.Schema.Object(name)
		if !kept {
			n, err := tx.CountRecords(ctx, name)
			if err != nil {
				return err
			}
			if n > 0 {
				res.Dropped = append(res.Dropped, fmt.Sprintf("object %s (%d records)", name, n))
			}
			continue
		}
		for _, of := range oo.Fields {
			if _, kept := no.Field(of.Name); kept {
				continue
			}
			inUse, err := tx.FieldInUse(ctx, name, of.Name)
			if err != nil {
				return err
			}
			if inUse {
				res.Dropped = append(res.Dropped, fmt.Sprintf("field %s.%s", name, of.Name))
			}
		}
	}
	if len(res.Dropped) > 0 && !opts.AllowDrop {
		problems = append(problems, "this would drop "+strings.Join(res.Dropped, ", ")+", which hold data; apply with --allow-drop to drop them anyway (the data stays stored, hidden, and comes back if they are declared again)")
	}
	for _, name := range new.Schema.Names() {
		no, _ := new.Schema.Object(name)
		oo, _ := oldSchema.Object(name)
		for _, nf := range no.Fields {
			if oo != nil {
				if of, ok := oo.Field(nf.Name); ok && of.Type.Name() == nf.Type.Name() && of.Target == nf.Target {
					continue
				}
			}
			p, err := checkStoredValues(ctx, tx, no, nf)
			if err != nil {
				return err
			}
			if p != "" {
				problems = append(problems, p)
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		var errs decl.Errors
		for _, p := range problems {
			errs = append(errs, &decl.Error{Msg: p})
		}
		return &ApplyError{Errs: errs}
	}
	return claimUnique(ctx, tx, oldSchema, new.Schema)
}

// checkStoredValues checks that the values stored under a field's name fit
// the field, as it is now declared, and returns the problem when one does
// not.
func checkStoredValues(ctx context.Context, tx objects.Tx, obj *objects.Object, f *objects.Field) (string, error) {
	inUse, err := tx.FieldInUse(ctx, obj.Name, f.Name)
	if err != nil || !inUse {
		return "", err
	}
	problem := ""
	errStop := errors.New("stop")
	err = tx.ScanRecords(ctx, obj.Name, func(r *objects.Record) error {
		fields, err := objects.DecodeFields(r.Data)
		if err != nil {
			return err
		}
		v, set := fields[f.Name]
		if !set || v == nil {
			return nil
		}
		if _, err := f.Type.Check(v); err != nil {
			problem = fmt.Sprintf("field %s.%s holds data that is not of type %s: %s record %s has %s, which %s",
				obj.Name, f.Name, f.Type.Name(), obj.Name, r.ID, objects.JSONText(v), err)
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return "", err
	}
	return problem, nil
}

// claimUnique brings the claims of unique values in line with the new
// schema.
func claimUnique(ctx context.Context, tx objects.Tx, old, new *objects.Schema) error {
	for _, name := range new.Names() {
		no, _ := new.Object(name)
		oo, _ := old.Object(name)
		for _, nf := range no.Fields {
			wasUnique := false
			if oo != nil {
				if of, ok := oo.Field(nf.Name); ok {
					wasUnique = of.Unique
				}
			}
			if !nf.Unique || wasUnique {
				continue
			}
			var dups []string
			err := tx.ScanRecords(ctx, name, func(r *objects.Record) error {
				if err := no.Decode(r); err != nil {
					return err
				}
				v, set := r.Fields[nf.Name]
				if !set {
					return nil
				}
				holder, err := tx.Claim(ctx, name, nf.Name, nf.UniqueKey(v), r.ID)
				if err != nil {
					return err
				}
				if holder != "" && len(dups) < 5 {
					dups = append(dups, fmt.Sprintf("%v (records %s and %s)", v, holder, r.ID))
				}
				return nil
			})
			if err != nil {
				return err
			}
			if len(dups) > 0 {
				return &ApplyError{Errs: decl.Errors{{Msg: fmt.Sprintf("%s.%s cannot become unique: records share values: %s", name, nf.Name, strings.Join(dups, "; "))}}}
			}
		}
	}
	for _, name := range old.Names() {
		oo, _ := old.Object(name)
		no, _ := new.Object(name)
		for _, of := range oo.Fields {
			if !of.Unique {
				continue
			}
			if no != nil {
				if nf, ok := no.Field(of.Name); ok && nf.Unique {
					continue
				}
			}
			if err := tx.ReleaseField(ctx, name, of.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// PackRevisions lists a business's pack revisions.
func (e *Engine) PackRevisions(ctx context.Context, businessID string) ([]*objects.PackRevision, error) {
	return e.store.PackRevisions(ctx, businessID)
}

// PackRevision returns one revision of a pack with its files; revision 0 is
// the active one.
func (e *Engine) PackRevision(ctx context.Context, businessID, pack string, revision int) (*objects.PackRevision, error) {
	if revision == 0 {
		revs, _, err := e.store.ActivePacks(ctx, businessID)
		if err != nil {
			return nil, err
		}
		for _, r := range revs {
			if r.Pack == pack {
				return r, nil
			}
		}
		return nil, fmt.Errorf("pack %s has no active revision: %w", pack, objects.ErrNotFound)
	}
	return e.store.PackRevision(ctx, businessID, pack, revision)
}

// TestResult is the outcome of one pack test.
type TestResult struct {
	Test   *rules.Test
	Failed string // why it failed; "" when it passed
}

// RunTests runs the tests the business's active packs carry, each against
// the business's records through the write path. Each test's writes are
// rolled back, so tests do not see each other's records.
func (e *Engine) RunTests(ctx context.Context, businessID string) ([]TestResult, error) {
	v, err := e.View(ctx, businessID)
	if err != nil {
		return nil, err
	}
	var out []TestResult
	for _, t := range v.snap.Rules.Tests {
		out = append(out, TestResult{Test: t, Failed: v.runTest(ctx, t)})
	}
	return out, nil
}

var errTestDone = errors.New("test done")

// runTest runs one test in a transaction it rolls back, and returns why it
// failed, or "".
func (v *View) runTest(ctx context.Context, tc *rules.Test) string {
	obj, _ := v.Object(tc.Object)
	var failed string
	err := v.e.store.Write(ctx, v.biz, func(tx objects.Tx) error {
		t := v.newTxn(ctx, tx, true, true)
		c := change{op: Op(tc.Op), object: obj.Name}
		if tc.Old != nil {
			old := &objects.Record{Object: obj.Name, ID: objects.NewID(), CreatedAt: t.now, UpdatedAt: t.now, Fields: tc.Old}
			if err := tx.Insert(ctx, old); err != nil {
				return err
			}
			c.id = old.ID
		}
		var rec *objects.Record
		var werr error
		if c.op != Delete {
			c.patch, werr = obj.CheckInput(tc.Record, c.op == Update)
		}
		if werr == nil {
			rec, werr = t.apply(c, 0, nil)
		}
		failed = checkExpectation(tc, rec, werr, t.trace)
		return errTestDone
	})
	if err != nil && !errors.Is(err, errTestDone) {
		return "the test could not run: " + err.Error()
	}
	return failed
}

// checkExpectation compares what a write did with what its test expects.
func checkExpectation(tc *rules.Test, rec *objects.Record, err error, trace *Trace) string {
	want := tc.Expect
	refused := want.Status >= 400
	var fe *objects.FieldError
	status, field, msg := 0, "", ""
	switch {
	case err == nil:
	case errors.As(err, &fe):
		status, field, msg = 422, fe.Field, fe.Message
	case errors.Is(err, objects.ErrNotFound):
		status, msg = 404, err.Error()
	default:
		return "the write failed: " + err.Error()
	}
	if refused {
		switch {
		case status == 0:
			return fmt.Sprintf("expected a refusal with status %d, but the write was accepted", want.Status)
		case status != want.Status:
			return fmt.Sprintf("expected status %d, got %d: %s", want.Status, status, msg)
		case want.Field != "" && field != want.Field:
			return fmt.Sprintf("expected the refusal to name field %s, but it names %q: %s", want.Field, field, msg)
		case want.Error != "" && !strings.Contains(msg, want.Error):
			return fmt.Sprintf("expected the message to contain %q, got %q", want.Error, msg)
		}
		return ""
	}
	if status != 0 {
		return fmt.Sprintf("expected the write to be accepted, but it was refused (%d): %s", status, msg)
	}
	if rec != nil {
		for k, v := range want.Fields {
			if got := rec.Fields[k]; fmt.Sprint(got) != fmt.Sprint(v) {
				return fmt.Sprintf("expected %s = %v, got %v", k, v, display(got))
			}
		}
	}
	counts := map[string]int{}
	for i, w := range trace.Writes {
		if i > 0 && w.Op == Create {
			counts[w.Object]++
		}
	}
	for object, n := range want.Created {
		if counts[object] != n {
			return fmt.Sprintf("expected %d %s records created by automations, got %d", n, object, counts[object])
		}
	}
	return ""
}

func display(v any) any {
	if v == nil {
		return "unset"
	}
	return v
}
