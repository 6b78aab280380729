package rules

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/types"
	"github.com/expr-lang/expr/vm"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/decl"
)

// Limits on what one expression may cost: its size when compiled, and the
// memory (which bounds loops over ranges and lists) when it runs.
const (
	MaxExprNodes  = 500
	MemoryBudget  = 100_000
	maxExprSource = 4000
)

// An Expr is a compiled expression. It is safe for concurrent use.
type Expr struct {
	Source  string
	program *vm.Program
}

var vms = sync.Pool{New: func() any { return &vm.VM{MemoryBudget: MemoryBudget} }}

// Eval runs the expression in env.
func (x *Expr) Eval(env *Env) (any, error) {
	m := vms.Get().(*vm.VM)
	defer vms.Put(m)
	out, err := m.Run(x.program, env.load())
	if err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			return nil, fmt.Errorf("evaluating %s: %s", x.Source, fe.Message)
		}
		return nil, fmt.Errorf("evaluating %s: %w", x.Source, err)
	}
	return out, nil
}

// Bool runs a condition.
func (x *Expr) Bool(env *Env) (bool, error) {
	v, err := x.Eval(env)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("evaluating %s: got %T, not true or false", x.Source, v)
	}
	return b, nil
}

// Env is what expressions see while a write is applied: record (the values
// after the write), old (before it; on create, every field unset), event,
// and, in flows, steps (what earlier steps produced). A field that is not
// set reads as the zero value of its type: "" for strings, 0 for numbers,
// false, and the zero time; changed("field") and blank("field") tell set from
// unset.
type Env struct {
	obj              *objects.Object
	event            string
	id               string
	created, updated time.Time
	rec              map[string]any // canonical values of the record
	old              map[string]any
	steps            map[string]any

	// What expressions see, built when an expression is first evaluated:
	// most writes to objects without rules never need them.
	vars   map[string]any
	record map[string]any
}

// NewEnv returns the environment of a write of event to a record of obj,
// with its canonical field values before (old, nil on create) and after.
func NewEnv(obj *objects.Object, event string, id string, created, updated time.Time, rec, old map[string]any) *Env {
	return &Env{obj: obj, event: event, id: id, created: created, updated: updated, rec: rec, old: old}
}

// load builds the variables expressions see.
func (e *Env) load() map[string]any {
	if e.vars != nil {
		return e.vars
	}
	obj, rec, old := e.obj, e.rec, e.old
	var oldView map[string]any
	switch {
	case old != nil:
		// An update changes a few fields: the record shares the others'
		// values with old rather than converting them twice.
		oldView = exprRecord(obj, e.id, e.created, e.updated, old)
		e.record = maps.Clone(oldView)
		for _, f := range obj.Fields {
			if v := rec[f.Name]; !objects.SameValue(v, old[f.Name]) {
				e.record[f.Name] = exprValue(f, v)
			}
		}
	case e.event == "create":
		e.record = exprRecord(obj, e.id, e.created, e.updated, rec)
		oldView = exprRecord(obj, e.id, e.created, e.updated, nil)
	default:
		e.record = exprRecord(obj, e.id, e.created, e.updated, rec)
		oldView = e.record
	}
	e.vars = map[string]any{
		"record":  e.record,
		"old":     oldView,
		"event":   e.event,
		"changed": e.changed,
		"blank":   e.blank,
	}
	if e.steps != nil {
		e.vars["steps"] = e.steps
	}
	return e.vars
}

// NewInboundEnv returns the environment of an inbound webhook's
// expressions: the JSON posted (payload), the request's headers (by lower
// case name, the first value) and its query parameters (the first value).
func NewInboundEnv(payload map[string]any, headers, query map[string]string) *Env {
	return &Env{vars: map[string]any{"payload": payload, "headers": headers, "query": query}}
}

// Set changes a field of the record being written, as a set action does.
func (e *Env) Set(field string, v any) {
	if v == nil {
		delete(e.rec, field)
	} else {
		e.rec[field] = v
	}
	if e.record == nil {
		return
	}
	if f, ok := e.obj.Field(field); ok {
		e.record[field] = exprValue(f, v)
	}
}

// Value returns the canonical value of a field of the record being written.
func (e *Env) Value(field string) any { return e.rec[field] }

// SetRecord sets the id and times of the record once it is stored.
func (e *Env) SetRecord(id string, created, updated time.Time) {
	e.id, e.created, e.updated = id, created, updated
	if e.record != nil {
		e.record["id"], e.record["created_at"], e.record["updated_at"] = id, created, updated
	}
}

// SwapSteps replaces the outputs of flow steps (nil for none) and returns
// the ones it replaces, so that a flow run from another sees only its own.
func (e *Env) SwapSteps(steps map[string]any) map[string]any {
	old := e.steps
	e.steps = steps
	if e.vars == nil {
		return old
	}
	if steps == nil {
		delete(e.vars, "steps")
	} else {
		e.vars["steps"] = steps
	}
	return old
}

// SetStep records what a flow step produced, for the steps after it.
func (e *Env) SetStep(name string, out map[string]any) {
	if e.steps == nil {
		e.steps = map[string]any{}
		if e.vars != nil {
			e.vars["steps"] = e.steps
		}
	}
	e.steps[name] = out
}

func (e *Env) changed(field string) bool {
	a, b := e.rec[field], e.old[field]
	return !objects.SameValue(a, b)
}

func (e *Env) blank(field string) bool {
	v, ok := e.rec[field]
	return !ok || v == nil || v == ""
}

// exprRecord is a record as expressions see it: every field, with its value
// in the form expressions compute with (see exprValue).
func exprRecord(obj *objects.Object, id string, created, updated time.Time, fields map[string]any) map[string]any {
	m := make(map[string]any, len(obj.Fields)+3)
	for _, f := range obj.Fields {
		m[f.Name] = exprValue(f, fields[f.Name])
	}
	m["id"], m["created_at"], m["updated_at"] = id, created, updated
	return m
}

// exprValue converts a canonical value to the form expressions use: int for
// integers and time.Time for dates, and the zero value for a value not set.
func exprValue(f *objects.Field, v any) any {
	switch f.Type.Kind() {
	case objects.KindString:
		s, _ := v.(string)
		switch f.Type.Name() {
		case "date":
			t, _ := time.Parse(time.DateOnly, s)
			return t
		case "datetime":
			t, _ := time.Parse(time.RFC3339Nano, s)
			return t
		}
		return s
	case objects.KindNumber:
		x, _ := v.(float64)
		return x
	case objects.KindInteger:
		x, _ := v.(int64)
		return int(x)
	case objects.KindBool:
		x, _ := v.(bool)
		return x
	}
	return v
}

// exprType is the type expressions see for a field.
func exprType(f *objects.Field) types.Type {
	switch f.Type.Kind() {
	case objects.KindString:
		if n := f.Type.Name(); n == "date" || n == "datetime" {
			return types.TypeOf(time.Time{})
		}
		return types.String
	case objects.KindNumber:
		return types.Float64
	case objects.KindInteger:
		return types.Int
	case objects.KindBool:
		return types.Bool
	}
	return types.Any
}

// recordType is the type of record and old for obj.
func recordType(obj *objects.Object) types.Map {
	m := types.Map{"id": types.String, "created_at": types.TypeOf(time.Time{}), "updated_at": types.TypeOf(time.Time{})}
	for _, f := range obj.Fields {
		m[f.Name] = exprType(f)
	}
	return m
}

// canonical converts the result of an expression to the canonical value of
// field f, checking it as a value a client sent would be; nil means unset.
// An empty string, which is how an unset field reads, leaves the field
// unset, and so does the zero time.
func canonical(f *objects.Field, v any) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		if x == "" && f.Type.Kind() == objects.KindString {
			return nil, nil
		}
	case time.Time:
		if x.IsZero() {
			return nil, nil
		}
		switch f.Type.Name() {
		case "date":
			v = x.UTC().Format(time.DateOnly)
		case "datetime":
			v = x.UTC().Format(time.RFC3339Nano)
		}
	case int:
		v = int64(x)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, errors.New("is not a finite number")
		}
	}
	if f.Type.Kind() == objects.KindJSON {
		v = objects.LiteralValue(v)
	}
	return f.Type.Check(v)
}

// functions are the helpers every expression may call, besides expr's own
// (upper, lower, trim, len, now, date, duration, and the rest).
var functions = []expr.Option{
	expr.Function("today", func(...any) (any, error) {
		return time.Now().UTC().Truncate(24 * time.Hour), nil
	}, new(func() time.Time)),
	expr.Function("days", func(p ...any) (any, error) {
		return time.Duration(p[0].(int)) * 24 * time.Hour, nil
	}, new(func(int) time.Duration)),
	expr.Function("days_between", func(p ...any) (any, error) {
		a, b := p[0].(time.Time), p[1].(time.Time)
		return int(math.Floor(b.Sub(a).Hours() / 24)), nil
	}, new(func(time.Time, time.Time) int)),
	expr.Timezone("UTC"),
	expr.MaxNodes(MaxExprNodes),
}

// A scope describes the names an expression can use, for type checking.
type scope struct {
	obj     *objects.Object
	steps   types.Map // nil outside flows
	inbound bool      // an inbound webhook's: payload, headers and query
}

func (s *scope) env() types.Map {
	if s.inbound {
		return inboundEnv
	}
	rt := recordType(s.obj)
	m := types.Map{
		"record":  rt,
		"old":     rt,
		"event":   types.String,
		"changed": types.TypeOf(func(string) bool { return false }),
		"blank":   types.TypeOf(func(string) bool { return false }),
	}
	if s.steps != nil {
		m["steps"] = s.steps
	}
	return m
}

// exprError is a problem in an expression, at a line and column of it
// (1-based), or at its start when col is 0.
type exprError struct {
	line, col int
	msg       string
}

// compileExpr compiles src in scope. want is the kind of value it must
// give: reflect.Bool for a condition, or reflect.Invalid for any.
func compileExpr(src string, sc *scope, want reflect.Kind) (*Expr, *exprError) {
	if strings.TrimSpace(src) == "" {
		return nil, &exprError{msg: "the expression is empty"}
	}
	if len(src) > maxExprSource {
		return nil, &exprError{msg: fmt.Sprintf("the expression is longer than %d characters", maxExprSource)}
	}
	opts := append([]expr.Option{expr.Env(sc.env())}, functions...)
	if want == reflect.Bool {
		opts = append(opts, expr.AsBool())
	}
	program, err := expr.Compile(src, opts...)
	if err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			msg := fe.Message
			if name, ok := strings.CutPrefix(msg, "unknown field "); ok {
				msg += decl.DidYouMean(name, append(sc.obj.FieldNames(), "id", "created_at", "updated_at"))
			}
			if fe.Line == 0 {
				return nil, &exprError{msg: msg}
			}
			return nil, &exprError{line: fe.Line, col: fe.Column + 1, msg: msg}
		}
		return nil, &exprError{msg: err.Error()}
	}
	if e := checkFieldNames(program, sc); e != nil {
		return nil, e
	}
	return &Expr{Source: src, program: program}, nil
}

// checkFieldNames checks that changed and blank are called with the name of
// a field of the object, in quotes, so that a misspelt name is found now.
func checkFieldNames(p *vm.Program, sc *scope) *exprError {
	var bad *exprError
	root := p.Node()
	ast.Walk(&root, visitor(func(n ast.Node) {
		call, ok := n.(*ast.CallNode)
		if !ok || bad != nil {
			return
		}
		id, ok := call.Callee.(*ast.IdentifierNode)
		if !ok || (id.Value != "changed" && id.Value != "blank") {
			return
		}
		loc := call.Location()
		arg, ok := call.Arguments[0].(*ast.StringNode)
		switch {
		case !ok:
			bad = &exprError{msg: id.Value + " takes the name of a field in quotes, such as " + id.Value + `("stage")`}
		default:
			if _, ok := sc.obj.Field(arg.Value); !ok {
				bad = &exprError{msg: fmt.Sprintf("%s(%q): %s has no field %s%s", id.Value, arg.Value, sc.obj.Name, arg.Value,
					decl.DidYouMean(arg.Value, sc.obj.FieldNames()))}
			}
		}
		if bad != nil {
			bad.line, bad.col = 1, loc.From+1
		}
	}))
	return bad
}

type visitor func(ast.Node)

func (v visitor) Visit(n *ast.Node) { v(*n) }

// resultFits reports whether an expression whose result has type t can give
// a value of field f. An expression whose type is not known (any) may fit;
// its value is checked when it runs.
func resultFits(t reflect.Type, f *objects.Field) bool {
	if t == nil || t.Kind() == reflect.Interface {
		return true
	}
	switch f.Type.Kind() {
	case objects.KindString:
		if n := f.Type.Name(); n == "date" || n == "datetime" {
			return t == reflect.TypeOf(time.Time{}) || t.Kind() == reflect.String
		}
		return t.Kind() == reflect.String
	case objects.KindNumber, objects.KindInteger:
		switch t.Kind() {
		case reflect.Int, reflect.Int64, reflect.Float64, reflect.Int32, reflect.Float32:
			return true
		}
		return false
	case objects.KindBool:
		return t.Kind() == reflect.Bool
	}
	return true
}
