package objects

import (
	_ "embed"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/objects/decl"
)

// A Schema is the set of objects one business can use: the standard objects
// and, from its rule packs, custom objects and extra fields. A Schema is
// immutable once built and safe for concurrent use.
type Schema struct {
	objects map[string]*Object
	names   []string
}

// Object returns the object with the given API name.
func (s *Schema) Object(name string) (*Object, bool) {
	o, ok := s.objects[name]
	return o, ok
}

// Names returns the API names of all objects, sorted.
func (s *Schema) Names() []string { return s.names }

// An Object is a kind of record: contacts, deals, or a custom object.
type Object struct {
	Name     string // API name, the path segment in /api/v1/<name>
	Label    string
	Standard bool // one of the eleven objects every business has
	Fields   []*Field

	byName map[string]*Field
	names  []string
}

// Field returns the field with the given name.
func (o *Object) Field(name string) (*Field, bool) {
	f, ok := o.byName[name]
	return f, ok
}

// FieldNames returns the names of the object's fields in declaration order.
func (o *Object) FieldNames() []string { return o.names }

// ReservedFields are kept by the server on every record; clients cannot
// write them and schemas cannot declare them.
var ReservedFields = []string{"id", "created_at", "updated_at"}

// ObjectDecl is an object as declared in a schema file: the standard objects
// file, or the objects section of a rule pack.
type ObjectDecl struct {
	Name   string
	Label  string
	Fields []*FieldDecl
	Pos    decl.Pos
}

var objectKeys = []string{"label", "fields"}

// DecodeObjects reads an objects section: a mapping of API names to objects,
// each with an optional label and a mapping of field names to fields. A field
// is a type name ("email") or a mapping with its type and settings.
func DecodeObjects(r *decl.Reader, n *yaml.Node, path string) []*ObjectDecl {
	var out []*ObjectDecl
	r.Mapping(n, path, nil, func(name string, v *yaml.Node, path string) {
		od := &ObjectDecl{Name: name, Pos: r.Pos(v)}
		r.Mapping(v, path, objectKeys, func(key string, v *yaml.Node, path string) {
			switch key {
			case "label":
				od.Label, _ = r.String(v, path)
			case "fields":
				r.Mapping(v, path, nil, func(fname string, v *yaml.Node, path string) {
					if fd := decodeField(r, fname, v, path); fd != nil {
						od.Fields = append(od.Fields, fd)
					}
				})
			}
		})
		out = append(out, od)
	})
	return out
}

var apiName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// MaxNameLen bounds the length of object and field names.
const MaxNameLen = 63

// Extend returns a new schema: base (which may be nil) with the declared
// objects added. Declaring an object that base has adds fields to it, and
// declaring a field it has refines that field's settings (its allowed values,
// say) without changing its type. The objects added are standard ones when
// standard is true. Every problem is reported, each at the position of its
// declaration; one object or field declared twice, in one pack or in two, is
// a problem.
func Extend(base *Schema, decls []*ObjectDecl, standard bool) (*Schema, decl.Errors) {
	var errs decl.Errors
	fail := func(pos decl.Pos, path, format string, args ...any) {
		errs = append(errs, &decl.Error{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	s := &Schema{objects: map[string]*Object{}}
	if base != nil {
		for name, o := range base.objects {
			s.objects[name] = o
		}
	}
	declared := map[string]map[string]bool{} // object → fields declared by decls
	for _, od := range decls {
		path := decl.Join("objects", od.Name)
		o, exists := s.objects[od.Name]
		switch {
		case exists:
			if od.Label != "" && od.Label != o.Label {
				fail(od.Pos, path, "cannot relabel %s, which is already declared", od.Name)
			}
			o = o.clone()
		case !apiName.MatchString(od.Name) || len(od.Name) > MaxNameLen:
			fail(od.Pos, path, "object name %q must be lower case letters, digits and underscores, start with a letter, and be at most %d long", od.Name, MaxNameLen)
			continue
		default:
			o = &Object{Name: od.Name, Label: od.Label, Standard: standard, byName: map[string]*Field{}}
			if o.Label == "" {
				o.Label = od.Name
			}
		}
		if declared[o.Name] == nil {
			declared[o.Name] = map[string]bool{}
		}
		for _, fd := range od.Fields {
			fpath := decl.Join(decl.Join(path, "fields"), fd.Name)
			if declared[o.Name][fd.Name] {
				fail(fd.Pos, fpath, "field %s of %s is declared twice", fd.Name, o.Name)
				continue
			}
			declared[o.Name][fd.Name] = true
			if old, ok := o.byName[fd.Name]; ok {
				f, msgs := refineField(old, fd)
				for _, m := range msgs {
					fail(fd.Pos, fpath, "%s", m)
				}
				if f != nil {
					o.Fields[slices.Index(o.Fields, old)] = f
					o.byName[f.Name] = f
				}
				continue
			}
			f, msgs := newField(fd, standard)
			for _, m := range msgs {
				fail(fd.Pos, fpath, "%s", m)
			}
			if f == nil {
				continue
			}
			o.Fields = append(o.Fields, f)
			o.byName[f.Name] = f
			o.names = append(o.names, f.Name)
		}
		s.objects[o.Name] = o
	}
	for _, od := range decls {
		for _, fd := range od.Fields {
			if fd.Object != "" && s.objects[fd.Object] == nil {
				fail(fd.Pos, decl.Join(decl.Join(decl.Join("objects", od.Name), "fields"), fd.Name),
					"references unknown object %s%s", fd.Object, decl.DidYouMean(fd.Object, s.sortedNames()))
			}
		}
	}
	s.names = s.sortedNames()
	return s, errs
}

func (o *Object) clone() *Object {
	c := *o
	c.Fields = slices.Clone(o.Fields)
	c.names = slices.Clone(o.names)
	c.byName = make(map[string]*Field, len(o.byName))
	for k, v := range o.byName {
		c.byName[k] = v
	}
	return &c
}

func (s *Schema) sortedNames() []string {
	names := make([]string, 0, len(s.objects))
	for n := range s.objects {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

//go:embed standard.yaml
var standardYAML []byte

var standard = sync.OnceValues(func() (*Schema, error) {
	root, err := decl.Parse("standard.yaml", standardYAML)
	if err != nil {
		return nil, err
	}
	r := &decl.Reader{File: "standard.yaml"}
	var decls []*ObjectDecl
	r.Mapping(root, "", []string{"objects"}, func(_ string, v *yaml.Node, path string) {
		decls = DecodeObjects(r, v, path)
	})
	if err := r.Errs.Err(); err != nil {
		return nil, err
	}
	s, errs := Extend(nil, decls, true)
	return s, errs.Err()
})

// Standard returns the schema of the eleven standard objects, declared in
// standard.yaml.
func Standard() *Schema {
	s, err := standard()
	if err != nil {
		panic("objects: standard.yaml: " + err.Error())
	}
	return s
}
