package objects

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/objects/decl"
)

// A Field is one named, typed value of a record, with the settings that
// constrain it.
type Field struct {
	Name     string
	Label    string
	Type     FieldType
	Target   string         // for references: the API name of the object referred to
	Required bool           // every write must leave it set
	Unique   bool           // no two records of the object in a business share a value
	Values   []any          // the allowed values, in canonical form; nil allows any
	Min, Max *float64       // bounds: of the value for numbers, of the length for strings
	Pattern  *regexp.Regexp // for strings: the whole value must match
}

// FieldDecl is a field as declared in a schema file.
type FieldDecl struct {
	Name     string
	Type     string
	Label    string
	Object   string // reference target
	Required bool
	Unique   bool
	Values   []any // as written, before they are checked against the type
	Min, Max *float64
	Pattern  string
	Default  *yaml.Node // a literal, or an expression after "="; the rules package compiles it
	Pos      decl.Pos
}

var fieldKeys = []string{"type", "label", "object", "required", "unique", "values", "min", "max", "pattern", "default"}

// decodeField reads one field, or returns nil after recording why it cannot.
func decodeField(r *decl.Reader, name string, n *yaml.Node, path string) *FieldDecl {
	fd := &FieldDecl{Name: name, Pos: r.Pos(n)}
	switch n.Kind {
	case yaml.ScalarNode:
		fd.Type, _ = r.String(n, path)
		return fd
	case yaml.MappingNode:
	default:
		r.Errorf(n, path, "must be a type name or a mapping with a type")
		return nil
	}
	r.Mapping(n, path, fieldKeys, func(key string, v *yaml.Node, path string) {
		switch key {
		case "type":
			fd.Type, _ = r.String(v, path)
		case "label":
			fd.Label, _ = r.String(v, path)
		case "object":
			fd.Object, _ = r.String(v, path)
		case "required":
			fd.Required, _ = r.Bool(v, path)
		case "unique":
			fd.Unique, _ = r.Bool(v, path)
		case "values":
			r.Sequence(v, path, func(_ int, item *yaml.Node, path string) {
				if val, ok := r.Value(item, path); ok {
					fd.Values = append(fd.Values, val)
				}
			})
			if fd.Values == nil {
				fd.Values = []any{}
			}
		case "min", "max":
			if f, ok := r.Number(v, path); ok {
				if key == "min" {
					fd.Min = &f
				} else {
					fd.Max = &f
				}
			}
		case "pattern":
			fd.Pattern, _ = r.String(v, path)
		case "default":
			fd.Default = v
		}
	})
	return fd
}

// newField makes a field from its declaration, or reports what is wrong.
func newField(fd *FieldDecl, standard bool) (*Field, []string) {
	if !apiName.MatchString(fd.Name) || len(fd.Name) > MaxNameLen {
		return nil, []string{fmt.Sprintf("field name %q must be lower case letters, digits and underscores, start with a letter, and be at most %d long", fd.Name, MaxNameLen)}
	}
	if slices.Contains(ReservedFields, fd.Name) {
		return nil, []string{fd.Name + " is kept by the server on every record and cannot be declared"}
	}
	if fd.Type == "" {
		return nil, []string{"needs a type"}
	}
	t, ok := LookupFieldType(fd.Type)
	if !ok {
		names := FieldTypeNames()
		sort.Strings(names)
		if hint := decl.DidYouMean(fd.Type, names); hint != "" {
			return nil, []string{"unknown type " + fd.Type + hint}
		}
		return nil, []string{fmt.Sprintf("unknown type %s (the types are %s)", fd.Type, strings.Join(names, ", "))}
	}
	switch {
	case t.Name() == "reference" && fd.Object == "":
		return nil, []string{"a reference needs object: the API name of the object it refers to"}
	case t.Name() != "reference" && fd.Object != "":
		return nil, []string{"only a reference has an object"}
	}
	f := &Field{Name: fd.Name, Label: fd.Label, Type: t, Target: fd.Object}
	if f.Label == "" {
		f.Label = fd.Name
	}
	if msgs := f.applySettings(fd); len(msgs) > 0 {
		return nil, msgs
	}
	return f, nil
}

// refineField returns old with the settings of fd, a declaration of a field
// that exists already: a pack may constrain a field it did not declare, but
// not change its type.
func refineField(old *Field, fd *FieldDecl) (*Field, []string) {
	switch {
	case fd.Type != "" && fd.Type != old.Type.Name():
		return nil, []string{fmt.Sprintf("%s is already a %s field; its type cannot change", fd.Name, old.Type.Name())}
	case fd.Object != "" && fd.Object != old.Target:
		return nil, []string{fmt.Sprintf("%s already refers to %s", fd.Name, old.Target)}
	}
	f := *old
	if fd.Label != "" {
		f.Label = fd.Label
	}
	if msgs := f.applySettings(fd); len(msgs) > 0 {
		return nil, msgs
	}
	return &f, nil
}

// applySettings checks the settings of fd against the field's type and sets
// them.
func (f *Field) applySettings(fd *FieldDecl) []string {
	var msgs []string
	kind, name := f.Type.Kind(), f.Type.Name()
	isString := kind == KindString
	isNumber := kind == KindNumber || kind == KindInteger
	if fd.Required {
		f.Required = true
	}
	if fd.Unique {
		if kind == KindJSON || kind == KindBool || name == "text" {
			msgs = append(msgs, "a "+name+" field cannot be unique")
		}
		f.Unique = true
	}
	if fd.Values != nil {
		if kind == KindJSON || kind == KindBool || name == "reference" {
			msgs = append(msgs, "a "+name+" field cannot have a list of values")
		}
		if len(fd.Values) == 0 {
			msgs = append(msgs, "values must list at least one value")
		}
		f.Values = nil
		for _, v := range fd.Values {
			cv, err := f.Type.Check(LiteralValue(v))
			if err != nil {
				msgs = append(msgs, fmt.Sprintf("value %v %s", v, err))
				continue
			}
			f.Values = append(f.Values, cv)
		}
	}
	if fd.Min != nil || fd.Max != nil {
		if !isString && !isNumber {
			msgs = append(msgs, "only number and string fields have min and max")
		}
		if fd.Min != nil && fd.Max != nil && *fd.Min > *fd.Max {
			msgs = append(msgs, "min is above max")
		}
		if isString && (fd.Min != nil && (*fd.Min < 0 || *fd.Min != math.Trunc(*fd.Min)) || fd.Max != nil && (*fd.Max < 0 || *fd.Max != math.Trunc(*fd.Max))) {
			msgs = append(msgs, "min and max of a string field are lengths: whole numbers, not negative")
		}
		f.Min, f.Max = fd.Min, fd.Max
	}
	if fd.Pattern != "" {
		if !isString || name == "reference" {
			msgs = append(msgs, "only string fields have a pattern")
		}
		if _, err := regexp.Compile(fd.Pattern); err != nil {
			msgs = append(msgs, fmt.Sprintf("pattern %q: %v", fd.Pattern, strings.TrimPrefix(err.Error(), "error parsing regexp: ")))
		} else {
			f.Pattern = regexp.MustCompile(`^(?:` + fd.Pattern + `)$`)
		}
	}
	return msgs
}

// CheckConstraints checks a value in canonical form against the field's
// allowed values, bounds and pattern, and returns a *FieldError.
func (f *Field) CheckConstraints(v any) error {
	fail := func(format string, args ...any) error {
		return &FieldError{Field: f.Name, Code: CodeInvalidValue, Message: f.Name + " " + fmt.Sprintf(format, args...)}
	}
	if f.Values != nil && !slices.ContainsFunc(f.Values, func(a any) bool { return a == v }) {
		return fail("must be one of %s", f.listValues())
	}
	var n float64
	unit := ""
	switch x := v.(type) {
	case float64:
		n = x
	case int64:
		n = float64(x)
	case string:
		n, unit = float64(utf8.RuneCountInString(x)), " characters"
	default:
		return nil
	}
	if unit != "" && f.Pattern != nil && !f.Pattern.MatchString(v.(string)) {
		return fail("must match the pattern %s", strings.TrimSuffix(strings.TrimPrefix(f.Pattern.String(), "^(?:"), ")$"))
	}
	if f.Min != nil && n < *f.Min {
		if unit != "" {
			return fail("must be at least %s characters long", strconv.FormatFloat(*f.Min, 'f', -1, 64))
		}
		return fail("must be at least %s", strconv.FormatFloat(*f.Min, 'f', -1, 64))
	}
	if f.Max != nil && n > *f.Max {
		if unit != "" {
			return fail("must be at most %s characters long", strconv.FormatFloat(*f.Max, 'f', -1, 64))
		}
		return fail("must be at most %s", strconv.FormatFloat(*f.Max, 'f', -1, 64))
	}
	return nil
}

func (f *Field) listValues() string {
	parts := make([]string, len(f.Values))
	for i, v := range f.Values {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", ")
}

// UniqueKey is the form in which a value of a unique field is compared:
// email addresses are compared without regard to case, numbers by value.
func (f *Field) UniqueKey(v any) string {
	switch x := v.(type) {
	case string:
		if f.Type.Name() == "email" {
			return strings.ToLower(x)
		}
		return x
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case int64:
		return strconv.FormatFloat(float64(x), 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// LiteralValue turns a value decoded from YAML into the form a value decoded
// from a JSON request body has, so that field types can check it: numbers
// become json.Number, times text.
func LiteralValue(v any) any {
	switch x := v.(type) {
	case int:
		return json.Number(strconv.Itoa(x))
	case int64:
		return json.Number(strconv.FormatInt(x, 10))
	case uint64:
		return json.Number(strconv.FormatUint(x, 10))
	case float64:
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64))
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = LiteralValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = LiteralValue(e)
		}
		return out
	case time.Time:
		// YAML reads an unquoted 2026-03-10 as a time: give it back as text.
		if x.Equal(x.Truncate(24*time.Hour)) && x.Location() == time.UTC {
			return x.Format(time.DateOnly)
		}
		return x.Format(time.RFC3339Nano)
	}
	return v
}
