// Command crmd-slug is crmd with one action of its own, slug, to show how
// actions plug in: a type with a Phase and a Run, a factory that compiles
// its configuration when a pack is applied, and a registration from init.
//
//	go build -o crmd-slug ./examples/custom-action
//	./crmd-slug pack test examples/custom-action/testdata
//
// A pack then writes:
//
//   - slug: {field: website, from: = record.name}
package main

import (
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/cmd/crmd/cli"
	"github.com/crmd/crmd/engine"
	_ "github.com/crmd/crmd/engine/actions" // the built-in actions
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/rules"
)

func init() { engine.RegisterAction("slug", newSlug) }

// Slug sets a field of the record being written to a URL slug of a value.
type Slug struct {
	field string
	from  *rules.Value
}

func newSlug(c *rules.ActionCompiler, config *yaml.Node, path string) engine.Action {
	s := &Slug{}
	text, _ := objects.LookupFieldType("text")
	c.Mapping(config, path, []string{"field", "from"}, func(key string, v *yaml.Node, path string) {
		switch key {
		case "field":
			if name, ok := c.String(v, path); ok {
				if _, has := c.Object.Field(name); !has {
					c.Errorf(v, path, "%s has no field %s", c.Object.Name, name)
				}
				s.field = name
			}
		case "from":
			s.from = c.Value(v, path, &objects.Field{Name: "from", Type: text})
		}
	})
	if s.field == "" || s.from == nil {
		c.Errorf(config, path, "slug needs field and from")
		return nil
	}
	return s
}

// Phase is before the save: slug changes the record being written.
func (*Slug) Phase() rules.Phase { return rules.BeforeSave }

var notSlug = regexp.MustCompile(`[^a-z0-9]+`)

// Run sets the field.
func (s *Slug) Run(r *engine.Run) error {
	v, err := s.from.Eval(r.Env)
	if err != nil {
		return err
	}
	text, _ := v.(string)
	return r.Set(s.field, strings.Trim(notSlug.ReplaceAllString(strings.ToLower(text), "-"), "-"))
}

var _ engine.Action = (*Slug)(nil)

func main() { cli.Main() }
