package main

// Dry runs through the API of a server running the example pack: the whole
// write path runs, the answer says what would have happened, and nothing is
// written.

import (
	"encoding/json"
	"regexp"
	"slices"
	"testing"

	"github.com/crmd/crmd/objects/storetest"
)

// A dryRun is the answer to a write with ?dry_run=true.
type dryRun struct {
	DryRun      bool           `json:"dry_run"`
	Operation   string         `json:"operation"`
	Object      string         `json:"object"`
	Record      map[string]any `json:"record"`
	Validations []string       `json:"validations"`
	Automations []string       `json:"automations"`
	Flows       []string       `json:"flows"`
	Writes      []struct {
		Operation string `json:"operation"`
		Object    string `json:"object"`
		ID        string `json:"id"`
	} `json:"writes"`
}

// writesTo counts the writes of a dry run of op on object.
func (d *dryRun) writesTo(op, object string) int {
	n := 0
	for _, w := range d.Writes {
		if w.Operation == op && w.Object == object {
			n++
		}
	}
	return n
}

// TestPackDryRun wins a deal with ?dry_run=true: the answer shows the flow,
// the invoice and the task it would create; afterwards the deal is as it
// was and no invoice exists. Creates and deletes run dry too.
func TestPackDryRun(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		key, _ := newBusiness(t, dsn, "Acme")
		h := bearer(key)
		// The example pack's inbound webhook is made, and its URL shown.
		r := packCmd(t, "apply", dsn, "Acme", examplePack(t))
		if r.code != 0 || !regexp.MustCompile(`^field-services: revision 1 active\ninbound webhook contact-form: /api/in/in_[0-9A-Za-z]{32}\n$`).MatchString(r.stdout) {
			t.Fatalf("pack apply of the example:\n%v", r)
		}
		s := startServer(t, dsn)

		company := recordID(t, s.mustSend(t, 201, "POST", "/api/v1/companies", h, `{"name":"Acme Ltd"}`))
		deal := recordID(t, s.mustSend(t, 201, "POST", "/api/v1/deals", h,
			`{"name":"Boiler service","amount":180,"currency":"GBP","stage":"proposal","company_id":"`+company+`"}`))
		dealBefore := s.mustSend(t, 200, "GET", "/api/v1/deals/"+deal, h, "").body
		companyBefore := s.mustSend(t, 200, "GET", "/api/v1/companies/"+company, h, "").body
		// count lists an object and returns how many records it has.
		count := func(object string) int {
			t.Helper()
			var l struct{ Count int }
			if err := json.Unmarshal(s.mustSend(t, 200, "GET", "/api/v1/"+object+"?limit=500", h, "").body, &l); err != nil {
				t.Fatal(err)
			}
			return l.Count
		}
		dry := func(method, path, body string) *dryRun {
			t.Helper()
			r := s.mustSend(t, 200, method, path, h, body)
			var d dryRun
			if err := json.Unmarshal(r.body, &d); err != nil || !d.DryRun {
				t.Fatalf("%s %s: want a dry run answer, got %v", method, path, r)
			}
			return &d
		}

		t.Run("win a deal", func(t *testing.T) {
			d := dry("PATCH", "/api/v1/deals/"+deal+"?dry_run=true", `{"stage":"won"}`)
			if d.Operation != "update" || d.Object != "deals" || d.Record["id"] != deal || d.Record["stage"] != "won" || d.Record["amount"] != 180.0 {
				t.Errorf("dry run of winning the deal: operation %q, object %q, record %v", d.Operation, d.Object, d.Record)
			}
			if !slices.Contains(d.Flows, "invoice won deal") || !slices.Contains(d.Automations, "invoice won deals") {
				t.Errorf("flows %q, automations %q: want the invoice won deal flow, started by invoice won deals", d.Flows, d.Automations)
			}
			if !slices.Contains(d.Validations, "won deals have an amount") {
				t.Errorf("validations %q: want won deals have an amount among those checked", d.Validations)
			}
			if len(d.Writes) == 0 || d.Writes[0].Operation != "update" || d.Writes[0].Object != "deals" || d.Writes[0].ID != deal {
				t.Errorf("writes %+v: want the deal's update first", d.Writes)
			}
			if d.writesTo("create", "invoices") != 1 || d.writesTo("create", "tasks") != 1 || d.writesTo("update", "companies") != 1 {
				t.Errorf("writes %+v: want an invoice and a task created, and the company updated", d.Writes)
			}
			// Nothing was written.
			if got := s.mustSend(t, 200, "GET", "/api/v1/deals/"+deal, h, "").body; string(got) != string(dealBefore) {
				t.Errorf("the deal after a dry run:\n%s\nbefore:\n%s", got, dealBefore)
			}
			if got := s.mustSend(t, 200, "GET", "/api/v1/companies/"+company, h, "").body; string(got) != string(companyBefore) {
				t.Errorf("the company after a dry run:\n%s\nbefore:\n%s", got, companyBefore)
			}
			if n, m := count("invoices"), count("tasks"); n != 0 || m != 0 {
				t.Errorf("after a dry run: %d invoices and %d tasks, want none", n, m)
			}
		})

		t.Run("a refused dry run", func(t *testing.T) {
			r := s.mustSend(t, 422, "PATCH", "/api/v1/deals/"+deal+"?dry_run=true", h, `{"stage":"won","amount":0}`)
			if e := decodeError(r); e.Error != "a won deal needs an amount" || e.Field != "amount" || e.Code != "validation_failed" {
				t.Errorf("got %+v", e)
			}
		})

		t.Run("create and delete", func(t *testing.T) {
			leads := count("leads")
			d := dry("POST", "/api/v1/leads?dry_run=true", `{"first_name":"Grace","email":"grace@navy.mil","source":"web"}`)
			if d.Operation != "create" || d.Record["rating"] != "warm" || d.Record["status"] != "new" ||
				d.writesTo("create", "leads") != 1 || d.writesTo("create", "tasks") != 1 {
				t.Errorf("dry run of a web lead: %+v", d)
			}
			d = dry("DELETE", "/api/v1/deals/"+deal+"?dry_run=true", "")
			if d.Operation != "delete" || d.Record != nil || d.writesTo("delete", "deals") != 1 {
				t.Errorf("dry run of a delete: %+v", d)
			}
			if n := count("leads"); n != leads {
				t.Errorf("%d leads after a dry run, want %d", n, leads)
			}
			if n := count("tasks"); n != 0 {
				t.Errorf("%d tasks after a dry run, want none", n)
			}
			if got := s.mustSend(t, 200, "GET", "/api/v1/deals/"+deal, h, "").body; string(got) != string(dealBefore) {
				t.Errorf("the deal after a dry delete:\n%s\nbefore:\n%s", got, dealBefore)
			}
		})

		// And for real, the same write does what the dry run said.
		t.Run("win the deal for real", func(t *testing.T) {
			won := fields(t, s.mustSend(t, 200, "PATCH", "/api/v1/deals/"+deal, h, `{"stage":"won"}`))
			if won["stage"] != "won" {
				t.Errorf("the deal: %v", won)
			}
			if n, m := count("invoices"), count("tasks"); n != 1 || m != 1 {
				t.Errorf("after winning the deal: %d invoices and %d tasks, want 1 and 1", n, m)
			}
		})
		s.stop(t)
	})
}
