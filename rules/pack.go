// Package rules reads and compiles rule packs: files of data in which a
// business declares its objects, validation rules, automations, flows and
// tests. Every expression in a pack is compiled once, with expr, against a
// typed environment built from the schema, so that a misspelt field or a
// type mismatch is an error when the pack is applied, never when a request
// runs. A pack with any error is refused whole, and every error names the
// file, the rule, the line and column, and what is wrong.
//
// The package is pure: it reads bytes it is given and returns compiled
// rules. The engine runs them.
package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"sort"

	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/decl"
)

// A File is one file of a pack.
type File struct {
	// Name is the file's name within its pack (leads.yaml), which is stored
	// with the pack's revisions and goes into its hash.
	Name string
	// Path, when set, is where the file was read from, as the operator
	// wrote it; messages use it in place of Name.
	Path string
	Data []byte
}

// Display is the name messages give the file.
func (f File) Display() string {
	if f.Path != "" {
		return f.Path
	}
	return f.Name
}

// A Pack is a parsed rule pack: one or more files with the same pack name.
type Pack struct {
	Name        string
	Files       []File
	Hash        string // of the files' names and contents
	Objects     []*objects.ObjectDecl
	Validations []*ValidationDecl
	Automations []*AutomationDecl
	Flows       []*FlowDecl
	Webhooks    []*WebhookDecl
	Inbound     []*InboundDecl
	Tests       []*TestDecl
}

// The sections a pack file may have.
var sections = []string{"pack", "objects", "validations", "automations", "flows", "webhooks", "inbound", "tests"}

// PackName is the form of a pack's name.
var PackName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidationDecl is a validation rule as written.
type ValidationDecl struct {
	Name   string
	Object string
	On     []string
	When   *yaml.Node
	Error  string
	Field  string
	At     map[string]decl.Pos // where each key\'s value is
	Pos    decl.Pos
	Path   string
}

// AutomationDecl is an automation as written.
type AutomationDecl struct {
	Name    string
	Object  string
	On      []string
	When    *yaml.Node
	Actions []*ActionDecl
	At      map[string]decl.Pos // where each key\'s value is
	Pos     decl.Pos
	Path    string
}

// ActionDecl is one action as written: a mapping with one key, the action's
// id, whose value is its configuration.
type ActionDecl struct {
	ID     string
	Config *yaml.Node
	Pos    decl.Pos
	Path   string
}

// FlowDecl is a flow as written.
type FlowDecl struct {
	Name   string
	Object string
	Steps  []*StepDecl
	At     map[string]decl.Pos // where each key\'s value is
	Pos    decl.Pos
	Path   string
}

// StepDecl is one step of a flow: an action, or a condition with branches.
type StepDecl struct {
	Name   string
	Action *ActionDecl
	If     *yaml.Node
	Then   []*StepDecl
	Else   []*StepDecl
	Pos    decl.Pos
	Path   string
}

// TestDecl is a test case a pack carries for itself.
type TestDecl struct {
	Name   string
	Object string
	Op     string     // create, update or delete
	Record *yaml.Node // the fields sent
	Old    *yaml.Node // the record as it is before an update or delete
	Expect ExpectDecl
	At     map[string]decl.Pos // where each key\'s value is
	Pos    decl.Pos
	Path   string
}

// ExpectDecl is what a test expects.
type ExpectDecl struct {
	Status  int        // 0: success
	Field   string     // the field a refusal names
	Error   string     // text the refusal's message contains
	Fields  *yaml.Node // values the stored record must have
	Created map[string]int
}

// Parse reads the files of one pack. The pack's name comes from the pack key
// of its files, which must agree, or else is defaultName.
func Parse(defaultName string, files []File) (*Pack, decl.Errors) {
	p := &Pack{Files: files}
	var errs decl.Errors
	names := map[string]decl.Pos{}
	sort.Slice(p.Files, func(i, j int) bool { return p.Files[i].Name < p.Files[j].Name })
	h := sha256.New()
	for _, f := range p.Files {
		h.Write([]byte(f.Name))
		h.Write([]byte{0})
		h.Write(f.Data)
		h.Write([]byte{0})
		root, err := decl.Parse(f.Display(), f.Data)
		if err != nil {
			errs = append(errs, err.(decl.Errors)...)
			continue
		}
		r := &decl.Reader{File: f.Display()}
		r.Mapping(root, "", sections, func(key string, v *yaml.Node, path string) {
			switch key {
			case "pack":
				if name, ok := r.String(v, path); ok {
					names[name] = r.Pos(v)
				}
			case "objects":
				p.Objects = append(p.Objects, objects.DecodeObjects(r, v, path)...)
			case "validations":
				r.Sequence(v, path, func(_ int, item *yaml.Node, path string) {
					p.Validations = append(p.Validations, decodeValidation(r, item, path))
				})
			case "automations":
				r.Sequence(v, path, func(_ int, item *yaml.Node, path string) {
					p.Automations = append(p.Automations, decodeAutomation(r, item, path))
				})
			case "flows":
				r.Sequence(v, path, func(_ int, item *yaml.Node, path string) {
					p.Flows = append(p.Flows, decodeFlow(r, item, path))
				})
			case "tests":
				r.Sequence(v, path, func(_ int, item *yaml.Node, path string) {
					p.Tests = append(p.Tests, decodeTest(r, item, path))
				})
			case "webhooks":
				r.Sequence(v, path, func(_ int, item *yaml.Node, path string) {
					p.Webhooks = append(p.Webhooks, decodeWebhook(r, item, path))
				})
			case "inbound":
				r.Sequence(v, path, func(_ int, item *yaml.Node, path string) {
					p.Inbound = append(p.Inbound, decodeInbound(r, item, path))
				})
			}
		})
		errs = append(errs, r.Errs...)
	}
	p.Hash = hex.EncodeToString(h.Sum(nil))
	p.Name = defaultName
	switch len(names) {
	case 0:
	case 1:
		for n := range names {
			p.Name = n
		}
	default:
		for n, pos := range names {
			errs = append(errs, &decl.Error{Pos: pos, Path: "pack", Msg: "the files of one pack name it differently: " + n})
		}
	}
	if !PackName.MatchString(p.Name) {
		pos := decl.Pos{File: defaultName}
		if len(p.Files) > 0 {
			pos.File = p.Files[0].Display()
		}
		errs = append(errs, &decl.Error{Pos: pos, Path: "pack",
			Msg: "pack name " + quote(p.Name) + " must be lower case letters, digits, - and _, starting with a letter or digit"})
	}
	errs.Sort()
	return p, errs
}

func quote(s string) string { return `"` + s + `"` }

// at returns where key's value is, or else def: the rule's own position.
func at(m map[string]decl.Pos, key string, def decl.Pos) decl.Pos {
	if p, ok := m[key]; ok {
		return p
	}
	return def
}

// ruleKeys are the keys of a validation rule.
var validationKeys = []string{"name", "object", "on", "when", "error", "field"}

func decodeValidation(r *decl.Reader, n *yaml.Node, path string) *ValidationDecl {
	v := &ValidationDecl{Pos: r.Pos(n), Path: path, At: map[string]decl.Pos{}}
	r.Mapping(n, path, validationKeys, func(key string, val *yaml.Node, path string) {
		v.At[key] = r.Pos(val)
		switch key {
		case "name":
			v.Name, _ = r.String(val, path)
		case "object":
			v.Object, _ = r.String(val, path)
		case "on":
			v.On = events(r, val, path)
		case "when":
			v.When = val
		case "error":
			v.Error, _ = r.String(val, path)
		case "field":
			v.Field, _ = r.String(val, path)
		}
	})
	return v
}

var automationKeys = []string{"name", "object", "on", "when", "actions"}

func decodeAutomation(r *decl.Reader, n *yaml.Node, path string) *AutomationDecl {
	a := &AutomationDecl{Pos: r.Pos(n), Path: path, At: map[string]decl.Pos{}}
	r.Mapping(n, path, automationKeys, func(key string, val *yaml.Node, path string) {
		a.At[key] = r.Pos(val)
		switch key {
		case "name":
			a.Name, _ = r.String(val, path)
		case "object":
			a.Object, _ = r.String(val, path)
		case "on":
			a.On = events(r, val, path)
		case "when":
			a.When = val
		case "actions":
			r.Sequence(val, path, func(_ int, item *yaml.Node, path string) {
				if ad := decodeAction(r, item, path); ad != nil {
					a.Actions = append(a.Actions, ad)
				}
			})
		}
	})
	return a
}

// events reads on: one event or a list of them.
func events(r *decl.Reader, n *yaml.Node, path string) []string {
	if n.Kind == yaml.SequenceNode {
		var out []string
		r.Sequence(n, path, func(_ int, item *yaml.Node, path string) {
			if s, ok := r.String(item, path); ok {
				out = append(out, s)
			}
		})
		return out
	}
	if s, ok := r.String(n, path); ok {
		return []string{s}
	}
	return nil
}

// decodeAction reads an action: a mapping with exactly one key.
func decodeAction(r *decl.Reader, n *yaml.Node, path string) *ActionDecl {
	if n.Kind != yaml.MappingNode || len(n.Content) != 2 {
		r.Errorf(n, path, "an action is a mapping with one key, the action, such as create: {object: tasks, fields: {...}}")
		return nil
	}
	id, ok := r.String(n.Content[0], path)
	if !ok {
		return nil
	}
	return &ActionDecl{ID: id, Config: n.Content[1], Pos: r.Pos(n.Content[0]), Path: decl.Join(path, id)}
}

var flowKeys = []string{"name", "object", "steps"}

func decodeFlow(r *decl.Reader, n *yaml.Node, path string) *FlowDecl {
	f := &FlowDecl{Pos: r.Pos(n), Path: path, At: map[string]decl.Pos{}}
	r.Mapping(n, path, flowKeys, func(key string, val *yaml.Node, path string) {
		f.At[key] = r.Pos(val)
		switch key {
		case "name":
			f.Name, _ = r.String(val, path)
		case "object":
			f.Object, _ = r.String(val, path)
		case "steps":
			f.Steps = decodeSteps(r, val, path)
		}
	})
	return f
}

func decodeSteps(r *decl.Reader, n *yaml.Node, path string) []*StepDecl {
	var steps []*StepDecl
	r.Sequence(n, path, func(_ int, item *yaml.Node, path string) {
		s := &StepDecl{Pos: r.Pos(item), Path: path}
		if item.Kind != yaml.MappingNode {
			r.Errorf(item, path, "a step is a mapping: an action, or if with then and else")
			return
		}
		// Every key but name, if, then and else is the step's action.
		action := &yaml.Node{Kind: yaml.MappingNode}
		for i := 0; i+1 < len(item.Content); i += 2 {
			k, v := item.Content[i], item.Content[i+1]
			kpath := decl.Join(path, k.Value)
			switch k.Value {
			case "name":
				s.Name, _ = r.String(v, kpath)
			case "if":
				s.If = v
			case "then":
				s.Then = decodeSteps(r, v, kpath)
			case "else":
				s.Else = decodeSteps(r, v, kpath)
			default:
				action.Content = append(action.Content, k, v)
			}
		}
		switch {
		case s.If != nil && len(action.Content) > 0:
			for i := 0; i < len(action.Content); i += 2 {
				k := action.Content[i]
				r.Errorf(k, path, "unknown key %s in a step with if%s (a step is either an action or an if)", k.Value,
					decl.DidYouMean(k.Value, []string{"name", "if", "then", "else"}))
			}
		case s.If == nil && (s.Then != nil || s.Else != nil):
			r.Errorf(item, path, "then and else belong to an if")
		case s.If == nil && len(action.Content) == 0:
			r.Errorf(item, path, "a step needs an action or an if")
		case s.If == nil:
			action.Line, action.Column = action.Content[0].Line, action.Content[0].Column
			s.Action = decodeAction(r, action, path)
		}
		steps = append(steps, s)
	})
	return steps
}

var (
	testKeys   = []string{"name", "object", "create", "update", "delete", "old", "expect"}
	expectKeys = []string{"status", "field", "error", "fields", "created"}
)

func decodeTest(r *decl.Reader, n *yaml.Node, path string) *TestDecl {
	t := &TestDecl{Pos: r.Pos(n), Path: path, At: map[string]decl.Pos{}}
	r.Mapping(n, path, testKeys, func(key string, val *yaml.Node, path string) {
		t.At[key] = r.Pos(val)
		switch key {
		case "name":
			t.Name, _ = r.String(val, path)
		case "object":
			t.Object, _ = r.String(val, path)
		case "create", "update", "delete":
			if t.Op != "" {
				r.Errorf(val, path, "a test makes one write: create, update or delete")
			}
			t.Op, t.Record = key, val
		case "old":
			t.Old = val
		case "expect":
			r.Mapping(val, path, expectKeys, func(key string, val *yaml.Node, path string) {
				switch key {
				case "status":
					if f, ok := r.Number(val, path); ok {
						t.Expect.Status = int(f)
					}
				case "field":
					t.Expect.Field, _ = r.String(val, path)
				case "error":
					t.Expect.Error, _ = r.String(val, path)
				case "fields":
					t.Expect.Fields = val
				case "created":
					t.Expect.Created = map[string]int{}
					r.Mapping(val, path, nil, func(object string, val *yaml.Node, path string) {
						if f, ok := r.Number(val, path); ok {
							t.Expect.Created[object] = int(f)
						}
					})
				}
			})
		}
	})
	if t.Op == "" {
		r.Errorf(n, path, "a test needs a write: create, update or delete, with the fields sent")
	}
	return t
}
