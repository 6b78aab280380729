package actions

import (
	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/rules"
)

func init() { engine.RegisterAction("set", newSet) }

// Set changes fields of the record being written, before it is checked and
// saved:
//
//   - set:
//     status: new
//     due_date: = today() + days(2)
type Set struct {
	values []*rules.FieldValue
}

func newSet(c *rules.ActionCompiler, config *yaml.Node, path string) engine.Action {
	values := c.Values(config, path, c.Object)
	if len(values) == 0 {
		c.Errorf(config, path, "set needs at least one field")
		return nil
	}
	return &Set{values: values}
}

// Phase is before the save.
func (*Set) Phase() rules.Phase { return rules.BeforeSave }

// Run sets the fields, each value computed before any is set.
func (s *Set) Run(r *engine.Run) error {
	vals, err := eval(r.Env, s.values)
	if err != nil {
		return err
	}
	for _, fv := range s.values {
		if err := r.Set(fv.Field.Name, vals[fv.Field.Name]); err != nil {
			return err
		}
	}
	return nil
}

var _ engine.Action = (*Set)(nil)
