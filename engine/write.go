package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/rules"
)

// MaxDepth is how many writes deep automations may lead from the write a
// client asked for: an automation that updates a record whose automation
// updates the first, and so on, is stopped there with a 422.
const MaxDepth = 8

// Codes of the errors rules give, stable for clients to branch on.
const (
	CodeValidation      = "validation_failed"    // a validation rule refused the write
	CodeRequired        = "required"             // a required field is not set
	CodeNotUnique       = "not_unique"           // a unique field's value is taken
	CodeAutomation      = "automation_failed"    // a write an automation made was refused
	CodeAutomationDepth = "automation_depth"     // automations went too many writes deep
	CodeRuleError       = "rule_error"           // a rule's expression failed on this record
	CodePacksInvalid    = "rule_packs_invalid"   // the business's packs do not compile
	errDryRunText       = "dry run: rolled back" // never seen by clients
)

// A WriteRequest is one write to one record.
type WriteRequest struct {
	BusinessID string
	Object     string
	Op         Op
	ID         string         // the record, for Update and Delete
	Fields     map[string]any // the values sent, as decoded from JSON with json.Number
	// DryRun runs the whole write path and writes nothing.
	DryRun bool
	// Trace records which rules fired and what was written; a dry run always
	// traces.
	Trace bool
}

// A WriteResult is what a write did.
type WriteResult struct {
	Record *objects.Record // as stored; nil after a delete
	Trace  *Trace          // when asked for
}

// A Trace lists what a write did: the validations it passed, the
// automations and flows that ran, and every record written, the client's
// first.
type Trace struct {
	Validations []string     `json:"validations"`
	Automations []string     `json:"automations"`
	Flows       []string     `json:"flows"`
	Webhooks    []string     `json:"webhooks"`
	Writes      []TraceWrite `json:"writes"`
}

// A TraceWrite is one record written.
type TraceWrite struct {
	Op     Op     `json:"operation"`
	Object string `json:"object"`
	ID     string `json:"id"`
}

var errDryRun = errors.New(errDryRunText)

// Write applies one write with the business's current rules.
func (e *Engine) Write(ctx context.Context, w WriteRequest) (*WriteResult, error) {
	v, err := e.View(ctx, w.BusinessID)
	if err != nil {
		return nil, err
	}
	return v.Write(ctx, w)
}

// Write applies one write: the client's change and everything the business's
// rules make of it, in one transaction. See the README for the order of
// execution. It returns an *objects.FieldError for a value or rule that
// refuses the write, an *objects.NotFoundError for a record the business
// does not have, and an *objects.UnknownObjectError for an object it does
// not have.
func (v *View) Write(ctx context.Context, w WriteRequest) (*WriteResult, error) {
	obj, err := v.Object(w.Object)
	if err != nil {
		return nil, err
	}
	if w.Op != Create && !objects.ValidID(w.ID) {
		return nil, &objects.NotFoundError{Object: obj.Name, ID: w.ID}
	}
	var patch map[string]any
	if w.Op != Delete {
		if patch, err = obj.CheckInput(w.Fields, w.Op == Update); err != nil {
			return nil, err
		}
	}
	var res *WriteResult
	err = v.e.store.Write(ctx, v.biz, func(tx objects.Tx) error {
		// A fresh txn every attempt: the store may run this again.
		t := v.newTxn(ctx, tx, w.Trace || w.DryRun, w.DryRun)
		rec, err := t.apply(change{op: w.Op, object: obj.Name, id: w.ID, patch: patch}, 0, nil)
		if err != nil {
			return err
		}
		res = &WriteResult{Record: rec, Trace: t.trace}
		if w.DryRun {
			return errDryRun
		}
		return nil
	})
	if err != nil && !(w.DryRun && errors.Is(err, errDryRun)) {
		return nil, err
	}
	return res, nil
}

// newTxn starts the engine's side of a write transaction.
func (v *View) newTxn(ctx context.Context, tx objects.Tx, trace, dryRun bool) *txn {
	t := &txn{e: v.e, ctx: ctx, tx: tx, biz: v.biz, rs: v.snap.Rules, now: now(), dryRun: dryRun}
	if trace {
		t.trace = &Trace{Validations: []string{}, Automations: []string{}, Flows: []string{}, Webhooks: []string{}, Writes: []TraceWrite{}}
	}
	return t
}

// change is one record write within a transaction. patch is in canonical
// form; in an update a nil value clears the field.
type change struct {
	op     Op
	object string
	id     string
	patch  map[string]any
}

// txn is one client write in its transaction, with every write that its
// automations make.
type txn struct {
	e      *Engine
	ctx    context.Context
	tx     objects.Tx
	biz    string
	rs     *rules.Ruleset
	now    time.Time
	trace  *Trace
	dryRun bool // nothing will be kept: no deliveries are queued
}

// apply makes one change, in the order of execution: before-save
// automations, derived fields and defaults, schema checks, validation rules,
// the write, after-save automations and flows.
func (t *txn) apply(c change, depth int, chain []string) (*objects.Record, error) {
	obj, ok := t.rs.Schema.Object(c.object)
	if !ok {
		return nil, &objects.UnknownObjectError{Name: c.object}
	}
	chain = append(chain, obj.Name+"."+string(c.op))
	if depth > MaxDepth {
		return nil, &objects.FieldError{Code: CodeAutomationDepth, Message: fmt.Sprintf(
			"automations went more than %d writes deep, so the write was stopped: %s", MaxDepth, strings.Join(chain, " → "))}
	}
	r := t.rs.For(obj.Name)
	switch c.op {
	case Create:
		return t.create(obj, r, c, depth, chain)
	case Update:
		return t.update(obj, r, c, depth, chain)
	case Delete:
		return nil, t.remove(obj, r, c, depth, chain)
	}
	panic("engine: unknown write op " + string(c.op))
}

func (t *txn) create(obj *objects.Object, r *rules.ObjectRules, c change, depth int, chain []string) (*objects.Record, error) {
	fields := make(map[string]any, len(c.patch))
	for k, v := range c.patch {
		if v != nil {
			fields[k] = v
		}
	}
	env := rules.NewEnv(obj, "create", "", t.now, t.now, fields, nil)
	if err := t.before(obj, r.Before["create"], env, fields); err != nil {
		return nil, err
	}
	obj.DeriveName(fields)
	env.Set("name", fields["name"])
	for _, d := range r.Defaults {
		if _, set := fields[d.Field.Name]; set {
			continue
		}
		val, err := d.Value.Eval(env)
		if err != nil {
			return nil, ruleFailed("the default of "+d.Field.Name, err)
		}
		env.Set(d.Field.Name, val)
	}
	id := objects.NewID()
	if err := t.checkSchema(obj, id, fields, nil); err != nil {
		return nil, err
	}
	if err := t.validate(r, "create", env); err != nil {
		return nil, err
	}
	rec := &objects.Record{Object: obj.Name, ID: id, CreatedAt: t.now, UpdatedAt: t.now, Fields: fields}
	if err := t.tx.Insert(t.ctx, rec); err != nil {
		return nil, err
	}
	t.wrote(Create, obj.Name, id)
	env.SetRecord(id, t.now, t.now)
	if err := t.after(obj, r.After["create"], env, depth, chain); err != nil {
		return nil, err
	}
	if err := t.emit(obj, Create, rec, nil, env); err != nil {
		return nil, err
	}
	return rec, nil
}

func (t *txn) update(obj *objects.Object, r *rules.ObjectRules, c change, depth int, chain []string) (*objects.Record, error) {
	old, err := t.tx.Get(t.ctx, obj.Name, c.id)
	if err != nil {
		return nil, err
	}
	if err := obj.Decode(old); err != nil {
		return nil, err
	}
	fields := maps.Clone(old.Fields)
	for k, v := range c.patch {
		if v == nil {
			delete(fields, k)
		} else {
			fields[k] = v
		}
	}
	if objects.SameFields(fields, old.Fields) {
		return old, nil // nothing changes: nothing is written and no rule runs
	}
	env := rules.NewEnv(obj, "update", old.ID, old.CreatedAt, old.UpdatedAt, fields, old.Fields)
	if err := t.before(obj, r.Before["update"], env, fields); err != nil {
		return nil, err
	}
	if objects.SameFields(fields, old.Fields) {
		return old, nil
	}
	if err := t.checkSchema(obj, old.ID, fields, old.Fields); err != nil {
		return nil, err
	}
	if err := t.validate(r, "update", env); err != nil {
		return nil, err
	}
	rec := &objects.Record{Object: obj.Name, ID: old.ID, CreatedAt: old.CreatedAt, UpdatedAt: t.now, Fields: fields}
	if err := t.tx.Update(t.ctx, rec); err != nil {
		return nil, err
	}
	t.wrote(Update, obj.Name, rec.ID)
	env.SetRecord(rec.ID, rec.CreatedAt, rec.UpdatedAt)
	if err := t.after(obj, r.After["update"], env, depth, chain); err != nil {
		return nil, err
	}
	if err := t.emit(obj, Update, rec, old, env); err != nil {
		return nil, err
	}
	return rec, nil
}

func (t *txn) remove(obj *objects.Object, r *rules.ObjectRules, c change, depth int, chain []string) error {
	old, err := t.tx.Get(t.ctx, obj.Name, c.id)
	if err != nil {
		return err
	}
	if err := obj.Decode(old); err != nil {
		return err
	}
	if err := t.tx.Delete(t.ctx, obj.Name, old.ID); err != nil {
		return err
	}
	for _, f := range obj.Fields {
		if v, set := old.Fields[f.Name]; set && f.Unique {
			if err := t.tx.Release(t.ctx, obj.Name, f.Name, f.UniqueKey(v), old.ID); err != nil {
				return err
			}
		}
	}
	t.wrote(Delete, obj.Name, old.ID)
	env := rules.NewEnv(obj, "delete", old.ID, old.CreatedAt, old.UpdatedAt, old.Fields, old.Fields)
	if err := t.after(obj, r.After["delete"], env, depth, chain); err != nil {
		return err
	}
	return t.emit(obj, Delete, old, old, env)
}

// before runs the automations that change the record before it is saved.
func (t *txn) before(obj *objects.Object, autos []*rules.Automation, env *rules.Env, fields map[string]any) error {
	for _, a := range autos {
		ok, err := t.when(a, env)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		run := &Run{ctx: t.ctx, Env: env, Object: obj, t: t, set: func(field string, v any) error {
			env.Set(field, v)
			return nil
		}}
		for _, act := range a.Actions {
			if err := act.(Action).Run(run); err != nil {
				return automationFailed(a, err, true)
			}
		}
	}
	return nil
}

// after runs the automations that follow the save; their writes go through
// apply again, one level deeper.
func (t *txn) after(obj *objects.Object, autos []*rules.Automation, env *rules.Env, depth int, chain []string) error {
	for _, a := range autos {
		ok, err := t.when(a, env)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		run := &Run{ctx: t.ctx, Env: env, Object: obj, t: t, depth: depth, chain: append(chain, a.Name)}
		for _, act := range a.Actions {
			if err := act.(Action).Run(run); err != nil {
				return automationFailed(a, err, false)
			}
		}
	}
	return nil
}

// when evaluates an automation's condition and notes the automation in the
// trace when it runs.
func (t *txn) when(a *rules.Automation, env *rules.Env) (bool, error) {
	if a.When != nil {
		ok, err := a.When.Bool(env)
		if err != nil {
			return false, ruleFailed("automation "+a.Name, err)
		}
		if !ok {
			return false, nil
		}
	}
	if t.trace != nil {
		t.trace.Automations = append(t.trace.Automations, a.Name)
	}
	return true, nil
}

// nested makes a write on behalf of an automation.
func (t *txn) nested(r *Run, c change) (*objects.Record, error) {
	return t.apply(c, r.depth+1, r.chain)
}

// runFlow runs a flow's steps with the environment of the write that
// started it. A flow's steps see only their own flow's outputs.
func (t *txn) runFlow(r *Run, name string) error {
	f, ok := t.rs.Flow(name)
	if !ok {
		return fmt.Errorf("no flow %s", name)
	}
	if r.depth+1 > MaxDepth {
		return &objects.FieldError{Code: CodeAutomationDepth, Message: fmt.Sprintf(
			"automations and flows went more than %d levels deep, so the write was stopped: %s", MaxDepth, strings.Join(append(r.chain, "flow "+name), " → "))}
	}
	if t.trace != nil {
		t.trace.Flows = append(t.trace.Flows, name)
	}
	saved := r.Env.SwapSteps(nil)
	defer r.Env.SwapSteps(saved)
	inner := &Run{ctx: r.ctx, Env: r.Env, Object: r.Object, t: t, depth: r.depth + 1, chain: append(r.chain, "flow "+name)}
	return t.steps(inner, f, f.Steps)
}

func (t *txn) steps(r *Run, f *rules.Flow, steps []*rules.Step) error {
	for _, s := range steps {
		if s.If != nil {
			ok, err := s.If.Bool(r.Env)
			if err != nil {
				return ruleFailed("flow "+f.Name, err)
			}
			branch := s.Else
			if ok {
				branch = s.Then
			}
			if err := t.steps(r, f, branch); err != nil {
				return err
			}
			continue
		}
		r.output = nil
		if err := s.Action.(Action).Run(r); err != nil {
			var fe *objects.FieldError
			if errors.As(err, &fe) {
				return err
			}
			return fmt.Errorf("flow %s: %w", f.Name, err)
		}
		if s.Name != "" && r.output != nil {
			r.Env.SetStep(s.Name, r.output)
		}
	}
	return nil
}

// checkSchema checks the record against its object's settings: required
// fields on every write; allowed values, bounds, patterns and references for
// the fields the write sets or changes; and it claims the values of unique
// fields, giving up the values they had.
func (t *txn) checkSchema(obj *objects.Object, id string, fields, old map[string]any) error {
	for _, f := range obj.Fields {
		v := fields[f.Name]
		if f.Required && (v == nil || v == "") {
			return &objects.FieldError{Field: f.Name, Code: CodeRequired, Message: f.Name + " is required"}
		}
		var was any
		if old != nil {
			was = old[f.Name]
			if objects.SameValue(v, was) {
				continue
			}
		}
		if v != nil {
			if err := f.CheckConstraints(v); err != nil {
				return err
			}
			if f.Target != "" {
				if err := t.checkReference(f, v.(string)); err != nil {
					return err
				}
			}
		}
		if !f.Unique {
			continue
		}
		if was != nil {
			if err := t.tx.Release(t.ctx, obj.Name, f.Name, f.UniqueKey(was), id); err != nil {
				return err
			}
		}
		if v != nil {
			holder, err := t.tx.Claim(t.ctx, obj.Name, f.Name, f.UniqueKey(v), id)
			if err != nil {
				return err
			}
			if holder != "" {
				return &objects.FieldError{Field: f.Name, Code: CodeNotUnique,
					Message: fmt.Sprintf("%s must be unique, and %s record %s has %v already", f.Name, obj.Name, holder, v)}
			}
		}
	}
	return nil
}

func (t *txn) checkReference(f *objects.Field, id string) error {
	found, err := t.tx.Exists(t.ctx, f.Target, id)
	if err != nil {
		return err
	}
	if !found {
		return &objects.FieldError{Field: f.Name, Code: objects.CodeInvalidReference,
			Message: f.Name + " refers to no " + f.Target + " record with id " + id}
	}
	return nil
}

// validate runs the validation rules of event in order; the first that
// holds refuses the write.
func (t *txn) validate(r *rules.ObjectRules, event string, env *rules.Env) error {
	for _, v := range r.Validations {
		if !v.On[event] {
			continue
		}
		block, err := v.When.Bool(env)
		if err != nil {
			return ruleFailed("validation "+v.Name, err)
		}
		if block {
			return &objects.FieldError{Field: v.Field, Code: CodeValidation, Message: v.Error}
		}
		if t.trace != nil {
			t.trace.Validations = append(t.trace.Validations, v.Name)
		}
	}
	return nil
}

func (t *txn) wrote(op Op, object, id string) {
	if t.trace != nil {
		t.trace.Writes = append(t.trace.Writes, TraceWrite{Op: op, Object: object, ID: id})
	}
}

// ruleFailed is a rule whose expression failed on the record being written.
func ruleFailed(what string, err error) error {
	var fe *objects.FieldError
	if errors.As(err, &fe) {
		return fe
	}
	return &objects.FieldError{Code: CodeRuleError, Message: what + " could not be evaluated: " + err.Error()}
}

// automationFailed explains a refusal met by an automation. A refusal of
// the record being written (a set it made) keeps its field; a refusal of
// another record names the automation instead.
func automationFailed(a *rules.Automation, err error, sameRecord bool) error {
	var fe *objects.FieldError
	if errors.As(err, &fe) {
		if sameRecord || fe.Code == CodeAutomationDepth || fe.Code == CodeAutomation {
			return fe
		}
		return &objects.FieldError{Code: CodeAutomation, Message: "automation " + a.Name + ": " + fe.Message}
	}
	var nf *objects.NotFoundError
	if errors.As(err, &nf) {
		return &objects.FieldError{Code: CodeAutomation, Message: "automation " + a.Name + ": " + nf.Error()}
	}
	return err
}
