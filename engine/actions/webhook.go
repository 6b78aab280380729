package actions

import (
	"encoding/json"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/rules"
)

func init() { engine.RegisterAction("webhook", newWebhook) }

// Webhook sends a JSON body built from expressions to a URL, after the
// write commits, through the same delivery machinery as subscriptions:
// signed with the secret of its name, retried, logged.
//
//   - webhook:
//     name: slack
//     url: https://hooks.example.com/T000/B000
//     headers: {X-Team: ops}
//     payload:
//     text: = "Deal " + record.name + " won"
//     amount: = record.amount
type Webhook struct {
	name    string
	url     string
	headers map[string]string
	payload []*rules.PayloadValue
}

func newWebhook(c *rules.ActionCompiler, config *yaml.Node, path string) engine.Action {
	w := &Webhook{}
	var payload *yaml.Node
	c.Mapping(config, path, []string{"name", "url", "headers", "payload"}, func(key string, v *yaml.Node, path string) {
		switch key {
		case "name":
			if s, ok := c.String(v, path); ok && c.Endpoint(v, path, s) {
				w.name = s
			}
		case "url":
			if s, ok := c.String(v, path); ok && c.URL(v, path, s) {
				w.url = s
			}
		case "headers":
			w.headers = c.Headers(v, path)
		case "payload":
			payload = v
			w.payload = c.Payload(v, path)
		}
	})
	if w.name == "" || w.url == "" || payload == nil {
		c.Errorf(config, path, "webhook needs name (whose secret signs it), url and payload")
		return nil
	}
	return w
}

// Phase is after the save: nothing is sent for a write that is refused.
func (*Webhook) Phase() rules.Phase { return rules.AfterSave }

// Run builds the body and queues it.
func (a *Webhook) Run(r *engine.Run) error {
	body := make(map[string]any, len(a.payload))
	for _, pv := range a.payload {
		v, err := pv.Eval(r.Env)
		if err != nil {
			return err
		}
		if t, ok := v.(time.Time); ok {
			if t.IsZero() {
				v = nil
			} else {
				v = t.UTC().Format(time.RFC3339Nano)
			}
		}
		body[pv.Name] = v
	}
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("webhook %s: the payload is not JSON: %w", a.name, err)
	}
	return r.Deliver(a.name, a.url, a.headers, b)
}

var _ engine.Action = (*Webhook)(nil)
