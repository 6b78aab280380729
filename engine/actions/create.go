package actions

import (
	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/rules"
)

func init() { engine.RegisterAction("create", newCreate) }

// Create creates a record of any object, through the write path with that
// object's rules. In a flow, a named step's id is steps.<name>.id:
//
//   - create:
//     object: tasks
//     fields:
//     name: = "Call " + record.name
//     lead_id: = record.id
type Create struct {
	object *objects.Object
	values []*rules.FieldValue
}

func newCreate(c *rules.ActionCompiler, config *yaml.Node, path string) engine.Action {
	a := &Create{}
	var fields *yaml.Node
	c.Mapping(config, path, []string{"object", "fields"}, func(key string, v *yaml.Node, path string) {
		switch key {
		case "object":
			if name, ok := c.String(v, path); ok {
				a.object, _ = c.LookupObject(v, path, name)
			}
		case "fields":
			fields = v
		}
	})
	if a.object == nil {
		c.Errorf(config, path, "create needs object: the object of the record to create")
		return nil
	}
	if fields != nil {
		a.values = c.Values(fields, path+".fields", a.object)
	}
	return a
}

// Phase is after the save.
func (*Create) Phase() rules.Phase { return rules.AfterSave }

// Output is the new record's id.
func (*Create) Output() map[string]rules.Kind { return map[string]rules.Kind{"id": rules.KindString} }

// Run creates the record.
func (a *Create) Run(r *engine.Run) error {
	fields, err := eval(r.Env, a.values)
	if err != nil {
		return err
	}
	rec, err := r.Create(a.object.Name, fields)
	if err != nil {
		return err
	}
	r.Output(map[string]any{"id": rec.ID})
	return nil
}

var (
	_ engine.Action   = (*Create)(nil)
	_ rules.Outputter = (*Create)(nil)
)
