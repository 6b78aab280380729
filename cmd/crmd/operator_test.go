package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crmd/crmd/objects/storetest"
)

// wantLine checks that a command succeeded and printed exactly one line,
// matching pattern, on stdout; it returns the line.
func wantLine(t *testing.T, r result, pattern *regexp.Regexp) string {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("want exit status 0:\n%v", r)
	}
	line, ok := strings.CutSuffix(r.stdout, "\n")
	if !ok || strings.Contains(line, "\n") || !pattern.MatchString(line) {
		t.Fatalf("want stdout to be one line matching %s and nothing else:\n%v", pattern, r)
	}
	return line
}

// TestOperatorCommands runs the business and key commands exactly as
// scripts use them: what goes to stdout, exit statuses, flags in any order,
// CRMD_DB, and that a key created on the command line works on the API.
func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)

		// migrate brings a fresh database up to date, and is idempotent.
		for range 2 {
			if r := crmd(t, "migrate", "--db", dsn); r.code != 0 || r.stdout != "" {
				t.Fatalf("want exit status 0 and nothing on stdout:\n%v", r)
			}
		}

		// business create prints the id alone, with --db before or after NAME.
		acmeID := wantLine(t, crmd(t, "business", "create", "--db", dsn, "Acme Corp"), idPattern)
		betaID := wantLine(t, crmd(t, "business", "create", "Beta", "--db", dsn), idPattern)
		if acmeID == betaID {
			t.Fatalf("two businesses got the same id %s", acmeID)
		}

		t.Run("business list", func(t *testing.T) {
			out := crmdOK(t, "business", "list", "--db", dsn)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 3 || !slices.Equal(strings.Fields(lines[0]), []string{"ID", "NAME", "CREATED"}) {
				t.Fatalf("want a header and two rows, got:\n%s", out)
			}
			for _, b := range []struct{ id, name string }{{acmeID, "Acme Corp"}, {betaID, "Beta"}} {
				if !slices.ContainsFunc(lines[1:], func(l string) bool {
					return strings.HasPrefix(l, b.id+" ") && strings.Contains(l, " "+b.name+" ")
				}) {
					t.Errorf("no row for %s %q in:\n%s", b.id, b.name, out)
				}
			}

			out = crmdOK(t, "business", "list", "--json", "--db", dsn)
			var bs []struct {
				ID, Name  string
				CreatedAt time.Time `json:"created_at"`
			}
			if err := json.Unmarshal([]byte(out), &bs); err != nil {
				t.Fatalf("business list --json: %v\n%s", err, out)
			}
			got := map[string]string{}
			for _, b := range bs {
				if b.CreatedAt.IsZero() {
					t.Errorf("business %s has no created_at:\n%s", b.ID, out)
				}
				got[b.ID] = b.Name
			}
			if want := map[string]string{acmeID: "Acme Corp", betaID: "Beta"}; !mapsEqual(got, want) {
				t.Errorf("business list --json: got %v, want %v\n%s", got, want, out)
			}
		})

		// key create prints the key alone; --business takes a name or an id.
		key := wantLine(t, crmd(t, "key", "create", "--business", "Acme Corp", "--name", "ci", "--db", dsn), keyPattern)
		betaKey := wantLine(t, crmd(t, "key", "create", "--db", dsn, "--business", betaID), keyPattern)
		if key == betaKey {
			t.Fatalf("two keys are the same: %s", key)
		}

		var row keyRow
		t.Run("key list", func(t *testing.T) {
			out := crmdOK(t, "key", "list", "--business", "Acme Corp", "--json", "--db", dsn)
			var raw []map[string]json.RawMessage
			if err := json.Unmarshal([]byte(out), &raw); err != nil || len(raw) != 1 {
				t.Fatalf("want a JSON array of one key (err %v):\n%s", err, out)
			}
			var fields []string
			for f := range raw[0] {
				fields = append(fields, f)
			}
			slices.Sort(fields)
			if want := []string{"created_at", "id", "last_used_at", "name", "prefix", "revoked_at"}; !slices.Equal(fields, want) {
				t.Errorf("key list --json fields: got %v, want exactly %v", fields, want)
			}
			row = keyByPrefix(t, listKeys(t, dsn, "Acme Corp"), key)
			switch {
			case !idPattern.MatchString(row.ID):
				t.Errorf("key id %q is not an id", row.ID)
			case row.Name != "ci":
				t.Errorf("key name %q, want ci", row.Name)
			case len(row.Prefix) < len("ak_")+4 || len(row.Prefix) >= len(key):
				t.Errorf("prefix %q is not a recognisable part of the key", row.Prefix)
			case row.CreatedAt.IsZero() || time.Since(row.CreatedAt) > time.Hour || time.Until(row.CreatedAt) > time.Minute:
				t.Errorf("created_at %v is not about now", row.CreatedAt)
			case row.LastUsedAt != nil:
				t.Errorf("last_used_at of an unused key is %v, want null", row.LastUsedAt)
			case row.RevokedAt != nil:
				t.Errorf("revoked_at of a new key is %v, want null", row.RevokedAt)
			}
			if strings.Contains(out, key) {
				t.Errorf("key list --json shows the whole key, which must be shown only once:\n%s", out)
			}

			out = crmdOK(t, "key", "list", "--business", "Acme Corp", "--db", dsn)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 2 || !slices.Equal(strings.Fields(lines[0]), []string{"ID", "NAME", "PREFIX", "CREATED", "LAST", "USED", "REVOKED"}) {
				t.Fatalf("want a header and one row, got:\n%s", out)
			}
			if f := strings.Fields(lines[1]); len(f) < 3 || f[0] != row.ID || f[1] != "ci" || f[2] != row.Prefix {
				t.Errorf("row does not show id %s, name ci and prefix %s:\n%s", row.ID, row.Prefix, out)
			}
			if strings.Contains(out, key) {
				t.Errorf("key list shows the whole key:\n%s", out)
			}
		})
		if row.ID == "" {
			t.FailNow()
		}

		t.Run("the key works on the API", func(t *testing.T) {
			srv := startServer(t, dsn)
			id := recordID(t, srv.mustSend(t, http.StatusCreated, "POST", "/api/v1/contacts", bearer(key), `{"first_name":"Ada","email":"ada@example.com"}`))
			srv.mustSend(t, http.StatusOK, "GET", "/api/v1/contacts/"+id, xAPIKey(key), "")
			// Beta's key works, for Beta only.
			srv.mustSend(t, http.StatusNotFound, "GET", "/api/v1/contacts/"+id, bearer(betaKey), "")
			srv.stop(t)
		})

		betaRow := keyByPrefix(t, listKeys(t, dsn, "Beta"), betaKey)
		t.Run("errors", func(t *testing.T) {
			for _, tc := range []struct {
				name   string
				args   []string
				code   int
				stderr string
			}{
				{"duplicate business", []string{"business", "create", "Acme Corp"}, 1, `a business named "Acme Corp" already exists`},
				{"empty business name", []string{"business", "create", ""}, 1, "must not be empty"},
				{"business create without NAME", []string{"business", "create"}, 2, "missing NAME"},
				{"business create with two names", []string{"business", "create", "Acme", "Corp"}, 2, `unexpected argument "Corp"`},
				{"key create for an unknown business", []string{"key", "create", "--business", "Nope"}, 1, `no business named "Nope"`},
				{"key list for an unknown business", []string{"key", "list", "--business", "Nope"}, 1, `no business named "Nope"`},
				{"key revoke for an unknown business", []string{"key", "revoke", "--business", "Nope", row.ID}, 1, `no business named "Nope"`},
				{"key revoke of an unknown key id", []string{"key", "revoke", "--business", "Acme Corp", "0000000000000000000000000z"}, 1, "no key with id 0000000000000000000000000z"},
				{"key revoke of another business's key", []string{"key", "revoke", "--business", "Acme Corp", betaRow.ID}, 1, "no key with id " + betaRow.ID},
				{"key create without --business", []string{"key", "create", "--name", "x"}, 2, "--business is required"},
				{"key list without --business", []string{"key", "list", "--json"}, 2, "--business is required"},
				{"key revoke without --business", []string{"key", "revoke", row.ID}, 2, "--business is required"},
				{"key revoke without KEY_ID", []string{"key", "revoke", "--business", "Acme Corp"}, 2, "missing KEY_ID"},
				{"key revoke with two KEY_IDs", []string{"key", "revoke", "--business", "Acme Corp", row.ID, betaRow.ID}, 2, "unexpected argument"},
				{"key create with an argument", []string{"key", "create", "--business", "Acme Corp", "extra"}, 2, `unexpected argument "extra"`},
				{"unknown flag", []string{"key", "list", "--business", "Acme Corp", "--bogus"}, 2, "bogus"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					r := crmd(t, append(tc.args, "--db", dsn)...)
					if r.code != tc.code || r.stdout != "" || !strings.Contains(r.stderr, tc.stderr) {
						t.Errorf("want exit status %d, nothing on stdout, and %q on stderr:\n%v", tc.code, tc.stderr, r)
					}
				})
			}
			// Nothing above changed the keys.
			for _, k := range []keyRow{keyByPrefix(t, listKeys(t, dsn, "Acme Corp"), key), keyByPrefix(t, listKeys(t, dsn, "Beta"), betaKey)} {
				if k.RevokedAt != nil {
					t.Errorf("key %s was revoked by a command that failed", k.ID)
				}
			}
		})

		t.Run("key revoke", func(t *testing.T) {
			// Flags after the positional argument.
			r := crmd(t, "key", "revoke", row.ID, "--business", "Acme Corp", "--db", dsn)
			if r.code != 0 || r.stdout != "" {
				t.Fatalf("want exit status 0 and nothing on stdout:\n%v", r)
			}
			got := keyByPrefix(t, listKeys(t, dsn, "Acme Corp"), key)
			if got.RevokedAt == nil || got.RevokedAt.Before(got.CreatedAt) {
				t.Errorf("after key revoke, revoked_at is %v (created_at %v)", got.RevokedAt, got.CreatedAt)
			}
			if b := keyByPrefix(t, listKeys(t, dsn, "Beta"), betaKey); b.RevokedAt != nil {
				t.Errorf("revoking Acme's key revoked Beta's too")
			}
		})

		t.Run("CRMD_DB", func(t *testing.T) {
			env := []string{"CRMD_DB=" + dsn}
			r := crmdEnv(t, env, "business", "list", "--json")
			if r.code != 0 || !strings.Contains(r.stdout, acmeID) {
				t.Errorf("want exit status 0 and business %s listed:\n%v", acmeID, r)
			}
			k := wantLine(t, crmdEnv(t, env, "key", "create", "--business", "Beta"), keyPattern)
			keyByPrefix(t, listKeys(t, dsn, "Beta"), k)

			// --db wins over CRMD_DB.
			env = []string{"CRMD_DB=" + filepath.Join(t.TempDir(), "other.db")}
			r = crmdEnv(t, env, "business", "list", "--json", "--db", dsn)
			if r.code != 0 || !strings.Contains(r.stdout, acmeID) {
				t.Errorf("want exit status 0 and business %s listed:\n%v", acmeID, r)
			}
		})
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestUsage checks the exit statuses of help and of commands called wrongly.
func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string // on stdout or stderr
	}{
		{"no command", nil, 2, "crmd key create --business NAME"},
		{"help", []string{"help"}, 0, "crmd key create --business NAME"},
		{"-h", []string{"-h"}, 0, "crmd business create NAME"},
		{"--help", []string{"--help"}, 0, "crmd key revoke --business NAME KEY_ID"},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"unknown business subcommand", []string{"business", "frob"}, 2, `unknown command "business frob"`},
		{"key without subcommand", []string{"key"}, 2, `unknown command "key"`},
		{"serve with a bad log format", []string{"serve", "--log-format", "xml"}, 2, "--log-format must be text or json"},
		{"serve with an argument", []string{"serve", "now"}, 2, `unexpected argument "now"`},
		{"serve with a bad body limit", []string{"serve", "--max-body", "lots"}, 2, "max-body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := crmd(t, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.says) {
				t.Errorf("want exit status %d and output saying %q:\n%v", tc.code, tc.says, r)
			}
			if r.code != 0 && r.stdout != "" {
				t.Errorf("a failing command wrote to stdout:\n%v", r)
			}
		})
	}
}

// TestSubcommandHelp checks that --help on a subcommand says how to use it.
func TestSubcommandHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"key", "create", "--help"}, "--business"},
		{[]string{"key", "revoke", "-h"}, "KEY_ID"},
		{[]string{"business", "create", "--help"}, "NAME"},
		{[]string{"serve", "--help"}, "--addr"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			r := crmd(t, tc.args...)
			if r.code != 0 || !strings.Contains(r.stdout+r.stderr, tc.says) {
				t.Errorf("want exit status 0 and a usage that mentions %q:\n%v", tc.says, r)
			}
		})
	}
}

// TestServeEmptyDatabaseHint checks that crmd serve on a database without
// businesses says how to create the first one, and stops saying it once
// there is one.
func TestServeEmptyDatabaseHint(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		hint := func(s *server) bool {
			return slices.ContainsFunc(s.logMessages(), func(m string) bool { return strings.Contains(m, "crmd business create") })
		}

		srv := startServer(t, dsn)
		if !hint(srv) {
			t.Errorf(`on an empty database, crmd serve logged no hint containing "crmd business create":%s`, "\n"+srv.stderr.String())
		}
		srv.stop(t)

		newBusiness(t, dsn, "Acme")
		srv = startServer(t, dsn)
		if hint(srv) {
			t.Errorf("with a business in the database, crmd serve still logs the hint:\n%s", srv.stderr.String())
		}
		srv.stop(t)
	})
}

// TestHealthz checks that GET /healthz answers 200 when the store is
// reachable: on an empty database as on one with a business.
func TestHealthz(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		srv := startServer(t, dsn)
		for i, step := range []string{"on an empty database", "with a business"} {
			if i == 1 {
				newBusiness(t, dsn, "Acme")
			}
			r, err := srv.send("GET", "/healthz", nil, "")
			switch {
			case err != nil:
				t.Fatalf("GET /healthz %s: %v", step, err)
			case r.status != http.StatusOK:
				t.Errorf("GET /healthz %s: got %v, want 200", step, r)
			}
		}
	})
}

// TestServeLogHidesDatabasePassword checks that the password of a
// PostgreSQL URL given to --db, in the user info or as the password
// parameter, does not end up in the log of crmd serve (on an empty database,
// where it logs how to create a business).
func TestServeLogHidesDatabasePassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		put  func(u *url.URL, user, password string)
	}{
		{"in the user info", func(u *url.URL, user, password string) {
			u.User = url.UserPassword(user, password)
		}},
		{"as a parameter", func(u *url.URL, user, password string) {
			u.User = url.User(user)
			q := u.Query()
			q.Set("password", password)
			u.RawQuery = q.Encode()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(storetest.DSN(t, "postgres"))
			if err != nil {
				t.Fatal(err)
			}
			secret, ok := u.User.Password()
			if !ok {
				// A server that trusts local connections ignores the password.
				secret = "crmd-e2e-not-a-real-password"
			}
			tc.put(u, u.User.Username(), secret)
			srv := spawnServer(t, u.String())
			select {
			case addr := <-srv.listening:
				srv.listening <- addr // put it back for waitListening
			case <-srv.exited:
				if strings.Contains(srv.stderr.String(), "password authentication failed") {
					t.Skip("the PostgreSQL server checks passwords and CRMD_TEST_POSTGRES_URL has none")
				}
			case <-time.After(processTimeout):
			}
			srv.waitListening(t)
			srv.stop(t)
			if log := srv.stderr.String(); strings.Contains(log, secret) {
				t.Errorf("the log of crmd serve shows the database password (here replaced by <PASSWORD>):\n%s", strings.ReplaceAll(log, secret, "<PASSWORD>"))
			}
		})
	}
}
