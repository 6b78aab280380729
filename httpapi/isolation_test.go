package httpapi_test

import (
	"strings"
	"testing"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/storetest"
)

// TestTenantIsolation checks every endpoint with business b's key on
// business a's records: the answer must be exactly the answer for an id that
// does not exist, and a's records must be untouched and never listed.
func TestTenantIsolation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		secret := e.create("secret", "a", "contacts", `{"first_name":"Ada","email":"ada@example.com"}`)
		e.create("", "b", "contacts", `{"first_name":"Bob"}`)
		missing := objects.NewID()

		requests := []struct{ method, body string }{
			{"GET", ""},
			{"PATCH", `{"first_name":"Mallory"}`},
			{"PATCH", `{}`},
			{"DELETE", ""},
		}
		for _, rq := range requests {
			got := e.do(rq.method, "/api/v1/contacts/"+secret, "b", rq.body, nil)
			want := e.do(rq.method, "/api/v1/contacts/"+missing, "b", rq.body, nil)
			if got.status != 404 || got.status != want.status ||
				string(got.raw) != strings.ReplaceAll(string(want.raw), missing, secret) {
				t.Errorf("%s another business's record: %d %s\nnonexistent record: %d %s", rq.method, got.status, got.raw, want.status, want.raw)
			}
		}

		// References are checked within the business too.
		r := e.do("POST", "/api/v1/deals", "b", `{"contact_id":"{secret}"}`, nil)
		want := e.do("POST", "/api/v1/deals", "b", `{"contact_id":"`+missing+`"}`, nil)
		if r.status != 422 || string(r.raw) != strings.ReplaceAll(string(want.raw), missing, secret) {
			t.Errorf("reference to another business's record: %d %s, nonexistent: %s", r.status, r.raw, want.raw)
		}

		list := e.do("GET", "/api/v1/contacts?limit=500", "b", "", nil)
		if list.body["count"] != 1.0 || strings.Contains(string(list.raw), secret) || strings.Contains(string(list.raw), "Ada") {
			t.Errorf("b's list leaks: %s", list.raw)
		}

		after := e.do("GET", "/api/v1/contacts/"+secret, "a", "", nil)
		if after.status != 200 || after.body["first_name"] != "Ada" {
			t.Errorf("a's record after b's attempts: %d %s", after.status, after.raw)
		}
	})
}
