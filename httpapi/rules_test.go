package httpapi_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/objects/storetest"
	"github.com/crmd/crmd/rules"
)

// applyPack applies a pack to business biz: the files of a directory, or
// one YAML document.
func (e *env) applyPack(biz, dirOrYAML string) *engine.ApplyResult {
	e.t.Helper()
	var files []rules.File
	if paths, _ := filepath.Glob(filepath.Join(dirOrYAML, "*.yaml")); len(paths) > 0 {
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				e.t.Fatal(err)
			}
			files = append(files, rules.File{Name: p, Data: data})
		}
	} else {
		files = []rules.File{{Name: "pack.yaml", Data: []byte(dirOrYAML)}}
	}
	p, errs := rules.Parse("pack", files)
	if errs != nil {
		e.t.Fatal(errs)
	}
	res, err := e.eng.ApplyPacks(context.Background(), e.biz[biz], []*rules.Pack{p}, engine.ApplyOptions{By: "test"})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, in := range res.NewInbound {
		e.tokens[biz+"/"+in.Name] = in.Token
	}
	return res
}

func (e *env) count(biz, object string) float64 {
	e.t.Helper()
	r := e.do("GET", "/api/v1/"+object+"?limit=500", biz, "", nil)
	if r.status != 200 {
		e.t.Fatalf("listing %s: %d %s", object, r.status, r.raw)
	}
	return r.body["count"].(float64)
}

func TestRulesThroughTheAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		e.applyPack("a", "../examples/field-services")
		e.create("acme", "a", "companies", `{"name":"Acme Ltd"}`)
		e.create("deal", "a", "deals", `{"name":"Boiler","amount":4200,"currency":"GBP","company_id":"{acme}"}`)
		e.run([]scenario{
			{name: "validation refuses with its field", method: "POST", path: "/api/v1/leads", body: `{"first_name":"Bob","email":"bob@gmail.com","source":"web"}`,
				status: 422, want: map[string]any{"field": "email", "code": "validation_failed", "error": "web leads must give a work email address, not a free mail one"}},
			{name: "before-save set", method: "POST", path: "/api/v1/leads", body: `{"first_name":"Ada","email":"ada@analytical.io","source":"referral"}`,
				status: 201, want: map[string]any{"rating": "hot", "status": "new", "name": "Ada"}},
			{name: "default", method: "GET", path: "/api/v1/deals/{deal}", status: 200, want: map[string]any{"stage": "new"}},
			{name: "allowed values", method: "PATCH", path: "/api/v1/deals/{deal}", body: `{"stage":"pending"}`,
				status: 422, want: map[string]any{"field": "stage", "code": "invalid_value", "error": "stage must be one of new, qualified, proposal, won, lost"}},
			{name: "win the deal", method: "PATCH", path: "/api/v1/deals/{deal}", body: `{"stage":"won"}`, status: 200, want: map[string]any{"stage": "won"}},
			{name: "won stays won", method: "PATCH", path: "/api/v1/deals/{deal}", body: `{"stage":"proposal"}`,
				status: 422, want: map[string]any{"field": "stage", "code": "validation_failed"}},
			{name: "the update action reached the company", method: "GET", path: "/api/v1/companies/{acme}", status: 200, want: map[string]any{"status": "customer"}},
			{name: "custom object", method: "POST", path: "/api/v1/vehicles", body: `{"plate":"AB12-CDE","model":"Transit"}`,
				status: 201, want: map[string]any{"status": "active", "plate": "AB12-CDE"}},
			{name: "required field", method: "POST", path: "/api/v1/vehicles", body: `{"model":"Transit"}`,
				status: 422, want: map[string]any{"field": "plate", "code": "required"}},
			{name: "unique field", method: "POST", path: "/api/v1/vehicles", body: `{"plate":"AB12-CDE"}`,
				status: 422, want: map[string]any{"field": "plate", "code": "not_unique"}},
			{name: "pattern", method: "POST", path: "/api/v1/vehicles", body: `{"plate":"plate?"}`, status: 422, want: map[string]any{"field": "plate"}},
			{name: "another business has no such object", method: "GET", path: "/api/v1/vehicles", key: "b", status: 404},
			{name: "another business has no such rules", method: "POST", path: "/api/v1/leads", key: "b", body: `{"email":"bob@gmail.com","source":"web"}`, status: 201},
			{name: "dry_run takes true or false", method: "POST", path: "/api/v1/leads?dry_run=yes", body: `{}`, status: 400, want: map[string]any{"field": "dry_run"}},
			{name: "reads take no dry_run", method: "GET", path: "/api/v1/leads?dry_run=true", status: 400, want: map[string]any{"field": "dry_run"}},
		})
		// The won deal's flow drafted an invoice and a task.
		if n := e.count("a", "invoices"); n != 1 {
			t.Errorf("%v invoices after winning the deal, want 1", n)
		}
		if n := e.count("a", "tasks"); n != 1 {
			t.Errorf("%v tasks after winning the deal, want 1", n)
		}
		inv := e.do("GET", "/api/v1/invoices", "a", "", nil).body["records"].([]any)[0].(map[string]any)
		if inv["amount"] != 4200.0 || inv["currency"] != "GBP" || inv["status"] != "draft" || inv["deal_id"] != e.ids["deal"] {
			t.Errorf("the drafted invoice = %v", inv)
		}
	})
}

func TestDryRun(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		e.applyPack("a", "../examples/field-services")
		e.create("deal", "a", "deals", `{"name":"Heat pump","amount":14500}`)
		leads := e.count("a", "leads")
		r := e.do("POST", "/api/v1/leads?dry_run=true", "a", `{"first_name":"Grace","email":"grace@navy.mil","source":"web"}`, nil)
		if r.status != 200 || r.body["dry_run"] != true || r.body["operation"] != "create" || r.body["object"] != "leads" {
			t.Fatalf("dry run: %d %s", r.status, r.raw)
		}
		rec := r.body["record"].(map[string]any)
		if rec["rating"] != "warm" || rec["name"] != "Grace" {
			t.Errorf("dry-run record = %v", rec)
		}
		if got := jsonOf(t, r.body["automations"]); got != `["rate new leads","follow up web leads"]` {
			t.Errorf("automations = %s", got)
		}
		if got := jsonOf(t, r.body["validations"]); !strings.Contains(got, "web leads give an email") {
			t.Errorf("validations = %s", got)
		}
		writes := r.body["writes"].([]any)
		if len(writes) != 2 || writes[1].(map[string]any)["object"] != "tasks" {
			t.Errorf("writes = %s", jsonOf(t, writes))
		}
		if e.count("a", "leads") != leads || e.count("a", "tasks") != 0 {
			t.Error("a dry run wrote")
		}
		if r := e.do("GET", "/api/v1/leads/"+rec["id"].(string), "a", "", nil); r.status != 404 {
			t.Errorf("the dry run's record exists: %d", r.status)
		}

		r = e.do("PATCH", "/api/v1/deals/{deal}?dry_run=true", "a", `{"stage":"won"}`, nil)
		if r.status != 200 || jsonOf(t, r.body["flows"]) != `["invoice won deal"]` || len(r.body["writes"].([]any)) != 4 {
			t.Fatalf("dry-run win: %d %s", r.status, r.raw)
		}
		if g := e.do("GET", "/api/v1/deals/{deal}", "a", "", nil); g.body["stage"] != "new" {
			t.Errorf("the deal changed: %s", g.raw)
		}
		if e.count("a", "invoices") != 0 || e.count("a", "tasks") != 0 {
			t.Error("a dry run wrote")
		}

		// A dry run that a rule refuses answers as the write would.
		r = e.do("POST", "/api/v1/leads?dry_run=true", "a", `{"source":"web"}`, nil)
		if r.status != 422 || r.body["field"] != "email" {
			t.Errorf("refused dry run: %d %s", r.status, r.raw)
		}
		r = e.do("DELETE", "/api/v1/deals/{deal}?dry_run=true", "a", "", nil)
		if r.status != 200 || r.body["record"] != nil || e.do("GET", "/api/v1/deals/{deal}", "a", "", nil).status != 200 {
			t.Errorf("dry-run delete: %d %s", r.status, r.raw)
		}
	})
}

const loopPack = `
pack: loop
automations:
  - name: deal changes make a task
    object: deals
    on: update
    actions:
      - create:
          object: tasks
          fields: {name: = "Follow " + record.name, deal_id: = record.id}
  - name: tasks touch their deal
    object: tasks
    on: create
    actions:
      - update:
          reference: deal_id
          fields: {description: = "touched by " + record.name + " at " + string(now().UnixNano())}
`

const refusingPack = `
pack: loop
validations:
  - name: tasks need a due date
    object: tasks
    when: blank("due_date")
    error: a task needs a due date
    field: due_date
automations:
  - name: won deals make a task
    object: deals
    on: update
    when: record.stage == "won"
    actions:
      - create:
          object: tasks
          fields: {name: = "Invoice " + record.name}
`

func TestAutomationLimits(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		e.applyPack("a", loopPack)
		e.create("deal", "a", "deals", `{"name":"Loop"}`)
		r := e.do("PATCH", "/api/v1/deals/{deal}", "a", `{"stage":"x"}`, nil)
		if r.status != 422 || r.body["code"] != "automation_depth" || !strings.Contains(r.body["error"].(string), "deals.update → deal changes make a task → tasks.create → tasks touch their deal → deals.update") {
			t.Fatalf("a loop of automations: %d %s", r.status, r.raw)
		}
		if g := e.do("GET", "/api/v1/deals/{deal}", "a", "", nil); g.body["stage"] != nil || g.body["description"] != nil {
			t.Errorf("a refused loop wrote: %s", g.raw)
		}
		if n := e.count("a", "tasks"); n != 0 {
			t.Errorf("a refused loop left %v tasks", n)
		}

		// A write an automation makes that its own rules refuse refuses the
		// whole write, and nothing is stored.
		e.applyPack("a", refusingPack)
		r = e.do("PATCH", "/api/v1/deals/{deal}", "a", `{"stage":"won"}`, nil)
		if r.status != 422 || r.body["code"] != "automation_failed" || r.body["field"] != nil ||
			r.body["error"] != "automation won deals make a task: a task needs a due date" {
			t.Fatalf("refused automation: %d %s", r.status, r.raw)
		}
		if g := e.do("GET", "/api/v1/deals/{deal}", "a", "", nil); g.body["stage"] != nil {
			t.Errorf("the deal was written: %s", g.raw)
		}
	})
}

func TestUniqueAndHotSwap(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		e.create("c1", "a", "contacts", `{"email":"ada@example.com"}`)
		e.create("", "a", "contacts", `{"email":"ADA@example.com"}`) // not unique yet
		// Making email unique while two contacts share it is refused.
		p, _ := rules.Parse("u", []rules.File{{Name: "u.yaml", Data: []byte("objects: {contacts: {fields: {email: {unique: true}}}}")}})
		_, err := e.eng.ApplyPacks(context.Background(), e.biz["a"], []*rules.Pack{p}, engine.ApplyOptions{})
		var ae *engine.ApplyError
		if err == nil || !strings.Contains(err.Error(), "contacts.email cannot become unique") {
			t.Fatalf("unique over duplicates = %v (%T)", err, ae)
		}
		r := e.do("DELETE", "/api/v1/contacts/{c1}", "a", "", nil)
		if r.status != 204 {
			t.Fatal(r.status)
		}
		e.applyPack("a", "objects: {contacts: {fields: {email: {unique: true}}}}")
		// The very next request sees the new revision.
		e.run([]scenario{
			{name: "taken, whatever the case", method: "POST", path: "/api/v1/contacts", body: `{"email":"Ada@Example.com"}`,
				status: 422, want: map[string]any{"field": "email", "code": "not_unique"}},
			{name: "another business may", method: "POST", path: "/api/v1/contacts", key: "b", body: `{"email":"ada@example.com"}`, status: 201},
			{name: "free", method: "POST", path: "/api/v1/contacts", body: `{"email":"grace@example.com"}`, status: 201},
		})
	})
}
