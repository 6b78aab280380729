package rules

import (
	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/decl"
)

// A Ruleset is the compiled union of a business's active packs: its schema
// and its rules. It is immutable and safe for concurrent use.
type Ruleset struct {
	Schema  *objects.Schema
	Packs   []PackInfo
	Tests   []*Test
	objects map[string]*ObjectRules
	flows   map[string]*Flow
	none    ObjectRules

	subscriptions []*Subscription
	subscribed    map[string][]*Subscription // by object.event
	inbound       map[string]*Inbound
	endpoints     map[string]bool
}

// PackInfo names a pack a ruleset was compiled from.
type PackInfo struct {
	Name string
	Hash string
}

// For returns the rules of an object; an object without rules has empty ones.
func (rs *Ruleset) For(object string) *ObjectRules {
	if r, ok := rs.objects[object]; ok {
		return r
	}
	return &rs.none
}

// Flow returns a flow by name.
func (rs *Ruleset) Flow(name string) (*Flow, bool) {
	f, ok := rs.flows[name]
	return f, ok
}

// Rules counts the validations, automations and flows.
func (rs *Ruleset) Rules() int {
	n := len(rs.flows)
	autos := map[string]bool{} // an automation on two events is one rule
	for _, r := range rs.objects {
		n += len(r.Validations)
		for _, m := range []map[string][]*Automation{r.Before, r.After} {
			for _, as := range m {
				for _, a := range as {
					autos[a.Name] = true
				}
			}
		}
	}
	return n + len(autos)
}

// ObjectRules are the rules of one object, in the order they run.
type ObjectRules struct {
	Defaults    []*Default
	Validations []*Validation
	// Before and After hold the automations of each event (create, update,
	// delete) that run before the write (set actions) and after it.
	Before map[string][]*Automation
	After  map[string][]*Automation
}

// A Default is the value a field takes on create when it is not set.
type Default struct {
	Field *objects.Field
	Value *Value
}

// A Validation blocks a write when its condition is true.
type Validation struct {
	Name  string
	On    map[string]bool // create, update
	When  *Expr
	Error string
	Field string
	Pos   decl.Pos
}

// An Automation runs its actions when its object is written and its
// condition, if any, holds.
type Automation struct {
	Name    string
	Object  string
	Event   string
	When    *Expr // nil: always
	Actions []Action
	Pos     decl.Pos
}

// A Flow is a named procedure of ordered steps, started by a run action.
type Flow struct {
	Name   string
	Object string
	Steps  []*Step
	Pos    decl.Pos
}

// A Step is an action, or a condition with the steps of each branch.
type Step struct {
	Name   string
	Action Action
	If     *Expr
	Then   []*Step
	Else   []*Step
}

// Phase is when an action runs in a write.
type Phase int

const (
	// BeforeSave actions change the record being written before it is
	// checked and saved.
	BeforeSave Phase = iota
	// AfterSave actions run after the record is saved, in the same
	// transaction.
	AfterSave
)

// An Action is a compiled action. The engine, which registers the factories
// that compile actions, runs them; this package only needs to know when.
type Action interface {
	Phase() Phase
}

// An Outputter is an action that produces values later flow steps can read
// as steps.<name>.
type Outputter interface {
	Output() map[string]Kind
}

// Kind is the type of a value an action outputs.
type Kind int

const (
	KindString Kind = iota
	KindNumber
	KindBool
)

// An ActionFactory compiles an action's configuration. It reports problems
// through c and returns nil when there were any.
type ActionFactory func(c *ActionCompiler, config *yaml.Node, path string) Action

// A FieldValue is the value an action gives a field.
type FieldValue struct {
	Field *objects.Field
	Value *Value
}

// A Value is a literal, or an expression written after "=".
type Value struct {
	Field *objects.Field
	Lit   any // canonical, when Expr is nil; nil means unset
	Expr  *Expr
}

// Eval returns the value, in canonical form for its field; nil means unset.
func (v *Value) Eval(env *Env) (any, error) {
	if v.Expr == nil {
		return v.Lit, nil
	}
	out, err := v.Expr.Eval(env)
	if err != nil {
		return nil, err
	}
	cv, err := canonical(v.Field, out)
	if err != nil {
		return nil, &objects.FieldError{Field: v.Field.Name, Code: objects.CodeInvalidValue,
			Message: v.Field.Name + " " + err.Error() + " (from " + v.Expr.Source + ")"}
	}
	return cv, nil
}

// A Test is a test case of a pack.
type Test struct {
	Pack   string
	Name   string
	Object string
	Op     string
	Record map[string]any // the fields sent, as a client sends them
	Old    map[string]any // canonical fields of the record before an update or delete
	Expect Expect
	Pos    decl.Pos
}

// Expect is what a test expects.
type Expect struct {
	Status  int
	Field   string
	Error   string
	Fields  map[string]any // canonical
	Created map[string]int
}

// A PayloadValue is one member of a webhook's body: a literal, or an
// expression written after "=".
type PayloadValue struct {
	Name string
	Lit  any
	Expr *Expr
}

// Eval returns the member's value. Dates read by expressions go out as
// RFC 3339 text.
func (v *PayloadValue) Eval(env *Env) (any, error) {
	if v.Expr == nil {
		return v.Lit, nil
	}
	return v.Expr.Eval(env)
}
