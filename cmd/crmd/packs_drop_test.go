package main

// Revisions that drop custom objects and fields holding data: refused
// without --allow-drop; with it, the data is hidden and a rollback brings it
// back exactly.

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crmd/crmd/objects/storetest"
)

// fields decodes a record answered in r.
func fields(t testing.TB, r *response) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("want a JSON object, got %v", r)
	}
	return m
}

// TestPackDrop drops a custom object (vehicles) and a custom field on a
// standard object (leads.budget) that hold data, and rolls back.
func TestPackDrop(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		key, _ := newBusiness(t, dsn, "Acme")
		h := bearer(key)
		v1, v2 := testPack(t, "fleet-v1"), testPack(t, "fleet-v2")
		wantStdout(t, packCmd(t, "apply", dsn, "Acme", v1), 0, "fleet: revision 1 active\n")
		s := startServer(t, dsn)

		van := recordID(t, s.mustSend(t, 201, "POST", "/api/v1/vehicles", h, `{"plate":"AB12-CDE","model":"Transit","capacity_kg":1200.5}`))
		kept := recordID(t, s.mustSend(t, 201, "POST", "/api/v1/leads", h, `{"first_name":"Ada","budget":15000}`))
		patched := recordID(t, s.mustSend(t, 201, "POST", "/api/v1/leads", h, `{"first_name":"Bob","budget":250}`))
		vanBefore := s.mustSend(t, 200, "GET", "/api/v1/vehicles/"+van, h, "").body
		keptBefore := s.mustSend(t, 200, "GET", "/api/v1/leads/"+kept, h, "").body
		vansBefore := s.mustSend(t, 200, "GET", "/api/v1/vehicles", h, "").body

		// Without --allow-drop: refused, nothing changes.
		r := packCmd(t, "apply", dsn, "Acme", v2)
		wantFailure(t, r, 1, "--allow-drop", "object vehicles (1 records)", "field leads.budget", "nothing was changed")
		wantRevisions(t, listPacks(t, dsn, "Acme"), "fleet", 1, 1)
		s.mustSend(t, 200, "GET", "/api/v1/vehicles/"+van, h, "")
		if got := fields(t, s.mustSend(t, 200, "GET", "/api/v1/leads/"+kept, h, "")); got["budget"] != 15000.0 {
			t.Fatalf("after a refused drop, budget = %v, want 15000", got["budget"])
		}

		// With --allow-drop: the object and the field are gone from the API.
		r = packCmd(t, "apply", dsn, "Acme", "--allow-drop", v2)
		exited := time.Now()
		wantStdout(t, r, 0, "fleet: revision 2 active\n")
		for _, d := range []string{"dropped object vehicles (1 records)", "dropped field leads.budget"} {
			if !strings.Contains(r.stderr, d) {
				t.Errorf("stderr does not say %q:\n%v", d, r)
			}
		}
		took := waitFor(t, exited, "the server dropping vehicles", func() (bool, string) {
			r, err := s.send("GET", "/api/v1/vehicles/"+van, h, "")
			if err != nil {
				return false, err.Error()
			}
			return r.status == 404 && decodeError(r).Code == "not_found", r.String()
		})
		t.Logf("%s: vehicles answered 404 %v after crmd pack apply --allow-drop exited", kind, took.Round(time.Millisecond))
		s.mustSend(t, 404, "GET", "/api/v1/vehicles", h, "")
		s.mustSend(t, 404, "POST", "/api/v1/vehicles", h, `{"plate":"XY99-ZZZ"}`)
		for _, id := range []string{kept, patched} {
			if got := fields(t, s.mustSend(t, 200, "GET", "/api/v1/leads/"+id, h, "")); got["first_name"] == nil {
				t.Fatalf("lead %s: %v", id, got)
			} else if _, ok := got["budget"]; ok {
				t.Fatalf("lead %s still has budget after it was dropped: %v", id, got)
			}
		}
		list := s.mustSend(t, 200, "GET", "/api/v1/leads", h, "")
		var leads struct{ Records []map[string]any }
		json.Unmarshal(list.body, &leads)
		for _, l := range leads.Records {
			if _, ok := l["budget"]; ok {
				t.Fatalf("a listed lead still has budget: %s", list.body)
			}
		}
		if e := decodeError(s.mustSend(t, 422, "POST", "/api/v1/leads", h, `{"first_name":"Cy","budget":1}`)); e.Code != "unknown_field" || e.Field != "budget" {
			t.Fatalf("writing the dropped field: %+v", e)
		}
		// A lead updated while its budget is hidden keeps the hidden value.
		s.mustSend(t, 200, "PATCH", "/api/v1/leads/"+patched, h, `{"status":"contacted"}`)
		wantRevisions(t, listPacks(t, dsn, "Acme"), "fleet", 2, 2)

		// Rolling back brings everything back, exactly as it was.
		r = packCmd(t, "rollback", dsn, "Acme", "fleet")
		exited = time.Now()
		wantStdout(t, r, 0, "fleet: revision 1 active\n")
		waitFor(t, exited, "the server serving vehicles again", func() (bool, string) {
			r, err := s.send("GET", "/api/v1/vehicles/"+van, h, "")
			if err != nil {
				return false, err.Error()
			}
			return r.status == 200, r.String()
		})
		if got := s.mustSend(t, 200, "GET", "/api/v1/vehicles/"+van, h, "").body; string(got) != string(vanBefore) {
			t.Errorf("the vehicle after the rollback:\n%s\nbefore the drop:\n%s", got, vanBefore)
		}
		if got := s.mustSend(t, 200, "GET", "/api/v1/vehicles", h, "").body; string(got) != string(vansBefore) {
			t.Errorf("the vehicles after the rollback:\n%s\nbefore the drop:\n%s", got, vansBefore)
		}
		if got := s.mustSend(t, 200, "GET", "/api/v1/leads/"+kept, h, "").body; string(got) != string(keptBefore) {
			t.Errorf("the lead after the rollback:\n%s\nbefore the drop:\n%s", got, keptBefore)
		}
		if got := fields(t, s.mustSend(t, 200, "GET", "/api/v1/leads/"+patched, h, "")); got["budget"] != 250.0 || got["status"] != "contacted" {
			t.Errorf("the lead updated while budget was hidden: budget %v, status %v; want 250 and contacted", got["budget"], got["status"])
		}
		wantRevisions(t, listPacks(t, dsn, "Acme"), "fleet", 2, 1)
		s.stop(t)
	})
}

// TestPackDropThenRedeclareAnotherType drops leads.budget, a number field
// holding data, with --allow-drop, then declares it again as a date. A
// direct change from number to date is refused, because the stored numbers
// are not dates; going through a drop must be refused the same way, since
// the hidden numbers would come back as dates.
func TestPackDropThenRedeclareAnotherType(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		key, _ := newBusiness(t, dsn, "Acme")
		h := bearer(key)
		wantStdout(t, packCmd(t, "apply", dsn, "Acme", testPack(t, "fleet-v1")), 0, "fleet: revision 1 active\n")
		s := startServer(t, dsn)
		lead := recordID(t, s.mustSend(t, 201, "POST", "/api/v1/leads", h, `{"first_name":"Ada","budget":15000}`))

		// The direct change is refused.
		r := packCmd(t, "apply", dsn, "Acme", testPack(t, "fleet-date"))
		wantFailure(t, r, 1, "field leads.budget holds data that is not of type date: leads record "+lead+" has 15000, which must be a string")

		wantStdout(t, packCmd(t, "apply", dsn, "Acme", "--allow-drop", testPack(t, "fleet-v2")), 0, "fleet: revision 2 active\n")
		r = packCmd(t, "apply", dsn, "Acme", "--allow-drop", testPack(t, "fleet-date"))
		if r.code != 1 || r.stdout != "" {
			t.Errorf("declaring the dropped number field leads.budget again as a date: want exit status 1 and a refusal:\n%v", r)
		}
		if r.code == 0 {
			// Whatever the server serves, a date field holds a date or null.
			var got map[string]any
			waitFor(t, time.Now(), "the server serving leads.budget as a date", func() (bool, string) {
				r, err := s.send("GET", "/api/v1/leads/"+lead, h, "")
				if err != nil {
					return false, err.Error()
				}
				got = map[string]any{}
				json.Unmarshal(r.body, &got)
				_, has := got["budget"]
				return has, r.String()
			})
			if b := got["budget"]; b != nil {
				if _, isString := b.(string); !isString {
					t.Errorf("budget is a date field, and the lead answers budget = %v (%T)", b, b)
				}
			}
		}

		// Back to revision 1, where budget is the number it holds.
		r = packCmd(t, "rollback", dsn, "Acme", "--to", "1", "fleet")
		if r.code != 0 || r.stdout != "fleet: revision 1 active\n" {
			t.Fatalf("rolling back to revision 1, whose budget is a number as the data is: want fleet: revision 1 active:\n%v", r)
		}
		waitFor(t, time.Now(), "the lead's budget back", func() (bool, string) {
			r, err := s.send("GET", "/api/v1/leads/"+lead, h, "")
			if err != nil {
				return false, err.Error()
			}
			return r.status == 200 && fields(t, r)["budget"] == 15000.0, fmt.Sprint(r)
		})
		s.stop(t)
	})
}
