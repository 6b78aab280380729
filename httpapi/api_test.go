package httpapi_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"net/http"
	"strings"
	"testing"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/objects/storetest"
)

// wellFormedUnknownKey is a key with a valid checksum that no store has,
// written out from the documented format: ak_, 32 base62 characters, and
// the CRC-32 of all that in 6 base62 characters.
func wellFormedUnknownKey() string {
	const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	body := "ak_" + strings.Repeat("Q", 32)
	sum := crc32.ChecksumIEEE([]byte(body))
	check := make([]byte, 6)
	for i := 5; i >= 0; i-- {
		check[i] = base62[sum%62]
		sum /= 62
	}
	return body + string(check)
}

func TestAuthentication(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		unauthorized := map[string]string{"WWW-Authenticate": "Bearer"}
		mistyped := []byte(e.keys["a"])
		mistyped[10] ^= 1 // one character off: the checksum catches it
		e.run([]scenario{
			{name: "no key", method: "GET", path: "/api/v1/contacts", key: "-", status: 401, hdr: unauthorized,
				want: map[string]any{"code": "unauthorized"}, has: []string{"missing API key"}},
			{name: "malformed key", method: "GET", path: "/api/v1/contacts", key: "-", header: map[string]string{"Authorization": "Bearer ak_123"},
				status: 401, hdr: unauthorized, want: map[string]any{"error": "malformed API key"}},
			{name: "mistyped key", method: "GET", path: "/api/v1/contacts", key: "-", header: map[string]string{"X-API-Key": string(mistyped)},
				status: 401, hdr: unauthorized, want: map[string]any{"error": "malformed API key"}},
			{name: "unknown key", method: "GET", path: "/api/v1/contacts", key: "-", header: map[string]string{"Authorization": "Bearer " + wellFormedUnknownKey()},
				status: 401, hdr: unauthorized, want: map[string]any{"error": "invalid API key"}},
			{name: "revoked key", method: "GET", path: "/api/v1/contacts", key: "revoked", status: 401, hdr: unauthorized,
				want: map[string]any{"error": "API key revoked"}},
			{name: "basic auth", method: "GET", path: "/api/v1/contacts", key: "-", header: map[string]string{"Authorization": "Basic dXNlcjpwYXNz"},
				status: 401, hdr: unauthorized},
			{name: "empty bearer", method: "GET", path: "/api/v1/contacts", key: "-", header: map[string]string{"Authorization": "Bearer "},
				status: 401, hdr: unauthorized},
			{name: "X-API-Key", method: "GET", path: "/api/v1/contacts", key: "-", header: map[string]string{"X-API-Key": "{key:a}"}, status: 200},
			{name: "lower-case bearer", method: "GET", path: "/api/v1/contacts", key: "-", header: map[string]string{"Authorization": "bearer {key:a}"}, status: 200},
			{name: "both headers agree", method: "GET", path: "/api/v1/contacts", header: map[string]string{"X-API-Key": "{key:a}"}, status: 200},
			{name: "both headers disagree", method: "GET", path: "/api/v1/contacts", header: map[string]string{"X-API-Key": "{key:b}"},
				status: 401, hdr: unauthorized, has: []string{"different keys"}},
			{name: "auth before unknown object", method: "GET", path: "/api/v1/nothing", key: "-", status: 401},
			{name: "auth before body", method: "POST", path: "/api/v1/contacts", key: "-", body: "{", status: 401},
			{name: "health needs no key", method: "GET", path: "/healthz", key: "-", status: 200, want: map[string]any{"status": "ok"}},
		})
	})
}

func TestRecordsAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		e.create("acme", "a", "companies", `{"name":"Acme"}`)
		e.create("ada", "a", "contacts", `{"first_name":"Ada","last_name":"Lovelace","email":"ada@example.com","company_id":"{acme}"}`)
		e.create("doomed", "a", "notes", `{"body":"delete me"}`)
		e.create("bcorp", "b", "companies", `{"name":"B Corp"}`)
		e.run([]scenario{
			// Create.
			{name: "create derives name", method: "POST", path: "/api/v1/leads", body: `{"first_name":"Grace","last_name":"Hopper","email":"grace@example.com","status":"new","source":"web"}`,
				status: 201, want: map[string]any{"name": "Grace Hopper", "status": "new", "source": "web", "phone": nil}, has: []string{`"id":"`, `"created_at":"`, `"updated_at":"`}},
			{name: "create name from email", method: "POST", path: "/api/v1/leads", body: `{"email":"ops@example.com"}`,
				status: 201, want: map[string]any{"name": "ops@example.com"}},
			{name: "create keeps given name", method: "POST", path: "/api/v1/contacts", body: `{"name":"Dr. A","first_name":"Ada"}`,
				status: 201, want: map[string]any{"name": "Dr. A"}},
			{name: "create with charset", method: "POST", path: "/api/v1/deals", header: map[string]string{"Content-Type": "application/json; charset=utf-8"},
				body:   `{"name":"Boiler","amount":1200.5,"currency":"EUR","stage":"proposal","close_date":"2026-12-01","company_id":"{acme}","contact_id":"{ada}"}`,
				status: 201, want: map[string]any{"amount": 1200.5, "stage": "proposal", "company_id": "{acme}"}},
			{name: "create every type", method: "POST", path: "/api/v1/companies",
				body:   `{"name":"Types","website":"https://example.com","email":"x@example.com","phone":"+1 555 0100","employees":12,"annual_revenue":1e6,"description":"line\nline"}`,
				status: 201, want: map[string]any{"employees": 12, "annual_revenue": 1e6}},
			{name: "create json field", method: "POST", path: "/api/v1/invoices", body: `{"line_items":[{"sku":"A-1","qty":2,"price":9.99}],"paid_at":"2026-01-31T10:30:00+02:00"}`,
				status: 201, want: map[string]any{"line_items": []any{map[string]any{"sku": "A-1", "qty": 2, "price": 9.99}}, "paid_at": "2026-01-31T08:30:00Z"}},
			{name: "create sets id", method: "POST", path: "/api/v1/contacts", body: `{"id":"06c3ax93w5zpype3m3zskw1xyx"}`,
				status: 422, want: map[string]any{"field": "id", "code": "read_only_field"}},
			{name: "create sets created_at", method: "POST", path: "/api/v1/contacts", body: `{"created_at":"2026-01-01T00:00:00Z"}`,
				status: 422, want: map[string]any{"field": "created_at"}},
			{name: "create sets updated_at", method: "POST", path: "/api/v1/contacts", body: `{"updated_at":"2026-01-01T00:00:00Z"}`,
				status: 422, want: map[string]any{"field": "updated_at"}},
			{name: "unknown field suggests", method: "POST", path: "/api/v1/contacts", body: `{"frist_name":"Ada"}`,
				status: 422, want: map[string]any{"field": "frist_name", "code": "unknown_field", "error": "unknown field frist_name on contacts; did you mean first_name?"}},
			{name: "wrong type", method: "POST", path: "/api/v1/deals", body: `{"amount":"lots"}`,
				status: 422, want: map[string]any{"field": "amount", "code": "invalid_value", "error": "amount must be a number"}},
			{name: "bad email", method: "POST", path: "/api/v1/leads", body: `{"email":"not an email"}`,
				status: 422, want: map[string]any{"field": "email", "code": "invalid_value"}},
			{name: "bad date", method: "POST", path: "/api/v1/deals", body: `{"close_date":"31/12/2026"}`,
				status: 422, want: map[string]any{"field": "close_date"}},
			{name: "reference to nothing", method: "POST", path: "/api/v1/contacts", body: `{"company_id":"06c3ax93w5zpype3m3zskw1xyx"}`,
				status: 422, want: map[string]any{"field": "company_id", "code": "invalid_reference"}},
			{name: "reference to another business", method: "POST", path: "/api/v1/contacts", body: `{"company_id":"{bcorp}"}`,
				status: 422, want: map[string]any{"field": "company_id", "code": "invalid_reference"}},
			{name: "reference to wrong object", method: "POST", path: "/api/v1/contacts", body: `{"company_id":"{ada}"}`,
				status: 422, want: map[string]any{"field": "company_id"}},
			{name: "malformed reference", method: "POST", path: "/api/v1/contacts", body: `{"company_id":"acme"}`,
				status: 422, want: map[string]any{"field": "company_id"}},

			// Bodies.
			{name: "malformed JSON", method: "POST", path: "/api/v1/contacts", body: `{"first_name":`, status: 400, want: map[string]any{"code": "bad_request"}},
			{name: "syntax error", method: "POST", path: "/api/v1/contacts", body: `{"first_name" "Ada"}`, status: 400, has: []string{"malformed JSON near byte"}},
			{name: "array body", method: "POST", path: "/api/v1/contacts", body: `[{"first_name":"Ada"}]`, status: 400, has: []string{"must be a JSON object"}},
			{name: "string body", method: "POST", path: "/api/v1/contacts", body: `"Ada"`, status: 400},
			{name: "null body", method: "POST", path: "/api/v1/contacts", body: `null`, status: 400},
			{name: "duplicate keys", method: "POST", path: "/api/v1/contacts", body: `{"first_name":"Ada","first_name":"Bob"}`, status: 400, has: []string{`the key \"first_name\" twice`}},
			{name: "duplicate nested keys", method: "POST", path: "/api/v1/invoices", body: `{"line_items":{"a":1,"a":2}}`, status: 400},
			{name: "trailing data", method: "POST", path: "/api/v1/contacts", body: `{"first_name":"Ada"} {}`, status: 400, has: []string{"after the JSON object"}},
			{name: "invalid UTF-8", method: "POST", path: "/api/v1/contacts", body: "{\"first_name\":\"\xff\"}", status: 400, has: []string{"UTF-8"}},
			{name: "no body", method: "POST", path: "/api/v1/contacts", header: map[string]string{"Content-Type": "application/json"}, status: 400, has: []string{"empty"}},
			{name: "too deep", method: "POST", path: "/api/v1/invoices", body: `{"line_items":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, status: 400, has: []string{"deep"}},
			{name: "text/plain", method: "POST", path: "/api/v1/contacts", header: map[string]string{"Content-Type": "text/plain"}, body: `{}`,
				status: 415, want: map[string]any{"code": "unsupported_media_type"}},
			{name: "no content type", method: "POST", path: "/api/v1/contacts", header: map[string]string{"Content-Type": ""}, body: `{}`, status: 415},
			{name: "latin1", method: "POST", path: "/api/v1/contacts", header: map[string]string{"Content-Type": "application/json; charset=latin1"}, body: `{}`, status: 415},
			{name: "too large", method: "POST", path: "/api/v1/notes", body: `{"body":"` + strings.Repeat("x", testMaxBody) + `"}`,
				status: 413, want: map[string]any{"code": "body_too_large"}},
			{name: "empty object", method: "POST", path: "/api/v1/notes", body: `{}`, status: 201, want: map[string]any{"name": nil}},

			// Read.
			{name: "get", method: "GET", path: "/api/v1/contacts/{ada}", status: 200,
				want: map[string]any{"id": "{ada}", "name": "Ada Lovelace", "company_id": "{acme}", "phone": nil}},
			{name: "get unknown id", method: "GET", path: "/api/v1/contacts/06c3ax93w5zpype3m3zskw1xyx", status: 404,
				want: map[string]any{"error": "no contacts record with id 06c3ax93w5zpype3m3zskw1xyx", "code": "not_found"}},
			{name: "get malformed id", method: "GET", path: "/api/v1/contacts/42", status: 404, want: map[string]any{"error": "no contacts record with id 42"}},
			{name: "get through wrong object", method: "GET", path: "/api/v1/leads/{ada}", status: 404},
			{name: "get unknown object", method: "GET", path: "/api/v1/contcts/{ada}", status: 404,
				want: map[string]any{"error": "unknown object contcts; did you mean contacts?", "code": "not_found"}},
			{name: "get with a query", method: "GET", path: "/api/v1/contacts/{ada}?fields=name", status: 400, want: map[string]any{"field": "fields"}},
			{name: "unknown object before query", method: "GET", path: "/api/v1/contcts/{ada}?fields=name", status: 404},
			{name: "unknown object before body", method: "POST", path: "/api/v1/contcts", body: `{`, status: 404},

			// Update.
			{name: "patch returns whole record", method: "PATCH", path: "/api/v1/contacts/{ada}", body: `{"title":"Analyst","status":"active"}`, status: 200,
				want: map[string]any{"title": "Analyst", "status": "active", "first_name": "Ada", "email": "ada@example.com", "name": "Ada Lovelace"}},
			{name: "patch null clears", method: "PATCH", path: "/api/v1/contacts/{ada}", body: `{"title":null}`, status: 200, want: map[string]any{"title": nil, "status": "active"}},
			{name: "patch bad value", method: "PATCH", path: "/api/v1/contacts/{ada}", body: `{"email":"nope"}`, status: 422, want: map[string]any{"field": "email"}},
			{name: "patch id", method: "PATCH", path: "/api/v1/contacts/{ada}", body: `{"id":"x"}`, status: 422, want: map[string]any{"field": "id"}},
			{name: "patch unknown field", method: "PATCH", path: "/api/v1/contacts/{ada}", body: `{"stage":"won"}`, status: 422, want: map[string]any{"field": "stage"}},
			{name: "patch unknown id", method: "PATCH", path: "/api/v1/contacts/06c3ax93w5zpype3m3zskw1xyx", body: `{"title":"x"}`, status: 404},
			{name: "patch malformed", method: "PATCH", path: "/api/v1/contacts/{ada}", body: `{`, status: 400},
			{name: "patch text/plain", method: "PATCH", path: "/api/v1/contacts/{ada}", header: map[string]string{"Content-Type": "text/plain"}, body: `{}`, status: 415},
			{name: "patch reference to another business", method: "PATCH", path: "/api/v1/contacts/{ada}", body: `{"company_id":"{bcorp}"}`, status: 422,
				want: map[string]any{"field": "company_id"}},
			{name: "failed patches changed nothing", method: "GET", path: "/api/v1/contacts/{ada}", status: 200,
				want: map[string]any{"email": "ada@example.com", "company_id": "{acme}", "title": nil, "status": "active"}},

			// Delete.
			{name: "delete", method: "DELETE", path: "/api/v1/notes/{doomed}", status: 204},
			{name: "deleted is gone", method: "GET", path: "/api/v1/notes/{doomed}", status: 404},
			{name: "delete again", method: "DELETE", path: "/api/v1/notes/{doomed}", status: 404},
			{name: "delete unknown object", method: "DELETE", path: "/api/v1/nope/{doomed}", status: 404},

			// Routing.
			{name: "unknown path", method: "GET", path: "/api/v2/contacts", status: 404, want: map[string]any{"code": "not_found"}},
			{name: "api root", method: "GET", path: "/api/v1", status: 404},
			{name: "trailing slash", method: "GET", path: "/api/v1/contacts/", status: 404},
			{name: "too deep path", method: "GET", path: "/api/v1/contacts/{ada}/notes", status: 404},
			{name: "PUT", method: "PUT", path: "/api/v1/contacts/{ada}", body: `{}`, status: 405,
				hdr: map[string]string{"Allow": "DELETE, GET, OPTIONS, PATCH"}, want: map[string]any{"code": "method_not_allowed"}},
			{name: "DELETE a list", method: "DELETE", path: "/api/v1/contacts", status: 405, hdr: map[string]string{"Allow": "GET, OPTIONS, POST"}},
			{name: "OPTIONS", method: "OPTIONS", path: "/api/v1/contacts", key: "-", status: 204, hdr: map[string]string{"Allow": "GET, OPTIONS, POST"}},
			{name: "request id kept", method: "GET", path: "/healthz", header: map[string]string{"X-Request-Id": "trace-42"}, status: 200,
				hdr: map[string]string{"X-Request-Id": "trace-42"}},
		})
	})
}

func TestListAPI(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		var ids []string
		for i := range 7 {
			ids = append(ids, e.create("", "a", "tasks", fmt.Sprintf(`{"name":"task %d"}`, i)))
		}
		e.create("", "b", "tasks", `{"name":"b's task"}`)
		e.run([]scenario{
			{name: "default", method: "GET", path: "/api/v1/tasks", status: 200, want: map[string]any{"object": "tasks", "count": 7}},
			{name: "limit", method: "GET", path: "/api/v1/tasks?limit=2", status: 200, want: map[string]any{"count": 2}},
			{name: "offset", method: "GET", path: "/api/v1/tasks?limit=2&offset=6", status: 200, want: map[string]any{"count": 1}},
			{name: "past the end", method: "GET", path: "/api/v1/tasks?offset=7", status: 200, want: map[string]any{"count": 0, "records": []any{}}},
			{name: "far past the end", method: "GET", path: "/api/v1/tasks?offset=99999999999999999999", status: 200, want: map[string]any{"count": 0}},
			{name: "limit over 500 clamps", method: "GET", path: "/api/v1/tasks?limit=100000", status: 200, want: map[string]any{"count": 7}},
			{name: "huge limit clamps", method: "GET", path: "/api/v1/tasks?limit=99999999999999999999", status: 200, want: map[string]any{"count": 7}},
			{name: "empty object", method: "GET", path: "/api/v1/products", status: 200, want: map[string]any{"object": "products", "count": 0, "records": []any{}}},
			{name: "limit zero", method: "GET", path: "/api/v1/tasks?limit=0", status: 400, want: map[string]any{"field": "limit", "code": "invalid_parameter"}},
			{name: "limit negative", method: "GET", path: "/api/v1/tasks?limit=-1", status: 400, want: map[string]any{"field": "limit"}},
			{name: "limit fraction", method: "GET", path: "/api/v1/tasks?limit=1.5", status: 400, want: map[string]any{"field": "limit"}},
			{name: "limit word", method: "GET", path: "/api/v1/tasks?limit=ten", status: 400, want: map[string]any{"field": "limit"}},
			{name: "limit empty", method: "GET", path: "/api/v1/tasks?limit=", status: 400, want: map[string]any{"field": "limit"}},
			{name: "limit plus", method: "GET", path: "/api/v1/tasks?limit=%2B5", status: 400, want: map[string]any{"field": "limit"}},
			{name: "limit twice", method: "GET", path: "/api/v1/tasks?limit=1&limit=2", status: 400, want: map[string]any{"field": "limit"}},
			{name: "offset negative", method: "GET", path: "/api/v1/tasks?offset=-5", status: 400, want: map[string]any{"field": "offset"}},
			{name: "offset word", method: "GET", path: "/api/v1/tasks?offset=x", status: 400, want: map[string]any{"field": "offset"}},
			{name: "unknown parameter", method: "GET", path: "/api/v1/tasks?limt=5", status: 400,
				want: map[string]any{"field": "limt", "error": "unknown query parameter limt; did you mean limit?"}},
			{name: "bad escape", method: "GET", path: "/api/v1/tasks?limit=%zz", status: 400},
			{name: "unknown object", method: "GET", path: "/api/v1/widgets", status: 404},
		})

		// Pages of every size walk the list oldest first, without repeats or gaps.
		for _, limit := range []int{1, 2, 3, 7} {
			var got []string
			for offset := 0; ; offset += limit {
				r := e.do("GET", fmt.Sprintf("/api/v1/tasks?limit=%d&offset=%d", limit, offset), "a", "", nil)
				recs := r.body["records"].([]any)
				for _, rec := range recs {
					got = append(got, rec.(map[string]any)["id"].(string))
				}
				if len(recs) < limit {
					break
				}
			}
			if strings.Join(got, ",") != strings.Join(ids, ",") {
				t.Errorf("limit %d pages gave %v, want %v", limit, got, ids)
			}
		}
	})
}

func TestListClampsTo500(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		for i := range 501 {
			if _, err := e.eng.Write(context.Background(), engine.WriteRequest{BusinessID: e.biz["a"], Object: "products", Op: engine.Create,
				Fields: map[string]any{"name": fmt.Sprint(i)}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, path := range []string{"/api/v1/products?limit=501", "/api/v1/products?limit=1000000"} {
			if r := e.do("GET", path, "a", "", nil); r.status != 200 || r.body["count"] != 500.0 {
				t.Errorf("GET %s: %d, count %v; want 200 and 500", path, r.status, r.body["count"])
			}
		}
		if r := e.do("GET", "/api/v1/products?offset=500", "a", "", nil); r.body["count"] != 1.0 {
			t.Errorf("offset 500: count %v, want 1", r.body["count"])
		}
	})
}

func TestPatchWithoutChangeKeepsUpdatedAt(t *testing.T) {
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		e := newEnv(t, kind)
		id := e.create("", "a", "deals", `{"name":"Boiler","amount":10}`)
		before := e.do("GET", "/api/v1/deals/"+id, "a", "", nil)
		for _, body := range []string{`{}`, `{"amount":10,"name":"Boiler"}`, `{"stage":null}`} {
			r := e.do("PATCH", "/api/v1/deals/"+id, "a", body, nil)
			if r.status != http.StatusOK || r.body["updated_at"] != before.body["updated_at"] {
				t.Errorf("PATCH %s: %d, updated_at %v; want 200 and %v", body, r.status, r.body["updated_at"], before.body["updated_at"])
			}
		}
		r := e.do("PATCH", "/api/v1/deals/"+id, "a", `{"amount":11}`, nil)
		if r.body["updated_at"] == before.body["updated_at"] || r.body["created_at"] != before.body["created_at"] {
			t.Errorf("a real change: updated_at %v created_at %v; before %v %v", r.body["updated_at"], r.body["created_at"],
				before.body["updated_at"], before.body["created_at"])
		}
	})
}
