// Package actions holds crmd's built-in actions: set, create, update and
// run. Each registers itself with the engine from init; a binary gets them
// by importing this package, as cmd/crmd does.
package actions

import (
	"github.com/crmd/crmd/rules"
)

// eval evaluates values and returns them by field name, canonical, with nil
// for a value to clear.
func eval(env *rules.Env, values []*rules.FieldValue) (map[string]any, error) {
	out := make(map[string]any, len(values))
	for _, fv := range values {
		v, err := fv.Value.Eval(env)
		if err != nil {
			return nil, err
		}
		out[fv.Field.Name] = v
	}
	return out, nil
}
