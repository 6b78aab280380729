package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/storetest"
	"github.com/crmd/crmd/rules"
)

// fixture is an engine with one business and a pack.
type fixture struct {
	t   *testing.T
	eng *engine.Engine
	biz string
}

func newFixture(t *testing.T, kind, pack string) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{t: t, eng: engine.New(storetest.Open(t, kind), engine.Options{})}
	b, err := f.eng.CreateBusiness(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	f.biz = b.ID
	p, errs := rules.Parse("p", []rules.File{{Name: "p.yaml", Data: []byte(pack)}})
	if errs != nil {
		t.Fatal(errs)
	}
	if _, err := f.eng.ApplyPacks(ctx, f.biz, []*rules.Pack{p}, engine.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

// write makes a write with JSON fields and returns the stored values.
func (f *fixture) write(op engine.Op, object, id, fields string) (map[string]any, *engine.Trace, error) {
	f.t.Helper()
	var in map[string]any
	if fields != "" {
		dec := json.NewDecoder(strings.NewReader(fields))
		dec.UseNumber()
		if err := dec.Decode(&in); err != nil {
			f.t.Fatal(err)
		}
	}
	res, err := f.eng.Write(context.Background(), engine.WriteRequest{BusinessID: f.biz, Object: object, Op: op, ID: id, Fields: in, Trace: true})
	if err != nil {
		return nil, nil, err
	}
	if res.Record == nil {
		return nil, res.Trace, nil
	}
	out := map[string]any{"id": res.Record.ID}
	for k, v := range res.Record.Fields {
		out[k] = v
	}
	return out, res.Trace, nil
}

const orderPack = `
objects:
  deals:
    fields:
      region: {type: string, default: '= record.currency == "GBP" ? "uk" : "eu"'}
      score: {type: integer, min: 0}
automations:
  - name: first, skipped
    object: deals
    on: create
    when: record.amount > 1000000
    actions: [{set: {stage: huge}}]
  - name: second, runs
    object: deals
    on: create
    actions: [{set: {source: automation}}]
  - name: the score
    object: deals
    on: [create, update]
    actions: [{set: {score: = int(record.amount / 100)}}]
  - name: note deletions
    object: deals
    on: delete
    actions:
      - create: {object: notes, fields: {name: = "Deleted " + record.name}}
validations:
  - name: sees what set did
    object: deals
    when: record.score > 50
    error: too big
    field: score
`

func TestOrderOfExecution(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := newFixture(t, kind, orderPack)
		rec, trace, err := f.write(engine.Create, "deals", "", `{"name":"A","amount":100,"currency":"GBP"}`)
		if err != nil {
			t.Fatal(err)
		}
		// A before-save automation whose condition is false does not stop the
		// ones after it; defaults come after set; validations see set values.
		if rec["source"] != "automation" || rec["stage"] != nil || rec["score"] != int64(1) || rec["region"] != "uk" {
			t.Errorf("created %v", rec)
		}
		if got := strings.Join(trace.Automations, ","); got != "second, runs,the score" {
			t.Errorf("automations that ran: %s", got)
		}
		if got := strings.Join(trace.Validations, ","); got != "sees what set did" {
			t.Errorf("validations passed: %s", got)
		}

		_, _, err = f.write(engine.Create, "deals", "", `{"name":"B","amount":6000}`)
		var fe *objects.FieldError
		if !errors.As(err, &fe) || fe.Field != "score" || fe.Message != "too big" {
			t.Errorf("a set that a validation refuses: %v", err)
		}

		id := rec["id"].(string)
		up, _, err := f.write(engine.Update, "deals", id, `{"amount":200,"currency":"EUR"}`)
		if err != nil {
			t.Fatal(err)
		}
		if up["score"] != int64(2) || up["region"] != "uk" {
			t.Errorf("updated %v: set runs on update, defaults do not", up)
		}
		_, trace, err = f.write(engine.Update, "deals", id, `{"amount":200}`)
		if err != nil || len(trace.Automations) != 0 || len(trace.Writes) != 0 {
			t.Errorf("an update that changes nothing ran %v, wrote %v (%v)", trace.Automations, trace.Writes, err)
		}
		_, trace, err = f.write(engine.Delete, "deals", id, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(trace.Writes) != 2 || trace.Writes[0].Op != engine.Delete || trace.Writes[1].Object != "notes" {
			t.Errorf("delete wrote %+v", trace.Writes)
		}
	})
}

const flowPack = `
automations:
  - name: start
    object: deals
    on: create
    actions: [{run: outer}]
flows:
  - name: outer
    object: deals
    steps:
      - name: task
        create: {object: tasks, fields: {name: outer}}
      - run: inner
      - update: {object: tasks, id: = steps.task.id, fields: {description: '= "after inner, still " + steps.task.id'}}
  - name: inner
    object: deals
    steps:
      - name: task
        create: {object: tasks, fields: {name: inner}}
      - if: record.amount > 10
        then:
          - update: {object: tasks, id: = steps.task.id, fields: {priority: high}}
        else:
          - update: {object: tasks, id: = steps.task.id, fields: {priority: low}}
`

// TestFlows checks branches and that a flow run from another sees only its
// own steps: both name a step task, and the outer flow's last step still
// reads its own.
func TestFlows(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := newFixture(t, kind, flowPack)
		_, trace, err := f.write(engine.Create, "deals", "", `{"name":"D","amount":50}`)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(trace.Flows, ","); got != "outer,inner" {
			t.Errorf("flows: %s", got)
		}
		if len(trace.Writes) != 5 {
			t.Fatalf("writes: %+v", trace.Writes)
		}
		outer, inner := trace.Writes[1].ID, trace.Writes[2].ID
		for _, w := range trace.Writes[3:] {
			if w.Op != engine.Update {
				t.Errorf("write %+v", w)
			}
		}
		v, _ := f.eng.View(context.Background(), f.biz)
		_, rec, err := v.Get(context.Background(), "tasks", inner)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(rec.Data), `"priority":"high"`) {
			t.Errorf("inner task: %s", rec.Data)
		}
		_, rec, _ = v.Get(context.Background(), "tasks", outer)
		if !strings.Contains(string(rec.Data), "after inner, still "+outer) {
			t.Errorf("outer task: %s", rec.Data)
		}
	})
}
