package actions

import (
	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/rules"
)

func init() { engine.RegisterAction("run", newRun) }

// Run starts a flow of the same object, with the record being written:
//
//   - run: invoice_won_deal
type Run struct {
	flow string
}

func newRun(c *rules.ActionCompiler, config *yaml.Node, path string) engine.Action {
	name, ok := c.String(config, path)
	if !ok || !c.RunsFlow(config, path, name) {
		return nil
	}
	return &Run{flow: name}
}

// Phase is after the save.
func (*Run) Phase() rules.Phase { return rules.AfterSave }

// Run runs the flow.
func (a *Run) Run(r *engine.Run) error { return r.RunFlow(a.flow) }

var _ engine.Action = (*Run)(nil)
