package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/httpapi"
	"github.com/crmd/crmd/objects/storetest"
)

// FuzzWriteBody sends arbitrary bodies to create and update records. Whatever
// the body, the answer is a success or a client error with the error body,
// never a 500 or a panic; and a record that was created reads back as it
// was answered. The seed corpus is in testdata/fuzz/FuzzWriteBody.
func FuzzWriteBody(f *testing.F) {
	f.Add(uint8(0), []byte(`{"first_name":"Ada","last_name":"Lovelace","email":"ada@example.com"}`))
	f.Add(uint8(1), []byte(`{"line_items":[{"qty":1e3}],"amount":-0.0,"due_date":"2026-02-28"}`))
	ctx := context.Background()
	eng := engine.New(storetest.Open(f, "sqlite"), engine.Options{})
	h := httpapi.New(eng, httpapi.Options{MaxBody: 4096})
	b, err := eng.CreateBusiness(ctx, "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	key, _, err := eng.CreateAPIKey(ctx, b.ID, "")
	if err != nil {
		f.Fatal(err)
	}
	objectNames := []string{"contacts", "invoices", "deals", "companies", "jobs"}
	targets := map[string]string{}
	for _, o := range objectNames {
		rec, err := eng.Write(ctx, engine.WriteRequest{BusinessID: b.ID, Object: o, Op: engine.Create, Fields: map[string]any{}})
		if err != nil {
			f.Fatal(err)
		}
		targets[o] = rec.Record.ID
	}
	send := func(method, path string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		object := objectNames[int(which)%len(objectNames)]
		for _, rq := range []struct{ method, path string }{
			{"POST", "/api/v1/" + object},
			{"PATCH", "/api/v1/" + object + "/" + targets[object]},
		} {
			w := send(rq.method, rq.path, body)
			switch w.Code {
			case http.StatusCreated, http.StatusOK:
				var rec map[string]any
				if err := json.Unmarshal(w.Body.Bytes(), &rec); err != nil {
					t.Fatalf("%s: success with a body that is not JSON: %v\n%s", rq.method, err, w.Body)
				}
				id, _ := rec["id"].(string)
				got := send("GET", "/api/v1/"+object+"/"+id, nil)
				if got.Code != http.StatusOK || got.Body.String() != w.Body.String() {
					t.Fatalf("%s answered\n%s\nbut the record reads back as %d\n%s", rq.method, w.Body, got.Code, got.Body)
				}
			case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
				var e struct{ Error, Code string }
				if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" || e.Code == "" {
					t.Fatalf("%s: %d without the error body: %s", rq.method, w.Code, w.Body)
				}
			default:
				t.Fatalf("%s %q: status %d\n%s", rq.method, body, w.Code, w.Body)
			}
		}
	})
}
