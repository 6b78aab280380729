package rules

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/expr-lang/expr/types"
	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/decl"
)

// Options configure compilation.
type Options struct {
	// Actions finds the factory of an action by its id.
	Actions func(id string) (ActionFactory, bool)
	// ActionIDs lists the known actions, for suggestions.
	ActionIDs func() []string
}

// Events are the writes rules react to.
var Events = []string{"create", "update", "delete"}

// MaxNameLen bounds the names of rules, flows and tests.
const MaxNameLen = 100

type compiler struct {
	opts    Options
	files   map[string][]byte
	readers map[string]*decl.Reader
	rs      *Ruleset
	names   map[string]decl.Pos // rule names, unique across validations, automations and flows
	flowRun map[string][]string // flow → flows it runs
	errs    decl.Errors
}

// Compile compiles the union of packs into a ruleset, or returns every
// problem found. Packs are taken in name order.
func Compile(packs []*Pack, opts Options) (*Ruleset, decl.Errors) {
	packs = slices.Clone(packs)
	sort.Slice(packs, func(i, j int) bool { return packs[i].Name < packs[j].Name })
	c := &compiler{
		opts:    opts,
		files:   map[string][]byte{},
		readers: map[string]*decl.Reader{},
		rs: &Ruleset{objects: map[string]*ObjectRules{}, flows: map[string]*Flow{},
			subscribed: map[string][]*Subscription{}, inbound: map[string]*Inbound{}, endpoints: map[string]bool{}},
		names:   map[string]decl.Pos{},
		flowRun: map[string][]string{},
	}
	seen := map[string]bool{}
	var decls []*objects.ObjectDecl
	for _, p := range packs {
		if seen[p.Name] {
			c.fail(decl.Pos{File: p.Name}, "pack", "pack %s is given twice", p.Name)
		}
		seen[p.Name] = true
		c.rs.Packs = append(c.rs.Packs, PackInfo{Name: p.Name, Hash: p.Hash})
		for _, f := range p.Files {
			c.files[f.Display()] = f.Data
		}
		decls = append(decls, p.Objects...)
	}
	schema, errs := objects.Extend(objects.Standard(), decls, false)
	c.errs = append(c.errs, errs...)
	c.rs.Schema = schema
	for _, d := range decls {
		for _, fd := range d.Fields {
			if fd.Default != nil {
				c.compileDefault(d, fd)
			}
		}
	}
	for _, p := range packs {
		for _, v := range p.Validations {
			c.compileValidation(v)
		}
	}
	// Flows first, by name, so that run actions anywhere can refer to them.
	var flows []*FlowDecl
	for _, p := range packs {
		for _, f := range p.Flows {
			if c.claimName(f.Name, "flow", at(f.At, "name", f.Pos), f.Path) {
				flows = append(flows, f)
			}
		}
	}
	for _, f := range flows {
		if o, ok := c.object(f.Object, at(f.At, "object", f.Pos), decl.Join(rulePath(f.Path, f.Name), "object")); ok {
			c.rs.flows[f.Name] = &Flow{Name: f.Name, Object: o.Name, Pos: f.Pos}
		}
	}
	for _, f := range flows {
		if flow, ok := c.rs.flows[f.Name]; ok {
			renameSteps(f.Steps, f.Path, rulePath(f.Path, f.Name))
			flow.Steps = c.compileSteps(f.Steps, &scope{obj: c.object1(flow.Object), steps: types.Map{}}, flow.Name)
		}
	}
	c.checkFlowCycles()
	for _, p := range packs {
		for _, a := range p.Automations {
			c.compileAutomation(a)
		}
	}
	webhooks, inbound := map[string]decl.Pos{}, map[string]decl.Pos{}
	for _, p := range packs {
		for _, w := range p.Webhooks {
			c.compileWebhook(w, webhooks)
		}
		for _, in := range p.Inbound {
			c.compileInbound(in, inbound)
		}
	}
	for _, p := range packs {
		for _, t := range p.Tests {
			c.compileTest(p.Name, t)
		}
	}
	if len(c.errs) > 0 {
		c.errs.Sort()
		return nil, c.errs
	}
	return c.rs, nil
}

func (c *compiler) fail(pos decl.Pos, path, format string, args ...any) {
	c.errs = append(c.errs, &decl.Error{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (c *compiler) reader(file string) *decl.Reader {
	r, ok := c.readers[file]
	if !ok {
		r = &decl.Reader{File: file}
		c.readers[file] = r
	}
	return r
}

// collect moves the errors readers found into c.errs.
func (c *compiler) collect(r *decl.Reader) {
	c.errs = append(c.errs, r.Errs...)
	r.Errs = nil
}

func (c *compiler) rules(object string) *ObjectRules {
	r, ok := c.rs.objects[object]
	if !ok {
		r = &ObjectRules{Before: map[string][]*Automation{}, After: map[string][]*Automation{}}
		c.rs.objects[object] = r
	}
	return r
}

// object finds an object named in a rule.
func (c *compiler) object(name string, pos decl.Pos, path string) (*objects.Object, bool) {
	if name == "" {
		c.fail(pos, path, "needs the object it applies to")
		return nil, false
	}
	o, ok := c.rs.Schema.Object(name)
	if !ok {
		c.fail(pos, path, "unknown object %s%s", name, decl.DidYouMean(name, c.rs.Schema.Names()))
	}
	return o, ok
}

func (c *compiler) object1(name string) *objects.Object {
	o, _ := c.rs.Schema.Object(name)
	return o
}

// claimName checks a rule's name and that no other rule has it.
func (c *compiler) claimName(name, what string, pos decl.Pos, path string) bool {
	switch {
	case strings.TrimSpace(name) == "":
		c.fail(pos, path, "a %s needs a name", what)
		return false
	case utf8.RuneCountInString(name) > MaxNameLen || strings.ContainsAny(name, "\n\r\t"):
		c.fail(pos, path, "the name of a %s is one line of at most %d characters", what, MaxNameLen)
		return false
	}
	if prev, dup := c.names[name]; dup {
		c.fail(pos, path, "the name %s is taken by the rule at %s", name, prev)
		return false
	}
	c.names[name] = pos
	return true
}

// expr compiles the expression in the scalar node n, reporting errors at
// their place in the file.
func (c *compiler) expr(file string, n *yaml.Node, path string, sc *scope, want reflect.Kind) *Expr {
	r := c.reader(file)
	defer c.collect(r)
	src, ok := r.String(n, path)
	if !ok {
		return nil
	}
	x, e := compileExpr(src, sc, want)
	if e != nil {
		c.errs = append(c.errs, &decl.Error{Pos: c.exprPos(file, n, 0, e), Path: path, Msg: e.msg})
		return nil
	}
	return x
}

// exprPos is the position in the file of an error in the expression held by
// node n, where the expression starts offset characters into the scalar.
func (c *compiler) exprPos(file string, n *yaml.Node, offset int, e *exprError) decl.Pos {
	pos := decl.Pos{File: file, Line: n.Line, Col: n.Column}
	if e.line == 0 {
		return pos
	}
	switch n.Style {
	case yaml.LiteralStyle, yaml.FoldedStyle:
		// The expression starts on the line after the | or >.
		pos.Line = n.Line + e.line
		pos.Col = indentation(c.files[file], pos.Line) + e.col
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		if e.line == 1 {
			pos.Col = n.Column + 1 + offset + e.col - 1
		} else {
			pos.Line += e.line - 1
			pos.Col = e.col
		}
	default:
		if e.line == 1 {
			pos.Col = n.Column + offset + e.col - 1
		} else {
			pos.Line += e.line - 1
			pos.Col = e.col
		}
	}
	return pos
}

// indentation returns the number of spaces that start line (1-based) of data.
func indentation(data []byte, line int) int {
	lines := bytes.Split(data, []byte("\n"))
	if line < 1 || line > len(lines) {
		return 0
	}
	return len(lines[line-1]) - len(bytes.TrimLeft(lines[line-1], " "))
}

// value compiles what a field is given: a literal, or an expression after
// "=" (write "==" for a literal that starts with "=").
func (c *compiler) value(file string, n *yaml.Node, path string, sc *scope, f *objects.Field) *Value {
	r := c.reader(file)
	defer c.collect(r)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && strings.HasPrefix(n.Value, "=") && !strings.HasPrefix(n.Value, "==") {
		src := strings.TrimLeft(n.Value[1:], " ")
		offset := utf8.RuneCountInString(n.Value) - utf8.RuneCountInString(src)
		x, e := compileExpr(src, sc, reflect.Invalid)
		if e != nil {
			c.errs = append(c.errs, &decl.Error{Pos: c.exprPos(file, n, offset, e), Path: path, Msg: e.msg})
			return nil
		}
		if t := x.program.Node().Type(); !resultFits(t, f) {
			r.Errorf(n, path, "%s is a %s field, but %s gives a %s", f.Name, f.Type.Name(), src, t)
			return nil
		}
		return &Value{Field: f, Expr: x}
	}
	raw, ok := r.Value(n, path)
	if !ok {
		return nil
	}
	if s, isStr := raw.(string); isStr && strings.HasPrefix(s, "==") {
		raw = s[1:]
	}
	if raw == nil {
		return &Value{Field: f}
	}
	v, err := f.Type.Check(objects.LiteralValue(raw))
	if err == nil {
		err = f.CheckConstraints(v)
		if fe, ok := err.(*objects.FieldError); ok {
			err = fmt.Errorf("%s", strings.TrimPrefix(fe.Message, f.Name+" "))
		}
	}
	if err != nil {
		hint := ""
		if _, isStr := raw.(string); isStr {
			hint = " (to compute a value, write = before an expression)"
		}
		r.Errorf(n, path, "%s %s%s", f.Name, err, hint)
		return nil
	}
	return &Value{Field: f, Lit: v}
}

// values compiles a mapping of field names of obj to values.
func (c *compiler) values(file string, n *yaml.Node, path string, sc *scope, obj *objects.Object) []*FieldValue {
	r := c.reader(file)
	var out []*FieldValue
	r.Mapping(n, path, nil, func(name string, v *yaml.Node, path string) {
		f, ok := obj.Field(name)
		if !ok {
			r.Errorf(v, path, "%s has no field %s%s", obj.Name, name, decl.DidYouMean(name, obj.FieldNames()))
			return
		}
		if val := c.value(file, v, path, sc, f); val != nil {
			out = append(out, &FieldValue{Field: f, Value: val})
		}
	})
	c.collect(r)
	return out
}

func (c *compiler) compileDefault(d *objects.ObjectDecl, fd *objects.FieldDecl) {
	obj := c.object1(d.Name)
	if obj == nil {
		return
	}
	f, ok := obj.Field(fd.Name)
	if !ok {
		return // its declaration was refused
	}
	path := decl.Join(decl.Join(decl.Join("objects", d.Name), "fields"), fd.Name) + ".default"
	if v := c.value(fd.Pos.File, fd.Default, path, &scope{obj: obj}, f); v != nil {
		c.rules(obj.Name).Defaults = append(c.rules(obj.Name).Defaults, &Default{Field: f, Value: v})
	}
}

// rulePath names a rule in error paths by its name when it has one.
func rulePath(path, name string) string {
	if name == "" {
		return path
	}
	section, _, _ := strings.Cut(path, "[")
	return section + "[" + name + "]"
}

func (c *compiler) compileValidation(v *ValidationDecl) {
	path := rulePath(v.Path, v.Name)
	ok := c.claimName(v.Name, "validation", at(v.At, "name", v.Pos), path)
	obj, objOK := c.object(v.Object, at(v.At, "object", v.Pos), decl.Join(path, "object"))
	on := map[string]bool{"create": true, "update": true}
	if v.On != nil {
		on = map[string]bool{}
		for _, e := range v.On {
			if e != "create" && e != "update" {
				c.fail(at(v.At, "on", v.Pos), decl.Join(path, "on"), "a validation runs on create, update, or both, not %s", e)
			}
			on[e] = true
		}
	}
	if v.Error == "" {
		c.fail(v.Pos, path, "a validation needs error: the message a refused write gets")
	}
	if v.When == nil {
		c.fail(v.Pos, path, "a validation needs when: the condition, true when the write must be refused")
	}
	if !ok || !objOK || v.When == nil {
		return
	}
	if v.Field != "" {
		if _, has := obj.Field(v.Field); !has {
			c.fail(at(v.At, "field", v.Pos), decl.Join(path, "field"), "%s has no field %s%s", obj.Name, v.Field, decl.DidYouMean(v.Field, obj.FieldNames()))
		}
	}
	when := c.expr(v.Pos.File, v.When, decl.Join(path, "when"), &scope{obj: obj}, reflect.Bool)
	if when == nil {
		return
	}
	rs := c.rules(obj.Name)
	rs.Validations = append(rs.Validations, &Validation{Name: v.Name, On: on, When: when, Error: v.Error, Field: v.Field, Pos: v.Pos})
}

// ActionCompiler is what an action's factory compiles its configuration
// with: the object and schema it works on, strict decoding, and the
// compilation of conditions and field values against the rule's scope.
type ActionCompiler struct {
	c      *compiler
	file   string
	sc     *scope
	flow   string // the flow being compiled, or ""
	Object *objects.Object
	Schema *objects.Schema
}

// Errorf reports a problem in the configuration.
func (a *ActionCompiler) Errorf(n *yaml.Node, path, format string, args ...any) {
	a.c.fail(decl.PosOf(a.file, n), path, format, args...)
}

// Mapping decodes a mapping strictly: keys not in known are problems.
func (a *ActionCompiler) Mapping(n *yaml.Node, path string, known []string, fn func(key string, v *yaml.Node, path string)) {
	r := a.c.reader(a.file)
	r.Mapping(n, path, known, fn)
	a.c.collect(r)
}

// String reads a string.
func (a *ActionCompiler) String(n *yaml.Node, path string) (string, bool) {
	r := a.c.reader(a.file)
	defer a.c.collect(r)
	return r.String(n, path)
}

// Condition compiles a condition.
func (a *ActionCompiler) Condition(n *yaml.Node, path string) *Expr {
	return a.c.expr(a.file, n, path, a.sc, reflect.Bool)
}

// Values compiles a mapping of fields of obj to values, whose expressions
// see the rule's scope.
func (a *ActionCompiler) Values(n *yaml.Node, path string, obj *objects.Object) []*FieldValue {
	return a.c.values(a.file, n, path, a.sc, obj)
}

// Value compiles one value for field f: a literal, or an expression after
// "=".
func (a *ActionCompiler) Value(n *yaml.Node, path string, f *objects.Field) *Value {
	return a.c.value(a.file, n, path, a.sc, f)
}

// Endpoint notes that the action sends deliveries as name, whose secret
// crmd keeps; it reports whether the name is well formed.
func (a *ActionCompiler) Endpoint(n *yaml.Node, path, name string) bool {
	if !WebhookName.MatchString(name) {
		a.Errorf(n, path, "the name a webhook is sent as is lower case letters, digits, - and _, starting with a letter or digit")
		return false
	}
	a.c.rs.endpoints[name] = true
	return true
}

// URL checks the URL a webhook is sent to.
func (a *ActionCompiler) URL(n *yaml.Node, path, raw string) bool {
	if err := checkURL(raw); err != nil {
		a.Errorf(n, path, "url %s", err)
		return false
	}
	return true
}

// Headers reads a mapping of extra header names to values.
func (a *ActionCompiler) Headers(n *yaml.Node, path string) map[string]string {
	r := a.c.reader(a.file)
	defer a.c.collect(r)
	return a.c.headers(r, n, path)
}

// Payload compiles a mapping of names to values, literals or expressions
// after "=", of any type: the body of a webhook.
func (a *ActionCompiler) Payload(n *yaml.Node, path string) []*PayloadValue {
	r := a.c.reader(a.file)
	var out []*PayloadValue
	r.Mapping(n, path, nil, func(name string, v *yaml.Node, path string) {
		if v.Kind == yaml.ScalarNode && v.Tag == "!!str" && strings.HasPrefix(v.Value, "=") && !strings.HasPrefix(v.Value, "==") {
			src := strings.TrimLeft(v.Value[1:], " ")
			offset := utf8.RuneCountInString(v.Value) - utf8.RuneCountInString(src)
			x, e := compileExpr(src, a.sc, reflect.Invalid)
			if e != nil {
				a.c.errs = append(a.c.errs, &decl.Error{Pos: a.c.exprPos(a.file, v, offset, e), Path: path, Msg: e.msg})
				return
			}
			out = append(out, &PayloadValue{Name: name, Expr: x})
			return
		}
		lit, ok := r.Value(v, path)
		if !ok {
			return
		}
		if s, isStr := lit.(string); isStr && strings.HasPrefix(s, "==") {
			lit = s[1:]
		}
		out = append(out, &PayloadValue{Name: name, Lit: lit})
	})
	a.c.collect(r)
	return out
}

// LookupObject finds an object by name, reporting it when unknown.
func (a *ActionCompiler) LookupObject(n *yaml.Node, path, name string) (*objects.Object, bool) {
	o, ok := a.Schema.Object(name)
	if !ok {
		a.Errorf(n, path, "unknown object %s%s", name, decl.DidYouMean(name, a.Schema.Names()))
	}
	return o, ok
}

// RunsFlow checks that the flow name exists and runs on the rule's object,
// and notes the call so that flows that run each other in a circle are
// found.
func (a *ActionCompiler) RunsFlow(n *yaml.Node, path, name string) bool {
	f, ok := a.c.rs.flows[name]
	if !ok {
		names := make([]string, 0, len(a.c.rs.flows))
		for k := range a.c.rs.flows {
			names = append(names, k)
		}
		sort.Strings(names)
		a.Errorf(n, path, "unknown flow %s%s", name, decl.DidYouMean(name, names))
		return false
	}
	if f.Object != a.Object.Name {
		a.Errorf(n, path, "flow %s runs on %s, not %s", name, f.Object, a.Object.Name)
		return false
	}
	if a.flow != "" {
		a.c.flowRun[a.flow] = append(a.c.flowRun[a.flow], name)
	}
	return true
}

// compileAction compiles one action with its factory.
func (c *compiler) compileAction(ad *ActionDecl, file string, sc *scope, flow string) Action {
	var factory ActionFactory
	ok := false
	if c.opts.Actions != nil {
		factory, ok = c.opts.Actions(ad.ID)
	}
	if !ok {
		var ids []string
		if c.opts.ActionIDs != nil {
			ids = c.opts.ActionIDs()
		}
		sort.Strings(ids)
		c.fail(ad.Pos, ad.Path, "unknown action %s%s (the actions are %s)", ad.ID, decl.DidYouMean(ad.ID, ids), strings.Join(ids, ", "))
		return nil
	}
	before := len(c.errs)
	a := factory(&ActionCompiler{c: c, file: file, sc: sc, flow: flow, Object: sc.obj, Schema: c.rs.Schema}, ad.Config, ad.Path)
	if len(c.errs) > before || a == nil {
		return nil
	}
	return a
}

func (c *compiler) compileAutomation(ad *AutomationDecl) {
	path := rulePath(ad.Path, ad.Name)
	named := c.claimName(ad.Name, "automation", at(ad.At, "name", ad.Pos), path)
	obj, objOK := c.object(ad.Object, at(ad.At, "object", ad.Pos), decl.Join(path, "object"))
	eventsOK := len(ad.On) > 0
	if !eventsOK {
		c.fail(ad.Pos, path, "an automation needs on: create, update or delete")
	}
	for _, e := range ad.On {
		if !slices.Contains(Events, e) {
			c.fail(at(ad.At, "on", ad.Pos), decl.Join(path, "on"), "an automation runs on create, update or delete, not %s%s", e, decl.DidYouMean(e, Events))
			eventsOK = false
		}
	}
	if len(ad.Actions) == 0 {
		c.fail(ad.Pos, path, "an automation needs actions")
	}
	if !objOK {
		return
	}
	// The rest is compiled even when the above failed, so that one pass
	// reports every problem.
	sc := &scope{obj: obj}
	var when *Expr
	whenOK := true
	if ad.When != nil {
		when = c.expr(ad.Pos.File, ad.When, decl.Join(path, "when"), sc, reflect.Bool)
		whenOK = when != nil
	}
	var actions []Action
	phases := map[Phase]bool{}
	for _, d := range ad.Actions {
		d.Path = strings.Replace(d.Path, ad.Path, path, 1)
		a := c.compileAction(d, ad.Pos.File, sc, "")
		if a == nil {
			continue
		}
		phases[a.Phase()] = true
		actions = append(actions, a)
	}
	if !named || !eventsOK || !whenOK || len(actions) != len(ad.Actions) {
		return
	}
	if phases[BeforeSave] && phases[AfterSave] {
		c.fail(ad.Pos, path, "set changes the record before it is saved and the other actions run after: put set in an automation of its own")
		return
	}
	for _, e := range ad.On {
		if phases[BeforeSave] && e == "delete" {
			c.fail(ad.Pos, path, "set cannot run on delete: there is no record left to change")
			return
		}
	}
	rs := c.rules(obj.Name)
	for _, e := range ad.On {
		a := &Automation{Name: ad.Name, Object: obj.Name, Event: e, When: when, Actions: actions, Pos: ad.Pos}
		if phases[BeforeSave] {
			rs.Before[e] = append(rs.Before[e], a)
		} else {
			rs.After[e] = append(rs.After[e], a)
		}
	}
}

// compileSteps compiles the steps of a flow. Named steps that produce
// outputs make them visible, as steps.<name>, to the steps after them.
func (c *compiler) compileSteps(decls []*StepDecl, sc *scope, flow string) []*Step {
	var steps []*Step
	names := map[string]bool{}
	for _, d := range decls {
		s := &Step{Name: d.Name}
		if d.Name != "" {
			if names[d.Name] || sc.steps[d.Name] != nil {
				c.fail(d.Pos, d.Path, "two steps are named %s", d.Name)
			}
			names[d.Name] = true
		}
		if d.If != nil {
			s.If = c.expr(d.Pos.File, d.If, decl.Join(d.Path, "if"), sc, reflect.Bool)
			inner := &scope{obj: sc.obj, steps: clone(sc.steps)}
			s.Then = c.compileSteps(d.Then, inner, flow)
			inner = &scope{obj: sc.obj, steps: clone(sc.steps)}
			s.Else = c.compileSteps(d.Else, inner, flow)
			steps = append(steps, s)
			continue
		}
		if d.Action == nil {
			continue
		}
		s.Action = c.compileAction(d.Action, d.Pos.File, sc, flow)
		if s.Action == nil {
			continue
		}
		if s.Action.Phase() == BeforeSave {
			c.fail(d.Pos, d.Path, "%s cannot be a flow step: flows run after the record is saved", d.Action.ID)
			continue
		}
		if o, ok := s.Action.(Outputter); ok && d.Name != "" {
			sc.steps[d.Name] = outputType(o.Output())
		}
		steps = append(steps, s)
	}
	return steps
}

func clone(m types.Map) types.Map {
	out := make(types.Map, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// outputType is the type expressions see for a step's outputs.
func outputType(out map[string]Kind) types.Map {
	m := types.Map{}
	for k, kind := range out {
		switch kind {
		case KindString:
			m[k] = types.String
		case KindNumber:
			m[k] = types.Float64
		case KindBool:
			m[k] = types.Bool
		}
	}
	return m
}

// renameSteps names a flow's steps' paths by the flow's name.
func renameSteps(steps []*StepDecl, from, to string) {
	for _, s := range steps {
		s.Path = strings.Replace(s.Path, from, to, 1)
		if s.Action != nil {
			s.Action.Path = strings.Replace(s.Action.Path, from, to, 1)
		}
		renameSteps(s.Then, from, to)
		renameSteps(s.Else, from, to)
	}
}

// checkFlowCycles refuses flows that run each other in a circle, reporting
// each circle once, at the flow where it was entered.
func (c *compiler) checkFlowCycles() {
	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	var visit func(name string, chain []string)
	visit = func(name string, chain []string) {
		switch state[name] {
		case visiting:
			start := slices.Index(chain, name)
			first := c.rs.flows[chain[start]]
			c.fail(first.Pos, "flows["+first.Name+"]", "flows run each other in a circle: %s", strings.Join(append(chain[start:], name), " → "))
			return
		case done:
			return
		}
		state[name] = visiting
		for _, next := range c.flowRun[name] {
			visit(next, append(chain, name))
		}
		state[name] = done
	}
	names := make([]string, 0, len(c.rs.flows))
	for n := range c.rs.flows {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		visit(n, nil)
	}
}

func (c *compiler) compileTest(pack string, td *TestDecl) {
	path := rulePath(td.Path, td.Name)
	if strings.TrimSpace(td.Name) == "" {
		c.fail(td.Pos, path, "a test needs a name")
	}
	obj, ok := c.object(td.Object, at(td.At, "object", td.Pos), decl.Join(path, "object"))
	if !ok || td.Op == "" {
		return
	}
	r := c.reader(td.Pos.File)
	defer c.collect(r)
	t := &Test{Pack: pack, Name: td.Name, Object: obj.Name, Op: td.Op, Pos: td.Pos, Expect: Expect{
		Status: td.Expect.Status, Field: td.Expect.Field, Error: td.Expect.Error, Created: td.Expect.Created,
	}}
	literal := func(n *yaml.Node, path string) map[string]any {
		if n == nil || n.Tag == "!!null" {
			return map[string]any{}
		}
		v, ok := r.Value(n, path)
		m, isMap := v.(map[string]any)
		if !ok || !isMap {
			r.Errorf(n, path, "must be a mapping of field names to values")
			return nil
		}
		return objects.LiteralValue(m).(map[string]any)
	}
	canon := func(n *yaml.Node, path string) map[string]any {
		m := literal(n, path)
		if m == nil {
			return nil
		}
		out, err := obj.CheckInput(m, false)
		if err != nil {
			r.Errorf(n, path, "%v", err)
		}
		return out
	}
	switch td.Op {
	case "create":
		t.Record = literal(td.Record, decl.Join(path, "create"))
		if td.Old != nil {
			r.Errorf(td.Old, decl.Join(path, "old"), "a create has no old record")
		}
	case "update":
		t.Record = literal(td.Record, decl.Join(path, "update"))
		if td.Old == nil {
			r.Errorf(td.Record, path, "an update test needs old: the record as it is before the update")
		}
		t.Old = canon(td.Old, decl.Join(path, "old"))
	case "delete":
		t.Old = canon(td.Record, decl.Join(path, "delete"))
	}
	if td.Expect.Fields != nil {
		t.Expect.Fields = canon(td.Expect.Fields, decl.Join(path, "expect.fields"))
	}
	for object := range td.Expect.Created {
		if _, ok := c.rs.Schema.Object(object); !ok {
			r.Errorf(td.Record, decl.Join(path, "expect.created"), "unknown object %s%s", object, decl.DidYouMean(object, c.rs.Schema.Names()))
		}
	}
	if s := t.Expect.Status; s != 0 && (s < 200 || s > 599) {
		r.Errorf(td.Record, decl.Join(path, "expect.status"), "status %d is not an HTTP status", s)
	}
	c.rs.Tests = append(c.rs.Tests, t)
}
