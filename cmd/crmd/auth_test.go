package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crmd/crmd/objects/storetest"
)

// contactCount lists contacts with key and returns how many there are (up
// to one page).
func contactCount(t *testing.T, s *server, key string) int {
	t.Helper()
	r := s.mustSend(t, http.StatusOK, "GET", "/api/v1/contacts?limit=500", bearer(key), "")
	var l struct{ Count int }
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatalf("list: %v in %v", err, r)
	}
	return l.Count
}

// mistyped returns key with its last character changed.
func mistyped(key string) string {
	last := "x"
	if strings.HasSuffix(key, last) {
		last = "y"
	}
	return key[:len(key)-1] + last
}

// TestRevocationIsImmediate revokes a key with the CLI, a process of its
// own, while crmd serve runs on the same database: the very next request
// with the key is refused. On PostgreSQL two servers share the database,
// and the very next request to each is refused.
func TestRevocationIsImmediate(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		key, keyID := newBusiness(t, dsn, "Acme")
		other, _ := newKey(t, dsn, "Acme", "other")

		n := 1
		if kind == "postgres" {
			n = 2
		}
		var servers []*server
		for range n {
			servers = append(servers, spawnServer(t, dsn)) // started together: they migrate at once
		}
		for _, s := range servers {
			s.waitListening(t)
		}
		for _, s := range servers {
			s.mustSend(t, http.StatusCreated, "POST", "/api/v1/contacts", bearer(key), `{"first_name":"Ada","email":"ada@example.com"}`)
			s.mustSend(t, http.StatusOK, "GET", "/api/v1/contacts", xAPIKey(key), "")
		}

		if r := crmd(t, "key", "revoke", "--business", "Acme", keyID, "--db", dsn); r.code != 0 {
			t.Fatalf("want exit status 0:\n%v", r)
		}

		for i, s := range servers {
			for _, req := range []struct {
				method, path string
				h            http.Header
				body         string
			}{
				{"GET", "/api/v1/contacts", bearer(key), ""}, // the very next request
				{"GET", "/api/v1/contacts", xAPIKey(key), ""},
				{"POST", "/api/v1/contacts", bearer(key), `{"first_name":"Eve"}`},
			} {
				r, err := s.send(req.method, req.path, req.h, req.body)
				if err != nil {
					t.Fatalf("server %d: %s %s: %v", i+1, req.method, req.path, err)
				}
				var e struct{ Error string }
				switch {
				case r.status != http.StatusUnauthorized:
					t.Errorf("server %d: %s %s with a revoked key: got %v, want 401", i+1, req.method, req.path, r)
				case r.header.Get("WWW-Authenticate") != "Bearer":
					t.Errorf("server %d: 401 with WWW-Authenticate %q, want Bearer", i+1, r.header.Get("WWW-Authenticate"))
				case json.Unmarshal(r.body, &e) != nil || e.Error == "":
					t.Errorf("server %d: 401 without an error body: %v", i+1, r)
				}
			}
			// The business's other key still works, and the refused create
			// stored nothing.
			if got := contactCount(t, s, other); got != n {
				t.Errorf("server %d: %d contacts, want %d", i+1, got, n)
			}
		}
	})
}

// TestLastUsedTracking uses one of two keys, stops the server with SIGTERM,
// and finds last_used_at set for the used key only; a second round of use
// moves it on.
func TestLastUsedTracking(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		used, _ := newBusiness(t, dsn, "Acme")
		unused, _ := newKey(t, dsn, "Acme", "unused")

		use := func() (from, to time.Time) {
			t.Helper()
			srv := startServer(t, dsn)
			from = time.Now()
			id := recordID(t, srv.mustSend(t, http.StatusCreated, "POST", "/api/v1/contacts", bearer(used), `{"first_name":"Ada"}`))
			srv.mustSend(t, http.StatusOK, "GET", "/api/v1/contacts/"+id, xAPIKey(used), "")
			srv.mustSend(t, http.StatusOK, "GET", "/api/v1/contacts", bearer(used), "")
			srv.mustSend(t, http.StatusUnauthorized, "GET", "/api/v1/contacts", bearer(mistyped(unused)), "")
			to = time.Now()
			srv.stop(t)
			return from, to
		}
		check := func(from, to time.Time) time.Time {
			t.Helper()
			rows := listKeys(t, dsn, "Acme")
			u := keyByPrefix(t, rows, used)
			// The server stamps times to the microsecond on this machine's clock.
			if u.LastUsedAt == nil || u.LastUsedAt.Before(from.Truncate(time.Millisecond)) || u.LastUsedAt.After(to.Add(time.Millisecond)) {
				t.Fatalf("last_used_at of the used key is %v, want between %v and %v", u.LastUsedAt, from, to)
			}
			if un := keyByPrefix(t, rows, unused); un.LastUsedAt != nil {
				t.Errorf("last_used_at of the unused key is %v, want null", un.LastUsedAt)
			}
			return *u.LastUsedAt
		}

		first := check(use())
		second := check(use())
		if !second.After(first) {
			t.Errorf("last_used_at went from %v to %v after more use", first, second)
		}
	})
}
