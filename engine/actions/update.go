package actions

import (
	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/rules"
)

func init() { engine.RegisterAction("update", newUpdate) }

// Update changes fields of another record, through the write path with that
// object's rules: the record a reference field of the record being written
// points to, or, in a flow, a record given by object and id:
//
//   - update:
//     reference: company_id
//     fields: {status: customer}
//   - update:
//     object: tasks
//     id: = steps.follow_up.id
//     fields: {priority: high}
//
// When the reference is not set, there is nothing to update and the action
// does nothing.
type Update struct {
	reference string
	object    *objects.Object
	id        *rules.Value
	values    []*rules.FieldValue
}

func newUpdate(c *rules.ActionCompiler, config *yaml.Node, path string) engine.Action {
	a := &Update{}
	var fields, idNode *yaml.Node
	c.Mapping(config, path, []string{"reference", "object", "id", "fields"}, func(key string, v *yaml.Node, path string) {
		switch key {
		case "reference":
			name, ok := c.String(v, path)
			if !ok {
				return
			}
			f, has := c.Object.Field(name)
			if !has || f.Target == "" {
				c.Errorf(v, path, "%s is not a reference field of %s", name, c.Object.Name)
				return
			}
			a.reference = name
			a.object, _ = c.Schema.Object(f.Target)
		case "object":
			if name, ok := c.String(v, path); ok {
				a.object, _ = c.LookupObject(v, path, name)
			}
		case "id":
			idNode = v
		case "fields":
			fields = v
		}
	})
	switch {
	case a.reference != "" && idNode != nil:
		c.Errorf(config, path, "update takes either reference, or object and id")
		return nil
	case a.reference == "" && (idNode == nil || a.object == nil):
		c.Errorf(config, path, "update needs reference: a reference field, or object and id: = an expression giving the id")
		return nil
	case fields == nil:
		c.Errorf(config, path, "update needs fields: the fields to change")
		return nil
	}
	if idNode != nil {
		ref, _ := objects.LookupFieldType("reference")
		if a.id = c.Value(idNode, path+".id", &objects.Field{Name: "id", Type: ref, Target: a.object.Name}); a.id == nil {
			return nil
		}
	}
	a.values = c.Values(fields, path+".fields", a.object)
	return a
}

// Phase is after the save.
func (*Update) Phase() rules.Phase { return rules.AfterSave }

// Run updates the record, when there is one to update.
func (a *Update) Run(r *engine.Run) error {
	var id string
	if a.reference != "" {
		id, _ = r.Env.Value(a.reference).(string)
	} else {
		v, err := a.id.Eval(r.Env)
		if err != nil {
			return err
		}
		id, _ = v.(string)
	}
	if id == "" {
		return nil
	}
	fields, err := eval(r.Env, a.values)
	if err != nil {
		return err
	}
	_, err = r.Update(a.object.Name, id, fields)
	return err
}

var _ engine.Action = (*Update)(nil)
