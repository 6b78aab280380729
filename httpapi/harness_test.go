package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/crmd/crmd/engine"
	_ "github.com/crmd/crmd/engine/actions"
	"github.com/crmd/crmd/httpapi"
	"github.com/crmd/crmd/objects/storetest"
)

// testMaxBody is the body limit of the test server, small enough to test.
const testMaxBody = 64 << 10

// env is crmd serving over loopback from a real store, with two businesses,
// a and b, each with a key, and a revoked key of a.
type env struct {
	t    *testing.T
	url  string
	eng  *engine.Engine
	biz  map[string]string // "a", "b" → business id
	keys map[string]string // "a", "b", "revoked" → key
	ids  map[string]string // fixture name → record id
	// tokens are the inbound webhook tokens packs made, shown once when
	// applied: "a/web-form" → token.
	tokens map[string]string
}

func newEnv(t *testing.T, kind string) *env {
	t.Helper()
	ctx := context.Background()
	eng := engine.New(storetest.Open(t, kind), engine.Options{})
	srv := httptest.NewServer(httpapi.New(eng, httpapi.Options{MaxBody: testMaxBody}))
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL, eng: eng, biz: map[string]string{}, keys: map[string]string{}, ids: map[string]string{}, tokens: map[string]string{}}
	for _, name := range []string{"a", "b"} {
		b, err := eng.CreateBusiness(ctx, "business "+name)
		if err != nil {
			t.Fatal(err)
		}
		e.biz[name] = b.ID
		key, _, err := eng.CreateAPIKey(ctx, b.ID, name)
		if err != nil {
			t.Fatal(err)
		}
		e.keys[name] = key
	}
	key, k, err := eng.CreateAPIKey(ctx, e.biz["a"], "old")
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.RevokeAPIKey(ctx, e.biz["a"], k.ID); err != nil {
		t.Fatal(err)
	}
	e.keys["revoked"] = key
	return e
}

// response is an answer, with its body parsed when it is JSON.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// do sends a request as the holder of key ("a", "b", "revoked", or "" for
// none) and returns the answer. Placeholders in the path, body and headers
// are expanded. A body is sent as application/json unless hdr sets
// Content-Type.
func (e *env) do(method, path, key, body string, hdr map[string]string) *response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(e.expand(body))
	}
	req, err := http.NewRequest(method, e.url+e.expand(path), rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if k, ok := e.keys[key]; ok {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, e.expand(v))
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	r := &response{status: res.StatusCode, header: res.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			e.t.Fatalf("%s %s: body is not a JSON object: %v\n%s", method, path, err, raw)
		}
	}
	return r
}

// create makes a record as business biz and remembers its id as name.
func (e *env) create(name, biz, object, body string) string {
	e.t.Helper()
	r := e.do("POST", "/api/v1/"+object, biz, body, nil)
	if r.status != http.StatusCreated {
		e.t.Fatalf("creating fixture %s: %d %s", name, r.status, r.raw)
	}
	id := r.body["id"].(string)
	if name != "" {
		e.ids[name] = id
	}
	return id
}

// expand replaces {name} with the id of fixture name, and {key:name} with
// the key of name.
func (e *env) expand(s string) string {
	for name, id := range e.ids {
		s = strings.ReplaceAll(s, "{"+name+"}", id)
	}
	for name, k := range e.keys {
		s = strings.ReplaceAll(s, "{key:"+name+"}", k)
	}
	return s
}

// A scenario is one request and what must come back.
type scenario struct {
	name   string
	method string
	path   string
	key    string // "a" when empty; "-" for no key
	header map[string]string
	body   string
	status int
	want   map[string]any    // top-level fields the body must have, compared as JSON
	has    []string          // substrings the raw body must contain
	absent []string          // top-level fields the body must not have
	hdr    map[string]string // response headers that must be set
}

func (e *env) run(scenarios []scenario) {
	e.t.Helper()
	for _, sc := range scenarios {
		e.t.Run(sc.name, func(t *testing.T) {
			key := sc.key
			switch key {
			case "":
				key = "a"
			case "-":
				key = ""
			}
			r := e.do(sc.method, sc.path, key, sc.body, sc.header)
			if r.status != sc.status {
				t.Fatalf("%s %s: status %d, want %d\n%s", sc.method, sc.path, r.status, sc.status, r.raw)
			}
			checkEnvelope(t, r)
			for k, want := range sc.want {
				if got := jsonOf(t, r.body[k]); got != jsonOf(t, e.expandAny(want)) {
					t.Errorf("%s = %s, want %s\nbody: %s", k, got, jsonOf(t, want), r.raw)
				}
			}
			for _, s := range sc.has {
				if !bytes.Contains(r.raw, []byte(e.expand(s))) {
					t.Errorf("body lacks %q\nbody: %s", s, r.raw)
				}
			}
			for _, k := range sc.absent {
				if _, ok := r.body[k]; ok {
					t.Errorf("body has %s\nbody: %s", k, r.raw)
				}
			}
			for k, v := range sc.hdr {
				if got := r.header.Get(k); got != e.expand(v) {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func (e *env) expandAny(v any) any {
	if s, ok := v.(string); ok {
		return e.expand(s)
	}
	return v
}

// checkEnvelope checks what every answer must have: a request id, a JSON
// body with the JSON content type (but for 204, which has neither), and the
// error body for every error.
func checkEnvelope(t *testing.T, r *response) {
	t.Helper()
	if r.header.Get("X-Request-Id") == "" {
		t.Error("no X-Request-Id")
	}
	if r.status == http.StatusNoContent {
		if len(r.raw) != 0 {
			t.Errorf("204 with a body: %s", r.raw)
		}
		return
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	if r.status >= 400 {
		if msg, _ := r.body["error"].(string); msg == "" {
			t.Errorf("error answer without an error message: %s", r.raw)
		}
		if code, _ := r.body["code"].(string); code == "" {
			t.Errorf("error answer without a code: %s", r.raw)
		}
		for k := range r.body {
			if k != "error" && k != "field" && k != "code" {
				t.Errorf("error body has unexpected field %s: %s", k, r.raw)
			}
		}
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
