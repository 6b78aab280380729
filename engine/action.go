package engine

import (
	"context"
	"sort"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/rules"
)

// An Action is a compiled action of an automation or a flow step. Actions
// are plugins: each kind registers a factory under its id, and the factory
// compiles the action's configuration when a pack is applied.
type Action interface {
	rules.Action
	// Run does the action within the write in progress.
	Run(r *Run) error
}

// A Factory compiles the configuration of an action: it decodes config
// strictly, reports every problem through c, and returns nil if there was
// one. It runs when a pack is applied, never while a request is served.
type Factory func(c *rules.ActionCompiler, config *yaml.Node, path string) Action

var registry = struct {
	sync.RWMutex
	m map[string]Factory
}{m: map[string]Factory{}}

// RegisterAction makes an action available to packs under id. Call it from
// an init function; it panics on an empty or duplicate id.
func RegisterAction(id string, f Factory) {
	registry.Lock()
	defer registry.Unlock()
	if id == "" || f == nil {
		panic("engine: RegisterAction with an empty id or a nil factory")
	}
	if _, dup := registry.m[id]; dup {
		panic("engine: action registered twice: " + id)
	}
	registry.m[id] = f
}

// ActionIDs returns the ids of the registered actions, sorted.
func ActionIDs() []string {
	registry.RLock()
	defer registry.RUnlock()
	ids := make([]string, 0, len(registry.m))
	for id := range registry.m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// compileOptions hands the registry to the rules compiler.
func compileOptions() rules.Options {
	return rules.Options{
		Actions: func(id string) (rules.ActionFactory, bool) {
			registry.RLock()
			f, ok := registry.m[id]
			registry.RUnlock()
			if !ok {
				return nil, false
			}
			return func(c *rules.ActionCompiler, config *yaml.Node, path string) rules.Action {
				if a := f(c, config, path); a != nil {
					return a
				}
				return nil
			}, true
		},
		ActionIDs: ActionIDs,
	}
}

// Run is what an action gets when it runs: the environment its expressions
// see, and the operations it may make on the write in progress. Every write
// an action makes goes through the engine's write path, with its own rules.
type Run struct {
	ctx    context.Context
	Env    *rules.Env
	Object *objects.Object
	set    func(field string, v any) error
	t      *txn
	depth  int
	chain  []string
	output map[string]any
}

// Context is the context of the write.
func (r *Run) Context() context.Context { return r.ctx }

// Set changes a field of the record being written. Only actions that run
// before the save may call it.
func (r *Run) Set(field string, v any) error {
	if r.set == nil {
		panic("engine: Set called by an action that runs after the save")
	}
	return r.set(field, v)
}

// Create creates a record of object with fields in canonical form.
func (r *Run) Create(object string, fields map[string]any) (*objects.Record, error) {
	return r.t.nested(r, change{op: Create, object: object, patch: fields})
}

// Update changes fields (canonical; nil clears) of a record.
func (r *Run) Update(object, id string, fields map[string]any) (*objects.Record, error) {
	return r.t.nested(r, change{op: Update, object: object, id: id, patch: fields})
}

// Deliver queues a webhook: body, signed as endpoint, to url. It is sent
// after the write commits, with retries; nothing is sent if it rolls back.
func (r *Run) Deliver(endpoint, url string, headers map[string]string, body []byte) error {
	if r.t.trace != nil {
		r.t.trace.Webhooks = append(r.t.trace.Webhooks, endpoint)
	}
	return r.t.deliver(endpoint, url, headers, "", body)
}

// RunFlow runs a flow with the same record and environment.
func (r *Run) RunFlow(name string) error { return r.t.runFlow(r, name) }

// Output records what the action produced, for later flow steps to read.
func (r *Run) Output(out map[string]any) { r.output = out }
